"""Block verification (`verify_block`, Sun et al. 2025): the target's law exactly, never fewer tokens kept.

Three levels, each with its power shown on a deliberately broken variant:
- exact arithmetic: on random context-dependent toy laws (vocabulary 3, float64), the law of the first γ + 1
  tokens that one iteration (plus the target's own continuation) produces equals the target's to 1e-12, and
  the expected number of kept tokens is never below token-by-token verification's;
- the function's own draws: for one fixed draft, the counts of (n_accepted, next token) over 20,000 calls
  against the law computed from `block_weights`, chi-square at SIGNIFICANCE = 0.001;
- the loop: `speculative_generate(..., verification="block")` on tiny Llamas against the exact law of the next
  5 tokens, chi-square at SIGNIFICANCE = 0.001.
Seeds are fixed, so every run draws the same samples.
"""
import itertools
from collections import Counter

import pytest
import torch

import specdec_ref as sd
from specdec_ref.lab.stats import SIGNIFICANCE, chi_square_gof, speculative_sequence_counts
from specdec_ref.models.toy import exact_sequence_distribution, tiny_pair
from specdec_ref.sampling import sample
from specdec_ref.verify import block_weights, expected_accepted, verify, verify_block, verify_greedy

V = 3
T1 = sd.SamplingConfig(1.0)


class ToyLaws:
    """A target p and a draft q over V tokens whose next-token laws depend on the whole prefix."""

    def __init__(self, seed: int):
        self.g = torch.Generator().manual_seed(seed)
        self.p, self.q = {}, {}

    def _law(self, table, prefix, scale):
        if prefix not in table:
            table[prefix] = (scale * torch.randn(V, generator=self.g, dtype=torch.float64)).softmax(-1)
        return table[prefix]

    def target(self, prefix):
        return self._law(self.p, tuple(prefix), 2.0)

    def draft(self, prefix):
        return self._law(self.q, tuple(prefix), 1.0)

    def rows(self, x):  # a drafted chain -> (draft rows [γ, V], target rows [γ+1, V])
        return (torch.stack([self.draft(x[:i]) for i in range(len(x))]),
                torch.stack([self.target(x[:i]) for i in range(len(x) + 1)]))


def block_outcomes(x, q_rows, p_rows, residual_weight=True):  # -> [(P, n, law of the next token [V])]
    """One iteration's outcomes for a drafted chain, from `block_weights`: n = max{i : u_i < h_i}, so
    P(n = i) = h_i Π_{j > i} (1 - h_j); then the bonus row or normalise(max(w_n p - q, 0)).
    residual_weight=False is the broken variant (max(p - q, 0): the token rule's residual)."""
    w, h = block_weights(torch.tensor(x), q_rows, p_rows)
    gamma, out, alive = len(x), [], 1.0
    for i in range(gamma, -1, -1):
        pi = alive * float(h[i])
        alive -= pi
        if i == gamma:
            law = p_rows[gamma]
        else:
            r = ((w[i] if residual_weight else 1.0) * p_rows[i] - q_rows[i]).clamp(min=0)
            law = r / r.sum() if r.sum() > 0 else p_rows[i]
        out.append((pi, i, law))
    return out


def token_outcomes(x, q_rows, p_rows):
    out, alive = [], 1.0
    for i in range(len(x)):
        a = min(1.0, float(p_rows[i, x[i]] / q_rows[i, x[i]]))
        r = (p_rows[i] - q_rows[i]).clamp(min=0)
        out.append((alive * (1 - a), i, r / r.sum()))
        alive *= a
    out.append((alive, len(x), p_rows[len(x)]))
    return out


def iteration_law(laws: ToyLaws, gamma: int, outcomes) -> tuple[dict, float]:
    """The law of the first γ + 1 tokens (one iteration, then the target continues) and E[n_accepted]."""
    L, law, kept = gamma + 1, Counter(), 0.0
    for x in itertools.product(range(V), repeat=gamma):
        q_rows, p_rows = laws.rows(list(x))
        p_x = float(torch.prod(q_rows[torch.arange(gamma), list(x)]))
        for pr, n, nxt in outcomes(list(x), q_rows, p_rows):
            kept += p_x * pr * n
            for y in range(V):
                for tail in itertools.product(range(V), repeat=L - n - 1):
                    seq = x[:n] + (y,) + tail
                    c = 1.0
                    for i in range(n + 1, L):
                        c *= float(laws.target(seq[:i])[seq[i]])
                    law[seq] += p_x * pr * float(nxt[y]) * c
    return law, kept


def target_law(laws: ToyLaws, L: int) -> dict:
    out = {}
    for seq in itertools.product(range(V), repeat=L):
        out[seq] = float(torch.prod(torch.stack([laws.target(seq[:i])[seq[i]] for i in range(L)])))
    return out


CASES = [(seed, gamma) for seed in range(6) for gamma in (1, 2, 3)]


@pytest.mark.parametrize("seed,gamma", CASES)
def test_block_rule_keeps_the_target_law_exactly_and_never_keeps_fewer_tokens(seed, gamma):
    laws = ToyLaws(seed)
    want = target_law(laws, gamma + 1)
    block, kept_block = iteration_law(laws, gamma, block_outcomes)
    token, kept_token = iteration_law(laws, gamma, token_outcomes)
    assert max(abs(block[s] - want[s]) for s in want) < 1e-12
    assert max(abs(token[s] - want[s]) for s in want) < 1e-12
    assert kept_block >= kept_token - 1e-12
    # and as `expected_accepted` computes it, chain by chain (where block verification may keep fewer: it is
    # better on average over the draft's chains, not on each one)
    kept = {"block": 0.0, "token": 0.0}
    for x in itertools.product(range(V), repeat=gamma):
        q_rows, p_rows = laws.rows(list(x))
        p_x = float(torch.prod(q_rows[torch.arange(gamma), list(x)]))
        for rule in kept:
            kept[rule] += p_x * expected_accepted(torch.tensor(x), q_rows, p_rows, rule)
    assert abs(kept["block"] - kept_block) < 1e-12 and abs(kept["token"] - kept_token) < 1e-12


def test_block_rule_keeps_more_on_average_somewhere_and_the_broken_residual_breaks_the_law():
    """Power of the exact test above: with the token rule's residual (w dropped), the law is off."""
    gains, errors = [], []
    for seed, gamma in CASES:
        laws = ToyLaws(seed)
        want = target_law(laws, gamma + 1)
        kept_block, kept_token = (iteration_law(laws, gamma, r)[1] for r in (block_outcomes, token_outcomes))
        gains.append(kept_block - kept_token)
        broken = lambda x, q, p: block_outcomes(x, q, p, residual_weight=False)  # noqa: E731
        errors.append(max(abs(v - want[s]) for s, v in iteration_law(laws, gamma, broken)[0].items()))
    assert max(gains) > 0.02  # γ >= 2 keeps more: not the token rule under another name
    assert max(errors) > 1e-3


# --- the function's own draws ------------------------------------------------------------------------------

def verify_block_first_pass(draft_tokens, draft_probs, target_probs, generator=None):
    """Broken: stops at the *shortest* prefix whose test passes (scanning up, not down the chain)."""
    w, h = block_weights(draft_tokens, draft_probs, target_probs)
    gamma = draft_tokens.shape[0]
    u = torch.rand(gamma, generator=generator, dtype=torch.float64).tolist()
    n = min((i for i in range(1, gamma + 1) if u[i - 1] < h[i]), default=0)
    if n == gamma:
        return gamma, sample(target_probs[gamma], generator)
    return n, sample((w[n] * target_probs[n] - draft_probs[n]).clamp(min=0), generator)


def draw_counts(fn, x, q_rows, p_rows, n=20000, seed=0) -> Counter:
    g = torch.Generator().manual_seed(seed)
    return Counter((k, int(t)) for k, t in (fn(torch.tensor(x), q_rows, p_rows, g) for _ in range(n)))


@pytest.mark.parametrize("fn, rejects", [(verify_block, False), (verify_block_first_pass, True)])
def test_verify_block_draws_match_block_weights(fn, rejects):
    laws, x = ToyLaws(3), [0, 1, 0]
    q_rows, p_rows = laws.rows(x)
    exact = Counter()
    for pr, n, nxt in block_outcomes(x, q_rows, p_rows):
        for y in range(V):
            exact[(n, y)] += pr * float(nxt[y])
    result = chi_square_gof(draw_counts(fn, x, q_rows, p_rows), exact)
    assert result.rejects(SIGNIFICANCE) == rejects, f"{fn.__name__}: {result}"


def test_verify_block_is_greedy_verification_on_one_hot_targets():
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        gamma = int(torch.randint(1, 6, (1,), generator=g))
        q_rows = torch.randn(gamma, 7, generator=g).softmax(-1)
        best = torch.randint(0, 3, (gamma + 1,), generator=g)  # often agrees with the drafts below
        x = torch.randint(0, 3, (gamma,), generator=g)
        p_rows = torch.nn.functional.one_hot(best, 7).double()
        n, nxt = verify_block(x, q_rows.double(), p_rows, g)
        want_n, want_next = verify_greedy(x, best)
        assert (n, int(nxt)) == (want_n, int(want_next))
        assert (n, int(nxt)) == tuple(int(v) for v in verify(x, q_rows.double(), p_rows, g))


# --- the loop ----------------------------------------------------------------------------------------------

PROMPT, N_TOKENS, N_SAMPLES = [1, 2, 0], 5, 2000


@pytest.fixture(scope="module")
def pair3():
    return tiny_pair(vocab_size=V, seed=0, noise=0.3)


@pytest.mark.slow
@pytest.mark.parametrize("gamma,sampling", [(2, T1), (4, T1), (3, sd.SamplingConfig(0.8, top_k=2))])
def test_block_verified_loop_matches_exact_target_distribution(pair3, gamma, sampling):
    target, draft = pair3
    c = speculative_sequence_counts(target, draft, PROMPT, N_TOKENS, gamma, sampling, N_SAMPLES,
                                    torch.Generator().manual_seed(0), verification="block")
    result = chi_square_gof(c, exact_sequence_distribution(target, PROMPT, N_TOKENS, sampling))
    assert not result.rejects(SIGNIFICANCE), f"gamma={gamma} {sampling}: {result}"


@pytest.mark.slow
def test_loop_test_rejects_the_broken_block_rule(pair3, monkeypatch):
    import specdec_ref.generate as generate
    monkeypatch.setattr(generate, "verify_block", verify_block_first_pass)
    target, draft = pair3
    c = speculative_sequence_counts(target, draft, PROMPT, N_TOKENS, 4, T1, N_SAMPLES,
                                    torch.Generator().manual_seed(0), verification="block")
    assert chi_square_gof(c, exact_sequence_distribution(target, PROMPT, N_TOKENS, T1)).rejects(SIGNIFICANCE)


def test_block_verification_keeps_more_tokens_in_the_loop(pair3):
    """Same pair, same seeds: block verification keeps more draft tokens per iteration at γ = 4."""
    target, draft = pair3
    kept = {}
    for rule in ("token", "block"):
        g, steps = torch.Generator().manual_seed(0), []
        for _ in range(300):
            sd.speculative_generate(target, draft, torch.tensor([PROMPT]), 5, gamma=4, sampling=T1,
                                    generator=g, verification=rule, on_step=steps.append)
        kept[rule] = sum(s.n_accepted for s in steps) / len(steps)
    assert kept["block"] > kept["token"] * 1.03, kept


def test_bad_verification_is_refused(pair3):
    target, draft = pair3
    ids = torch.tensor([PROMPT])
    with pytest.raises(ValueError, match="'token' or 'block'"):
        sd.speculative_generate(target, draft, ids, 4, gamma=2, verification="blocks")
    with pytest.raises(ValueError, match="judges a chain"):
        sd.speculative_generate(target, sd.ModelDrafter(draft), ids, 4, tree=(2, 2), verification="block")


@pytest.mark.parametrize("rule, fn", [("token", verify), ("block", verify_block)])
def test_expected_accepted_is_the_mean_of_the_rules_draws(rule, fn):
    """`expected_accepted` against 20,000 draws of the rule itself: within 4 standard errors (seeded)."""
    laws, x = ToyLaws(5), [0, 0, 1, 0]  # a chain where both rules keep 1 to 4 tokens
    q_rows, p_rows = laws.rows(x)
    g = torch.Generator().manual_seed(0)
    n = torch.tensor([float(fn(torch.tensor(x), q_rows, p_rows, g)[0]) for _ in range(20000)])
    exact = expected_accepted(torch.tensor(x), q_rows, p_rows, rule)
    assert float(n.std()) > 0.5
    assert abs(float(n.mean()) - exact) < 4 * float(n.std()) / 20000 ** 0.5


def test_block_and_token_taus_judges_the_same_chains(pair3):
    """The lab function behind chapter 3's comparison: block keeps at least as much on this pair, τ ≥ 1,
    and it refuses greedy decoding (where the rules coincide)."""
    from specdec_ref.lab.compare import block_and_token_taus
    target, draft = pair3
    taus = block_and_token_taus(target, draft, [torch.tensor([PROMPT])] * 300, [2, 4], T1, 5)
    assert all(t["iterations"] > 5 and 1 <= t["token"] <= t["block"] <= 5 for t in taus.values()), taus
    assert taus[4]["block"] > taus[4]["token"]
    with pytest.raises(ValueError, match="T > 0"):
        block_and_token_taus(target, draft, [torch.tensor([PROMPT])], [2], sd.SamplingConfig(0), 5)
