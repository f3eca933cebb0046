"""Figures and the widget of chapter 5, "Choosing a draft". The (α, c) plane itself is chapter 4's."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np

from .speed import plot_claims_plane


def plot_drafts_plane(rows: Sequence, ax=None):
    """Every draft (a `lab.compare.DraftRow`) on the (α, c) plane, over chapter 4's iso-speedup shading."""
    fig = plot_claims_plane({}, {r.name: (min(r.alpha_greedy, 0.99), min(r.c, 0.5)) for r in rows}, ax=ax)
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
    final = {k: v[-1]["val_top1"] for k, v in curves.items()}
    ax.set_title(f"α rises with training ({', '.join(f'{k}: {v:.2f}' for k, v in final.items())})")
    ax.legend(fontsize=9)
    return ax.figure


def task_explorer(alphas: Mapping[str, Mapping[str, float]], c: Mapping[str, float]):
    """Pick a task: α of every draft there, and the best textbook speedup it implies with its measured c."""
    from ipywidgets import Dropdown, interact

    from ..lab.speedup import best_gamma

    def show(task):
        fig, ax = plt.subplots(figsize=(6.4, 3.4))
        names = list(alphas[task])
        s = [best_gamma(min(alphas[task][n], 0.99), c[n])[1] for n in names]
        ax.barh(names, s, color=["C2" if v > 1 else "C3" for v in s])
        ax.axvline(1, color="black", lw=0.8)
        ax.set(xlabel="best textbook speedup over γ (×)", title=f"{task}: what each draft could give")
        plt.show()

    return interact(show, task=Dropdown(options=list(alphas), description="task"))
