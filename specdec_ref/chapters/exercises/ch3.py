"""Checkers for chapter 3, "Exact, not approximate".

Each `check_*` prints what it verified, or raises AssertionError with a hint. A function that still
raises NotImplementedError is reported as "not attempted yet" instead of failing.
"""
from __future__ import annotations

import contextlib
import importlib
import math
from typing import Callable

import torch

from ...cache import CachedModel
from ...drafters import ModelDrafter
from ...generate import Step, autoregressive_generate, speculative_generate
from ...lab.broken import using_step
from ...lab.stats import SIGNIFICANCE
from ...sampling import SamplingConfig
from ...verify import accepted_mass, residual
from .common import N_TOKENS, answered, attempted, direction, random_pairs, toy_exactness_test

GREEDY = SamplingConfig(temperature=0)
# the capstone's chi-square stage (stage 1, greedy, catches unprocessed logits)
CAPSTONE_SAMPLING = SamplingConfig(temperature=1.0)


@contextlib.contextmanager
def using_residual(fn: Callable):
    """Run the package's verify with a different residual function inside the block."""
    module = importlib.import_module("specdec_ref.verify")  # the module, not the function of that name
    original = module.residual
    module.residual = fn
    try:
        yield
    finally:
        module.residual = original


def check_residual(fn: Callable, n_samples: int = 1500) -> None:
    """fn(target_probs [V], draft_probs [V]) -> residual [V]. Judged exactly, then by the exactness test."""
    p0, q0 = next(random_pairs(1))
    if not attempted(fn, p0, q0):
        return
    for p, q in random_pairs():
        r = fn(p, q)
        assert r.shape == p.shape, f"the residual must have shape {tuple(p.shape)}, got {tuple(r.shape)}"
        assert torch.isfinite(r).all(), f"NaN or inf in the residual for p_target={p}, p_draft={q} (p == q?)"
        assert (r >= 0).all() and abs(float(r.sum()) - 1) < 1e-9, "the residual must be a distribution"
        beta = accepted_mass(p, q).sum()
        total = accepted_mass(p, q) + (1 - beta) * r  # P(emit x) = min(p_target, p_draft)(x) + (1 - β) r(x)
        assert torch.allclose(total, p, atol=1e-9), (
            f"accepted + rejected-then-resampled mass should equal p_target.\n p_target = {p}\n got      = "
            f"{total}\nHint: which tokens did the draft under-weight?")
    print("Exact check passed: min(p_target, p_draft) + (1 - β)·r = p_target on 200 random pairs (float64).")
    with using_residual(fn):
        result = toy_exactness_test(n_samples)
    print(f"Exactness test with your residual inside verify: chi-square on {result.n} speculative samples "
          f"of {N_TOKENS} tokens, {result}, significance level {SIGNIFICANCE}")
    assert not result.rejects(SIGNIFICANCE), "the speculative samples do not follow the target distribution"
    print("Passed: the package's own exactness test cannot tell your residual from the reference.")


def check_beta(target_probs, draft_probs, answer: float) -> None:
    """The acceptance probability β = Σ_x min(p_target(x), p_draft(x))."""
    if answer is None or answer is NotImplemented:
        print("Not attempted yet: set `beta` to your answer.")
        return
    p = torch.as_tensor(target_probs, dtype=torch.float64)
    q = torch.as_tensor(draft_probs, dtype=torch.float64)
    truth = float(torch.minimum(p, q).sum())
    assert abs(float(answer) - truth) < 1e-3, (
        f"β = {float(answer):.4f} is {direction(float(answer), truth)}. Hint: for each token the draft "
        "proposes x with probability p_draft(x) and keeps it with probability "
        "min(1, p_target(x)/p_draft(x)); add up the products (eq-beta).")
    print(f"Correct: β = {truth:.4f}, which is also 1 − TV(p_target, p_draft) = 1 − "
          f"{0.5 * float((p - q).abs().sum()):.4f}.")


def check_no_residual_distribution(fn: Callable) -> None:
    """fn(target_probs, draft_probs) -> the exact output distribution of a verify that, after a rejection,
    resamples from p_target instead of the residual (specdec_ref.lab.broken.verify_without_residual)."""
    p0, q0 = next(random_pairs(1))
    if not attempted(fn, p0, q0):
        return
    for p, q in random_pairs(100):
        beta = accepted_mass(p, q).sum()
        truth = accepted_mass(p, q) + (1 - beta) * p
        got = torch.as_tensor(fn(p, q), dtype=torch.float64)
        assert got.shape == truth.shape, f"return one probability per token, shape {tuple(truth.shape)}"
        high = [i for i in range(len(p)) if got[i] > truth[i] + 1e-9]  # which way each token is off
        low = [i for i in range(len(p)) if got[i] < truth[i] - 1e-9]
        assert not high and not low, (
            f"for p_target={p.numpy().round(3)}, p_draft={q.numpy().round(3)} you said "
            f"{got.numpy().round(4)} (sum {float(got.sum()):.4f}): too much on tokens {high}, too little on "
            f"{low}. Hint: the two paths are 'drafted and accepted' (eq-accept) and 'rejected, then drawn "
            "from p_target'; what is the chance of a rejection?")
    p, q = next(random_pairs(1, seed=3))
    wrong = accepted_mass(p, q) + (1 - accepted_mass(p, q).sum()) * p
    print(f"Correct. For example, with\n  p_target = {p.numpy().round(3)}\n  p_draft  = "
          f"{q.numpy().round(3)}\nthe buggy sampler emits {wrong.numpy().round(3)}: TV = "
          f"{0.5 * float((wrong - p).abs().sum()):.3f} from p_target. Tokens the draft over-weights are "
          "emitted too often.")


def reference_residual(target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
    """The package's residual (for comparison in the solutions)."""
    return residual(target_probs, draft_probs)


def samples_needed(tv: float, bins: int = 16, delta: float = 0.05) -> int:
    """Draws n at which `stats.tv_upper_bound`'s width ε/2 falls to tv:
    ε = sqrt(2 (K ln 2 + ln(1/δ)) / n) = 2 tv."""
    if not 0 < tv <= 1:
        raise ValueError(f"tv must be in (0, 1], got {tv}")
    return math.ceil(2 * (bins * math.log(2) + math.log(1 / delta)) / (2 * tv) ** 2)


def check_samples_needed(tv: float, answer, bins: int = 16, delta: float = 0.05) -> None:
    """answer = roughly how many draws the TV bound (K = bins, confidence 1 - delta) needs to see a
    shift of tv.

    A rough estimate is the point, so anything within a factor of 2 of the bound's own answer passes.
    """
    if not answered(answer, "a number of draws"):
        return
    truth, got = samples_needed(tv, bins, delta), float(answer)
    if 2.5 * truth < got < 6 * truth:
        raise AssertionError(f"{got:.3g} is about 4x too many. Hint: the bound is the observed TV plus ε/2, "
                             "not plus ε.")
    assert truth / 2 <= got <= 2 * truth, (
        f"{got:.3g} is {direction(got, truth)}: not within a factor of 2 of the answer. Hint: with n draws "
        "the bound adds "
        f"ε/2 = sqrt(2 (K ln 2 + ln(1/δ)) / n) / 2, with K = {bins} bins and δ = {delta}; set it equal to "
        f"the shift, {tv:.4f}, and solve for n.")
    print(f"Correct: about {truth:,} draws (K = {bins}, δ = {delta}) before a shift of TV = {tv:.4f} must "
          "show.")


# ----------------------------------------------------------------------------------------------
# Capstone: write the loop's step yourself
# ----------------------------------------------------------------------------------------------

def capstone_pair():
    """The toy pair the capstone's greedy stage decodes with (the chi-square stage uses
    common.toy_exactness_test's)."""
    from ...models.toy import tiny_pair
    return tiny_pair(vocab_size=6, seed=0, noise=0.15, max_positions=128)


def as_loop_step(fn: Callable) -> Callable:
    """Wrap a reader's step as the loop's `speculative_step`,
    checking what it returns and what it leaves cached.

    fn(target_lm, drafter, tokens [T], gamma, sampling, generator) returns the new sequence [T + n + 1], or,
    like the package's own step, (new sequence, Step).
    """
    def step(target_lm, drafter, tokens, gamma, sampling, generator):  # [T] -> ([T + n + 1], Step)
        out = fn(target_lm, drafter, tokens, gamma, sampling, generator)
        new = out[0] if isinstance(out, tuple) else out
        assert torch.is_tensor(new) and new.dim() == 1, (
            f"return the whole new sequence, a 1-D tensor [T + n + 1], not {type(new).__name__} "
            f"of shape {tuple(getattr(new, 'shape', ()))}")
        T, n = tokens.shape[0], new.shape[0] - tokens.shape[0] - 1
        assert 0 <= n <= gamma, f"one step adds between 1 and γ + 1 = {gamma + 1} tokens; yours added {n + 1}"
        assert torch.equal(new[:T], tokens), "the context (the first T tokens) must come back unchanged"
        caches = (("target", target_lm.n_cached, "target_lm.rollback(new_tokens.shape[0] - 1)"),
                  ("draft", drafter.n_cached, "drafter.sync(new_tokens.shape[0] - 1, target_lm.hidden)"))
        for name, n_cached, fix in caches:
            assert n_cached <= new.shape[0] - 1, (
                f"after the step the {name}'s cache holds {n_cached} tokens, but only {new.shape[0] - 1} "
                "of the new sequence's tokens can be in it (the newest is not cached yet). "
                f"Hint: roll it back with {fix}.")
        if isinstance(out, tuple):
            return out
        return new, Step(context_len=T, draft_tokens=new[T:T + n], draft_probs=torch.empty(0),
                         target_probs=torch.empty(0), n_accepted=n, next_token=int(new[-1]),
                         target_cache_before=-1, target_cache_after=target_lm.n_cached,
                         draft_cache_before=-1, draft_cache_after=-1)  # -1: not reported by the reader's step
    return step


def check_capstone_step(fn: Callable, n_sequences: int = 2000, n_greedy: int = 40) -> None:
    """Swap fn into `speculative_generate` and run the exactness checks: greedy equality, then chi-square.

    1. Greedy: speculative decoding with fn must give exactly the target's greedy text
       (n_greedy tokens, γ = 3).
    2. Sampling: n_sequences five-token samples on the vocab-3 toy pair (γ = 4, temperature 1) against the
       exact distribution, chi-square at level SIGNIFICANCE.
    """
    target, draft = capstone_pair()
    with torch.inference_mode():
        if not attempted(fn, CachedModel(target), ModelDrafter(draft), torch.tensor([1, 2, 0]), 2, GREEDY,
                         None):
            return
    prompt = torch.tensor([[1, 2, 3]])
    want = autoregressive_generate(target, prompt, n_greedy, sampling=GREEDY).tokens
    with using_step(as_loop_step(fn)):
        got = speculative_generate(target, draft, prompt, n_greedy, gamma=3, sampling=GREEDY)
    assert got.tokens.shape == want.shape, (
        f"{got.tokens.shape[0]} tokens generated, {want.shape[0]} asked for")
    first = int((got.tokens != want).nonzero()[0]) if not torch.equal(got.tokens, want) else None
    assert first is None, (
        "greedy speculative decoding with your step differs from the target's greedy text at new token "
        f"{first}: {got.tokens[:first + 1].tolist()} vs {want[:first + 1].tolist()}. Hint: are the target's "
        "γ + 1 rows the ones that predict each draft token and the bonus token? Do they go through "
        "logits_to_probs with `sampling`? Are both caches rolled back?")
    print(f"Stage 1 passed: greedy speculative decoding with your step equals the target's greedy text "
          f"({n_greedy} tokens, γ = 3, {sum(got.stats.accepted)} guesses accepted).")
    with using_step(as_loop_step(fn)):
        result = toy_exactness_test(n_sequences, gamma=4, sampling=CAPSTONE_SAMPLING)
    print(f"Stage 2: {result.n} five-token samples on the toy pair (γ = 4, T = "
          f"{CAPSTONE_SAMPLING.temperature}), chi-square against the exact distribution: {result}, "
          f"significance level {SIGNIFICANCE}")
    assert not result.rejects(SIGNIFICANCE), (
        "the sequences your step generates are not distributed as the target's. Hint: is every distribution, "
        "the draft's and the target's, processed by logits_to_probs with the same sampling config? Is the "
        "replacement drawn from the residual?")
    print("Passed: your step is exact, as far as both tests can tell; the same tests reject the broken steps "
          "of specdec_ref.lab.broken.")
