"""Statistical tests that turn "the output is distributed as the target" into a p-value.

All functions take plain counts and probabilities, so the same tests judge our sampler,
a reader's exercise, and deliberately broken samplers.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Hashable, Iterable, Mapping

import numpy as np
from scipy import stats as _scipy_stats

SIGNIFICANCE = 0.001  # default significance level: a correct sampler fails a given test 1 time in 1000


@dataclass
class TestResult:
    statistic: float  # chi-square statistic
    dof: int  # degrees of freedom after pooling
    p_value: float
    n: int  # sample size
    bins: int  # bins after pooling

    def rejects(self, level: float = SIGNIFICANCE) -> bool:
        return self.p_value < level

    def __str__(self) -> str:
        return f"chi2={self.statistic:.2f}, dof={self.dof}, n={self.n}, p={self.p_value:.3g}"


def _pool(expected: np.ndarray, observed: np.ndarray, min_expected: float) -> tuple[np.ndarray, np.ndarray]:
    """Merge the bins whose expected count is below min_expected into one 'other' bin (rarest first)."""
    order = np.argsort(expected)
    small = order[expected[order] < min_expected]
    keep = np.setdiff1d(np.arange(len(expected)), small)
    e, o = list(expected[keep]), list(observed[keep])
    if len(small):
        e.append(expected[small].sum())
        o.append(observed[small].sum())
        # the pooled bin itself is still small: fold it into the smallest kept bin
        if e[-1] < min_expected and len(e) > 1:
            j = int(np.argmin(e[:-1]))
            e[j] += e.pop()
            o[j] += o.pop()
    return np.array(e), np.array(o)


def chi_square_gof(counts: Mapping[Hashable, int], probs: Mapping[Hashable, float],
                   min_expected: float = 5.0) -> TestResult:
    """Goodness of fit of observed counts to exact probabilities, pooling bins with expected count <
    min_expected.

    A sample outside the support of `probs` (probability 0) makes the p-value 0: it is impossible under the
    null.
    """
    n = int(sum(counts.values()))
    if n == 0:
        raise ValueError("no samples to test")
    if any(probs.get(k, 0.0) <= 0 for k, c in counts.items() if c > 0):
        return TestResult(float("inf"), 0, 0.0, n, 0)
    keys = [k for k in probs if probs[k] > 0]
    p = np.array([probs[k] for k in keys], dtype=float)
    p = p / p.sum()
    e, o = _pool(n * p, np.array([counts.get(k, 0) for k in keys], dtype=float), min_expected)
    if len(e) < 2:
        return TestResult(0.0, 0, 1.0, n, len(e))
    stat = float(((o - e) ** 2 / e).sum())
    dof = len(e) - 1
    return TestResult(stat, dof, float(_scipy_stats.chi2.sf(stat, dof)), n, len(e))


def two_sample_chi_square(a: Iterable[Hashable], b: Iterable[Hashable],
                          min_expected: float = 5.0) -> TestResult:
    """Do two samples come from the same distribution? A 2 x K contingency test with rare categories
    pooled."""
    ca, cb = Counter(a), Counter(b)
    na, nb = sum(ca.values()), sum(cb.values())
    if na == 0 or nb == 0:
        raise ValueError("both samples must be non-empty")
    keys = sorted(set(ca) | set(cb), key=lambda k: -(ca[k] + cb[k]))
    total = np.array([ca[k] + cb[k] for k in keys], dtype=float)
    obs_a = np.array([ca[k] for k in keys], dtype=float)
    # pool on the expected count of the smaller sample, so every cell of the table is large enough
    frac = min(na, nb) / (na + nb)
    e_small, o_a = _pool(total * frac, obs_a, min_expected)
    tot = e_small / frac
    if len(tot) < 2:
        return TestResult(0.0, 0, 1.0, na + nb, len(tot))
    table = np.stack([o_a, tot - o_a])
    stat, p, dof, _ = _scipy_stats.chi2_contingency(table, correction=False)
    return TestResult(float(stat), int(dof), float(p), na + nb, len(tot))


def tv_distance(counts: Mapping[Hashable, int], probs: Mapping[Hashable, float]) -> float:
    """Total-variation distance between the empirical distribution of counts and probs."""
    n = sum(counts.values())
    keys = set(counts) | set(probs)
    return 0.5 * sum(abs(counts.get(k, 0) / n - probs.get(k, 0.0)) for k in keys)


def tv_upper_bound(counts: Mapping[Hashable, int], probs: Mapping[Hashable, float], delta: float = 0.05,
                   max_bins: int = 64) -> float:
    """With confidence 1 - delta, TV(sampler, probs) is at most this.

    Uses the L1 deviation bound of Weissman et al. (2003):
    P(|p_hat - p|_1 >= eps) <= (2^K - 2) exp(-n eps^2 / 2), on K bins (the max_bins - 1 likeliest outcomes
    of probs, plus one bin for the rest). Merging bins can only shrink TV, so this bounds the distance
    visible at the resolution of those K bins (all of it when probs has at most max_bins - 1 outcomes).
    """
    n = sum(counts.values())
    top = sorted(probs, key=probs.get, reverse=True)[: max_bins - 1]
    merged_c = {k: counts.get(k, 0) for k in top}
    merged_p = {k: probs[k] for k in top}
    merged_c["rest"] = n - sum(merged_c.values())
    merged_p["rest"] = max(0.0, 1.0 - sum(merged_p.values()))
    K = len(merged_p)
    eps = math.sqrt(2.0 / n * (K * math.log(2) + math.log(1 / delta)))
    return min(1.0, tv_distance(merged_c, merged_p) + eps / 2)


# ----------------------------------------------------------------------------------------------
# Drawing the samples these tests judge (chapters 2-3 and the exercise checkers)
# ----------------------------------------------------------------------------------------------

def probs_to_dict(probs, min_prob: float = 0.0) -> dict[int, float]:
    """A probability vector [V] as {token id: probability}, keeping entries above min_prob."""
    p = np.asarray(probs.detach().cpu().double() if hasattr(probs, "detach") else probs, dtype=float)
    return {int(i): float(p[i]) for i in np.flatnonzero(p > min_prob)}


def emitted_token_counts(verify_fn, target_probs, draft_probs, n: int, generator=None) -> Counter:
    """Monte Carlo of one position: draw x ~ p_draft, run verify_fn with γ = 1, count the token it emits.

    The emitted token is x when it is accepted, else the replacement verify_fn returns; with a correct
    verify its distribution is target_probs, whatever draft_probs is.
    """
    import torch

    if target_probs.shape != draft_probs.shape or target_probs.dim() != 1:
        raise ValueError(f"need two probability vectors of the same length [V], "
                         f"got {tuple(target_probs.shape)} and {tuple(draft_probs.shape)}")
    xs = torch.multinomial(draft_probs, n, replacement=True, generator=generator)  # [n] draft proposals
    target_rows = torch.stack([target_probs, target_probs])  # [γ+1 = 2, V]; the bonus row is never used here
    counts: Counter = Counter()
    for x in xs:
        n_accepted, next_token = verify_fn(x[None], draft_probs[None], target_rows, generator)
        counts[int(x) if n_accepted == 1 else int(next_token)] += 1
    return counts


def speculative_sequence_counts(target, draft, prompt: list[int], n_tokens: int, gamma: int, sampling, n: int,
                                generator=None, verification: str = "token") -> Counter:
    """Counts of the first n_tokens of n speculative generations from the same prompt (verification: see
    `speculative_generate`)."""
    import torch

    from ..generate import speculative_generate
    ids = torch.tensor([prompt], device=next(target.parameters()).device)  # [1, T]
    return Counter(tuple(speculative_generate(target, draft, ids, n_tokens, gamma=gamma, sampling=sampling,
                                              generator=generator, verification=verification).tokens.tolist())
                   for _ in range(n))


def target_sequence_counts(model, prompt: list[int], n_tokens: int, sampling, n: int, generator=None,
                           batch_size: int = 16) -> Counter:
    """Plain (ancestral) sampling of n continuations of n_tokens from the target alone.

    Breadth first: all n samples draw their first token from one distribution; then every distinct
    prefix is scored (batched, no KV cache, no speculative code path) and each draws its next token as
    often as it occurs. An independent and cheap reference for the two-sample test.
    """
    import torch

    from ..sampling import logits_to_probs
    groups: Counter = Counter({(): n})  # prefix -> number of samples that share it
    device = next(model.parameters()).device
    with torch.inference_mode():
        for _ in range(n_tokens):
            prefixes, grown = list(groups), Counter()
            for start in range(0, len(prefixes), batch_size):
                chunk = prefixes[start:start + batch_size]
                # [m, T + d], equal lengths
                ids = torch.tensor([prompt + list(p) for p in chunk], device=device)
                probs = logits_to_probs(model(input_ids=ids).logits[:, -1], sampling)  # [m, V]
                for prefix, row in zip(chunk, probs):
                    for t in torch.multinomial(row, groups[prefix], replacement=True,
                                               generator=generator).tolist():
                        grown[prefix + (t,)] += 1
            groups = grown
    return groups


def emitted_distribution(target_probs, draft_probs, sampled_from=None, resample_from=None):  # [V] x2 -> [V]
    """The exact distribution of the token one step of the accept/reject rule emits (γ = 1).

    P(x) = s(x) * min(1, p_target(x) / p_draft(x)) + P(reject) * r(x), where s (`sampled_from`) is what the
    draft really sampled from (default: draft_probs) and r (`resample_from`) what a rejection draws from
    (default: the residual). With both defaults this is exactly target_probs; the options describe bugs.
    """
    import torch

    from ..verify import residual
    s = draft_probs if sampled_from is None else sampled_from
    r = residual(target_probs, draft_probs) if resample_from is None else resample_from
    # verify: u * 0 < p_target(x) iff p_target(x) > 0
    ratio = torch.where(draft_probs > 0,
                        target_probs / draft_probs.clamp(min=torch.finfo(draft_probs.dtype).tiny),
                        (target_probs > 0).to(draft_probs.dtype))
    accept = s * ratio.clamp(max=1)  # [V] P(draft samples x and it is accepted)
    return accept + (1 - accept.sum()) * r
