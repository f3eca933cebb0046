"""Checkers for chapter 5, "Choosing a draft".

Each `check_*` takes the reader's answer first. Left as None (or a function that still raises
NotImplementedError) it prints "Not attempted yet"; a wrong answer raises AssertionError with a
hint (which way it is off and what to revisit, never the right value); a right one prints why it is right.
"""
from __future__ import annotations

from typing import Callable

import torch

from ...drafters import Drafter, missing_members
from ...lab.speedup import best_gamma, predicted_speedup
from ...lab.stats import SIGNIFICANCE, chi_square_gof, speculative_sequence_counts
from ...sampling import SamplingConfig
from .common import N_TOKENS, PROMPT, answered, attempted, direction

DRAFTS = {  # name -> (α, c): three drafts of one target, as a benchmark might report them
    "big LM draft": (0.80, 0.25),
    "tiny LM draft": (0.55, 0.03),
    "feature head": (0.70, 0.06),
}


def check_winner(answer: tuple[str, int] | None, drafts: dict[str, tuple[float, float]] = DRAFTS,
                 gamma_max: int = 16) -> None:
    """Exercise 1: (name of the draft with the highest textbook speedup, its best γ)."""
    if not answered(answer, "a tuple (draft name, γ)"):
        return
    best = {name: best_gamma(a, c, gamma_max=gamma_max) for name, (a, c) in drafts.items()}  # name -> (γ, S)
    winner = max(best, key=lambda n: best[n][1])
    name, gamma = answer
    assert name in drafts, f"{name!r} is not one of {sorted(drafts)}"
    got = predicted_speedup(drafts[name][0], int(gamma), drafts[name][1]) if int(gamma) >= 1 else 1.0
    assert name == winner, (
        f"{name} at γ = {gamma} gives {got:.3f}×, and even at its best γ another draft goes faster. Hint: "
        "for each draft, tabulate (1 - α^(γ+1)) / ((1 - α)(γc + 1)) over γ (chapter 4's eq-speedup) and keep "
        "its peak; a higher α does not win if every draft step costs a lot")
    assert int(gamma) == best[name][0], (
        f"{name} is the right draft, but at γ = {gamma} it gives {got:.3f}×: "
        f"{direction(int(gamma), best[name][0], 'a shorter', 'a longer')} draft does better. Hint: stop "
        "where (1 - α^(γ+1)) / ((1 - α)(γc + 1)) starts to fall")
    print(f"Correct: {name} at γ = {best[name][0]} gives {best[name][1]:.2f}× ("
          + ", ".join(f"{n}: {s:.2f}× at γ = {g}" for n, (g, s) in best.items() if n != name) + ").")


def check_lookup_prediction(answer: float | None, alpha: float, coverage: float, c: float, gamma: int,
                            measured: float | None = None, rel: float = 0.01) -> None:
    """Exercise 3: predict prompt lookup's speedup from its α, its coverage κ and its c;
    then compare with the clock.

    Accepted within `rel` (relative) of the coverage-weighted formula; the plain textbook formula,
    which assumes a proposal on every iteration, is rejected with a hint whenever the two differ
    by more than that.
    """
    from ..choosing import coverage_speedup
    if not answered(answer, "your predicted speedup (a ratio, e.g. 1.3)"):
        if measured is not None:
            print(f"Measured: {measured:.3f}×. Predict first, then compare.")
        return
    truth = coverage_speedup(alpha, gamma, c, coverage)
    textbook = predicted_speedup(alpha, gamma, c)
    assert not (abs(answer - textbook) <= rel * textbook and abs(truth - textbook) > rel * truth), (
        f"{answer:.3f} is the textbook prediction: it assumes lookup proposes on every iteration, but it had "
        f"a proposal on only a share κ = {coverage:.2f}; an iteration without one yields a single token")
    assert abs(answer - truth) <= rel * truth, (
        f"{answer:.3f}× is {direction(answer, truth)}. Hint: (κ E[n+1] + 1 - κ) / (1 + c (κγ + 1 - κ)) "
        "with E[n+1] = (1 - α^(γ+1)) / (1 - α), eq-coverage-speedup")
    msg = f"Correct: {truth:.3f}× (the textbook formula, blind to coverage, says {textbook:.3f}×)."
    if measured is not None:
        msg += f" Measured: {measured:.3f}×, so the prediction is off by {truth / measured - 1:+.0%}."
    print(msg)


def _greedy_equal(make_drafter: Callable[[int], Drafter]) -> int:
    """Greedy speculative output with the reader's drafter equals greedy target output;
    returns tokens drafted."""
    from ...generate import autoregressive_generate, speculative_generate
    from ...models.toy import tiny_pair
    greedy, drafted = SamplingConfig(temperature=0), 0
    for seed in range(3):
        target, _ = tiny_pair(vocab_size=8, seed=seed, noise=0.3, hidden=32, n_layers=2)
        ids = torch.tensor([[seed + 1, 2, 3, 1, 2, 3, 4]])
        plain = autoregressive_generate(target, ids, 30, sampling=greedy).tokens.tolist()
        out = speculative_generate(target, make_drafter(8), ids, 30, gamma=3, sampling=greedy)
        assert out.tokens.tolist() == plain, (
            f"greedy output differs from the target's own (seed {seed}): {out.tokens.tolist()} vs {plain}. "
            "Hint: propose tokens that follow the context; draft_probs must be [n, V] rows, one per proposed "
            "token")
        drafted += sum(out.stats.drafted)
    return drafted


def check_drafter(make_drafter: Callable[[int], Drafter], n: int = 1500, seed: int = 0) -> None:
    """Exercise 2: make_drafter(vocab_size) -> a drafter that speculative_generate accepts,
    and that stays exact.

    Checks: the Drafter protocol; greedy equality with the target on three toys; it proposes something;
    and a chi-square test at T=1 on the vocabulary-3 toy (5 tokens, 3^5 sequences) at level SIGNIFICANCE.
    """
    if not attempted(make_drafter, 8):
        return
    drafter = make_drafter(8)
    missing = missing_members(drafter)  # the members the loop uses (drafters.DRAFTER_MEMBERS)
    assert not missing and isinstance(drafter, Drafter), (
        f"a drafter implements the sd.Drafter protocol; yours lacks {', '.join(missing)}")
    drafted = _greedy_equal(make_drafter)
    assert drafted > 0, ("your drafter never proposed a token on the toys (the contexts repeat: a bigram "
                         "table finds them)")
    from ...models.toy import exact_sequence_distribution, tiny_pair
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # toy matrices: one thread is fastest
    try:
        target, _ = tiny_pair(vocab_size=3, seed=0, noise=0.3)
        exact = exact_sequence_distribution(target, PROMPT, N_TOKENS, SamplingConfig(1.0))
        counts = speculative_sequence_counts(target, make_drafter(3), PROMPT, N_TOKENS, 3,
                                             SamplingConfig(1.0), n, torch.Generator().manual_seed(seed))
    finally:
        torch.set_num_threads(threads)
    result = chi_square_gof(counts, exact)
    assert not result.rejects(SIGNIFICANCE), (
        f"at T = 1 your drafter's sequences do not follow the target's distribution ({result}). Hint: "
        "draft_probs must be the distribution you really sampled each token from (one-hot if the choice is "
        "deterministic)")
    print(f"Correct: exact greedy on 3 toys ({drafted} tokens drafted) and at T = 1 ({result}).")
