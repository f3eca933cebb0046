"""Checkers for chapter 4, "How much faster?".

Each `check_*` takes the reader's answer first. Left as None (or a function that still raises
NotImplementedError) it prints "Not attempted yet"; a wrong answer raises AssertionError with a
hint (which way it is off and what to revisit, never the right value); a right one prints why it is right.
"""
from __future__ import annotations

from typing import Callable

from ...lab.speedup import best_gamma, expected_tokens_per_iteration, generalized_speedup
from .common import answered, attempted, direction

CASES = [(0.0, 1), (0.3, 1), (0.5, 2), (0.6, 4), (0.8, 3), (0.9, 8), (0.99, 5), (1.0, 4)]  # (α, γ)


def check_expected_tokens(fn: Callable) -> None:
    """Exercise 1: fn(alpha, gamma) -> E[tokens per iteration], without calling the package."""
    if not attempted(fn, 0.5, 2):
        return
    for alpha, gamma in CASES:
        want, got = expected_tokens_per_iteration(alpha, gamma), float(fn(alpha, gamma))
        assert abs(got - want) <= 1e-6 * want, (
            f"α = {alpha}, γ = {gamma}: your {got:.4f} tokens is {direction(got, want)}. Hint: the iteration "
            "yields n + 1 tokens and P(n >= k) = α^k for k <= γ, so E = Σ_(k=0..γ) α^k (eq-expected-tokens); "
            + ("at α = 1 every draft token is accepted." if alpha == 1 else "is your sum one term short?"))
    print("Correct: E[tokens] = 1 + α + ... + α^γ = (1 - α^(γ+1)) / (1 - α), and γ + 1 at α = 1, "
          f"on all {len(CASES)} cases.")


def check_best_gamma(answer: int | None, alpha: float, c: float, gamma_max: int = 16) -> None:
    """Exercise 2: the γ that maximises the textbook speedup for this α and c."""
    if not answered(answer, "an integer γ"):
        return
    gamma, s = best_gamma(alpha, c, gamma_max=gamma_max)
    gamma = gamma if s > 1 else 0  # 0: no γ pays off, do not speculate
    got = generalized_speedup(alpha, int(answer), c, 1.0) if answer >= 1 else 1.0
    assert int(answer) == gamma, (
        f"γ = {answer} gives {got:.3f}× ({'do not speculate' if answer < 1 else 'eq-speedup'}); "
        f"{direction(int(answer), gamma, 'a shorter draft', 'a longer draft')} does better. "
        "Hint: tabulate (1 - α^(γ+1)) / ((1 - α)(γc + 1)) for γ = 1, 2, ... and stop when it starts to "
        "fall, or never rises above 1×")
    print(f"Correct: γ = {gamma} gives {s:.3f}×" if s > 1 else "Correct: with α <= c, do not speculate.")


def check_prediction(answer: float | None, alpha: float, gamma: int, c: float, verify_cost: float,
                     overhead: float, measured: float | None = None, rel: float = 0.01) -> None:
    """Exercise 3: predict the speedup from measured α, c, t(γ+1)/t(1) and overhead; compare with measured."""
    if not answered(answer, "your predicted speedup (a ratio, e.g. 1.2)"):
        return
    truth = generalized_speedup(alpha, gamma, c, verify_cost, overhead)
    textbook = generalized_speedup(alpha, gamma, c, 1.0)
    assert not (abs(answer - textbook) <= rel * textbook and abs(truth - textbook) > rel * truth), (
        f"{answer:.3f} is the textbook prediction: it assumes the verify pass costs one target step and the "
        f"loop costs nothing; use t(γ+1)/t(1) = {verify_cost:.2f} and overhead = {overhead:.3f} in the "
        "denominator")
    assert abs(answer - truth) <= rel * truth, (
        f"{answer:.3f}× is {direction(answer, truth)}. Hint: E[tokens] / (γc + t(γ+1)/t(1) + overhead/t(1)), "
        "eq-generalized, with each measured quantity in its own place")
    msg = f"Correct: {truth:.3f}× (the textbook formula says {textbook:.3f}×)."
    if measured is not None:
        msg += f" Measured: {measured:.3f}×, so the prediction is off by {truth / measured - 1:+.0%}."
    print(msg)
