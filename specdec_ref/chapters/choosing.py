"""Figures, the widget and the coverage-weighted speedup of chapter 5, "Choosing a draft".

The (α, c) plane itself is chapter 4's.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import matplotlib.pyplot as plt
import numpy as np

from ..lab.speedup import expected_tokens_per_iteration
from .speed import plot_claims_plane
from .verdicts.ch5 import training_verdict


def coverage_speedup(alpha: float, gamma: int, c: float, coverage: float) -> float:
    """Textbook speedup of a drafter that has a proposal on only a share `coverage` (κ) of the iterations.

    An iteration with a proposal yields E[n + 1] = (1 - α^(γ+1)) / (1 - α) tokens for γc + 1 target steps;
    one without yields a single token for c + 1 (the lookup that found nothing, then the target's own step):

        S_κ = (κ E[n + 1] + 1 - κ) / (1 + c (κγ + 1 - κ)).

    κ = 1 is Leviathan et al.'s formula (every model draft); κ = 0 is 1 / (1 + c), a slowdown.
    """
    if not 0 <= coverage <= 1:
        raise ValueError(f"coverage must lie in [0, 1] (a share of iterations), got {coverage}")
    if c < 0:
        raise ValueError(f"the cost ratio c must be >= 0, got {c}")
    tokens = 1.0 if coverage == 0 else coverage * expected_tokens_per_iteration(alpha, gamma) + 1 - coverage
    return tokens / (1 + c * (coverage * gamma + 1 - coverage))


def best_gamma_with_coverage(alpha: float, c: float, coverage: float,
                             gamma_max: int = 16) -> tuple[int, float]:
    """(γ with the highest `coverage_speedup`, that speedup); a speedup <= 1 means: do not speculate."""
    speedups = {g: coverage_speedup(alpha, g, c, coverage) for g in range(1, gamma_max + 1)}
    gamma = max(speedups, key=speedups.get)
    return gamma, speedups[gamma]


def with_coverage(row, gamma_max: int = 8):
    """A `lab.compare.DraftRow` whose best γ and predicted speedup weigh its coverage
    (unchanged at coverage 1)."""
    # no proposal at all: α is undefined (nan)
    alpha = min(row.alpha_greedy, 1.0) if row.coverage > 0 else 0.0
    gamma, s = best_gamma_with_coverage(alpha, row.c, row.coverage, gamma_max)
    if s <= 1:  # nothing pays off: report γ = 1, as `lab.compare.draft_row` does
        gamma, s = 1, coverage_speedup(alpha, 1, row.c, row.coverage)
    return replace(row, gamma=gamma, predicted=s)


def loop_coverage(stats) -> float:
    """Share of a speculative run's iterations (a `Stats`) in which the drafter proposed anything."""
    return sum(d > 0 for d in stats.drafted) / len(stats.drafted) if stats and stats.drafted else float("nan")


def plot_drafts_plane(rows: Sequence, ax=None):
    """Every draft (a `lab.compare.DraftRow`) on the (α, c) plane, over chapter 4's iso-speedup shading."""
    fig = plot_claims_plane({}, {r.name: (min(r.alpha_greedy, 0.99), min(r.c, 1.0)) for r in rows}, ax=ax)
    ax = fig.axes[0]
    ax.set_ylim(0, max(0.5, *(min(r.c, 1.0) for r in rows)) if rows else 0.5)
    winner = max(rows, key=lambda r: r.measured or 0)
    ax.set_title(f"Greedy α against cost: {winner.name} measured fastest ({winner.measured:.2f}×)")
    return fig


def plot_task_alphas(alphas: Mapping[str, Mapping[str, float]], ax=None):
    """Grouped bars: α (greedy) of each draft (inner keys) on each task (outer keys)."""
    ax = ax or plt.subplots(figsize=(8, 3.8))[1]
    tasks, drafts = list(alphas), list(next(iter(alphas.values())))
    width = 0.8 / len(drafts)
    for j, d in enumerate(drafts):
        ax.bar(np.arange(len(tasks)) + j * width, [alphas[t][d] for t in tasks], width, label=d)
    ax.set_xticks(np.arange(len(tasks)) + 0.4 - width / 2, tasks)
    ax.set(ylabel="α, greedy (per proposed token)", ylim=(0, 1))
    best = {t: max(alphas[t], key=alphas[t].get) for t in tasks}
    copying = [t for t in tasks if best[t] == "prompt lookup"]
    ax.set_title("Prompt lookup is accepted most on " + ", ".join(copying) if copying else
                 "Acceptance by task (greedy)")
    ax.legend(fontsize=8)
    return ax.figure


def plot_training(curves: Mapping[str, Sequence[dict]], ax=None):
    """Validation top-1 agreement (α greedy on unseen prompts) against optimiser steps, one line per loss."""
    ax = ax or plt.subplots(figsize=(6.4, 3.8))[1]
    for label, curve in curves.items():
        ax.plot([c["step"] for c in curve], [c["val_top1"] for c in curve], "o-", label=label)
    ax.set(xlabel="optimiser step", ylabel="top-1 agreement with target (α greedy)", ylim=(0, None))
    first, final = next(iter(curves.items()))
    ax.set_title(f"With {first.removeprefix('loss = ').upper()}, agreement "
                 f"{training_verdict(final[0]['val_top1'], final[-1]['val_top1'])}")
    ax.legend(fontsize=9)
    return ax.figure


def plot_coverage(cov, ax=None):
    """Coverage@k of a feature head against draft depth (`lab.coverage.Coverage`), one line per k,
    and the share of positions whose whole path to that depth stays in the top k (dashed):
    what a tree of width k keeps."""
    ax = ax or plt.subplots(figsize=(6.4, 3.6))[1]
    depths = range(1, len(cov.by_depth) + 1)
    for i, k in enumerate(cov.ks):
        ax.plot(depths, [row[k] for row in cov.by_depth], "o-", color=f"C{i}", label=f"top-{k}")
    k = cov.ks[-1]
    ax.plot(depths, [row[k] for row in cov.path], "o--", color=f"C{len(cov.ks) - 1}", alpha=0.6,
            label=f"whole path in top-{k}")
    ax.set(xlabel="draft depth", ylabel="share of answer positions", ylim=(0, 1), xticks=list(depths),
           title=f"Where the target's token is among the head's guesses ({cov.positions} positions)")
    ax.legend(fontsize=8, ncol=2)
    return ax.figure


def task_explorer(alphas: Mapping[str, Mapping[str, float]], c: Mapping[str, float],
                  coverage: Mapping[str, Mapping[str, float]] | None = None):
    """Pick a task: α of every draft there, and the best speedup it implies with its measured c and its
    coverage on that task (`coverage_speedup`; coverage None: every draft always proposes)."""
    from ipywidgets import Dropdown, interact

    def show(task):
        fig, ax = plt.subplots(figsize=(6.4, 3.4))
        names = list(alphas[task])
        cov = {n: coverage[task][n] if coverage else 1.0 for n in names}
        s = [best_gamma_with_coverage(min(alphas[task][n], 0.99) if cov[n] > 0 else 0.0, c[n], cov[n])[1]
             for n in names]
        ax.barh(names, s, color=["C2" if v > 1 else "C3" for v in s])
        ax.axvline(1, color="black", lw=0.8)
        ax.set(xlabel="best predicted speedup over γ, coverage weighed (×)",
               title=f"{task}: what each draft could give")
        plt.show()

    return interact(show, task=Dropdown(options=list(alphas), description="task"))
