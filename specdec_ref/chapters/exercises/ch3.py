"""Checkers for chapter 3, "Exact, not approximate".

Each `check_*` prints what it verified, or raises AssertionError with a hint. A function that still
raises NotImplementedError is reported as "not attempted yet" instead of failing.
"""
from __future__ import annotations

import contextlib
import importlib
from typing import Callable

import torch

from ...lab.stats import SIGNIFICANCE
from ...verify import accepted_mass, residual
from .common import N_TOKENS, attempted, random_pairs, toy_exactness_test



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
        total = accepted_mass(p, q) + (1 - beta) * r  # P(emit x) = min(p, q)(x) + (1 - β) r(x)
        assert torch.allclose(total, p, atol=1e-9), (
            f"accepted + rejected-then-resampled mass should equal p_target.\n p_target = {p}\n got      = {total}\n"
            "Hint: which tokens did the draft under-weight?")
    print("Exact check passed: min(p, q) + (1 - β)·r = p_target on 200 random pairs (float64).")
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
    p, q = torch.as_tensor(target_probs, dtype=torch.float64), torch.as_tensor(draft_probs, dtype=torch.float64)
    truth = float(torch.minimum(p, q).sum())
    assert abs(float(answer) - truth) < 1e-3, (
        f"β = {float(answer):.4f} is not right. Hint: for each token the draft proposes x with probability "
        "p_draft(x) and keeps it with probability min(1, p_target(x)/p_draft(x)); add up the products.")
    print(f"Correct: β = {truth:.4f}, which is also 1 − TV(p_target, p_draft) = 1 − {0.5 * float((p - q).abs().sum()):.4f}.")


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
        assert torch.allclose(got, truth, atol=1e-9), (
            f"for p_target={p.numpy().round(3)}, p_draft={q.numpy().round(3)} the buggy sampler emits "
            f"{truth.numpy().round(4)}, you said {got.numpy().round(4)}. Hint: the two paths are 'drafted and "
            "accepted' and 'rejected, then drawn from p_target'.")
    p, q = next(random_pairs(1, seed=3))
    wrong = accepted_mass(p, q) + (1 - accepted_mass(p, q).sum()) * p
    print("Correct. For example, with\n"
          f"  p_target = {p.numpy().round(3)}\n  p_draft  = {q.numpy().round(3)}\n"
          f"the buggy sampler emits {wrong.numpy().round(3)}: TV = {0.5 * float((wrong - p).abs().sum()):.3f} "
          "from p_target. Tokens the draft over-weights are emitted too often.")


def reference_residual(target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
    """The package's residual (for comparison in the solutions)."""
    return residual(target_probs, draft_probs)
