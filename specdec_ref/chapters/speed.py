"""Figures and the widget of chapter 4, "How much faster?". Every formula comes from lab/speedup."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import math

import matplotlib.pyplot as plt
import numpy as np
from scipy.special import lambertw

from ..lab.speedup import (best_gamma, iteration_cost, linear_verify_costs, predicted_speedup,
                           speedup_by_gamma)


def capped_geometric(alpha: float, gamma: int) -> np.ndarray:  # -> [γ+1]
    """P(n accepted = k), k = 0..γ, if every position is accepted independently with probability α."""
    k = np.arange(gamma + 1)
    probs = alpha ** k * (1 - alpha)
    probs[-1] = alpha ** gamma  # all γ accepted: the cap collects the rest of the geometric tail
    return probs


def continuous_best_gamma(alpha: float, c: float) -> float:
    """γ* that maximises the textbook speedup (1 - α^(γ+1)) / ((1 - α)(γc + 1)) over real γ.

    With L = ln(1/α), K = 1 + L(1 - c)/c and u = γ + 1, dS/dγ = 0 reads e^(-Lu) (Lu + K) = 1, so
    v = Lu + K solves (-v) e^(-v) = -e^(-K), and v > K >= 1 picks the lower branch of Lambert's W:

        γ* = (-W₋₁(-e^(-K)) - K) / L - 1.

    The sign of dS/dγ is that of e^(-Lu)(Lu + K) - 1, which falls with u, so S rises up to γ* and falls
    after it: the best integer γ >= 1 is ⌊γ*⌋ or ⌈γ*⌉ (1 if γ* < 1). γ* can lie below 0.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie strictly between 0 and 1 (at α = 1 longer drafts always pay), "
                         f"got {alpha}")
    if not 0 < c < 1:
        raise ValueError(f"c must lie strictly between 0 and 1 (at c = 0 longer drafts always pay), got {c}")
    L = -math.log(alpha)
    K = 1 + L * (1 - c) / c
    if K < 700:  # e^(-K) is a normal float: W₋₁ from scipy
        v = -float(lambertw(-math.exp(-K), k=-1).real)
    else:  # e^(-K) underflows: solve v - ln v = K (the same equation, in logs) by Newton from v ≈ K + ln K
        v = K + math.log(K)
        for _ in range(20):
            v -= (v - math.log(v) - K) / (1 - 1 / v)
    return (v - K) / L - 1


def split_gammas(gammas: Sequence[int]) -> tuple[list[int], list[int]]:
    """(the γ to fit the overhead on, the γ held out to test it): every other γ, the first one fitted."""
    gammas = sorted(gammas)
    if len(gammas) < 3:
        raise ValueError(f"fitting h₀ + γh₁ on two γ and testing it on another needs at least three γ, "
                         f"got {gammas}: add draft lengths to GAMMAS")
    return gammas[::2], gammas[1::2]


def implied_overhead(tau: float, measured: float, gamma: int, c: float, verify_cost: float) -> float:
    """h(γ) that makes τ / (γc + t(γ+1)/t(1) + h) equal the measured speedup, in units of t(1)."""
    if not (tau > 0 and measured > 0):
        raise ValueError(f"τ and the measured speedup must be > 0, got τ = {tau}, speedup = {measured}")
    return tau / measured - gamma * c - verify_cost


def fit_overhead(gammas: Sequence[int], overheads: Sequence[float]) -> tuple[float, float]:
    """(h₀, h₁) of the least-squares line h(γ) = h₀ + γ h₁ through the overheads measured at gammas."""
    if len(set(gammas)) < 2 or len(gammas) != len(overheads):
        raise ValueError(f"a line needs overheads at two γ or more, one per γ; got γ = {list(gammas)} and "
                         f"{len(overheads)} overheads")
    h1, h0 = np.polyfit(np.asarray(gammas, float), np.asarray(overheads, float), 1)
    return float(h0), float(h1)


def speedup_from_tau(tau: float, gamma: int, c: float, verify_cost: float, overhead: float) -> float:
    """τ / (γc + t(γ+1)/t(1) + h): the generalised formula with its numerator measured, not predicted.

    τ is the run's tokens per target pass (`Row.tau`), so no acceptance model enters: only the costs.
    """
    if not tau > 0:
        raise ValueError(f"τ, the tokens one target pass keeps, must be > 0, got {tau}")
    return tau / iteration_cost(gamma, c, verify_cost, overhead)


def plot_cost_curves(curves: Mapping[str, Sequence[float]], ax=None):
    """t(k)/t(1) against k, one line per label (e.g. dtype), with the textbook's flat line at 1."""
    ax = ax or plt.subplots(figsize=(6.4, 3.8))[1]
    k_max = max(len(v) for v in curves.values())
    for label, ratios in curves.items():
        ax.plot(range(1, len(ratios) + 1), ratios, "o-", label=label)
    ax.axhline(1, color="grey", ls="--", label="textbook: t(k) = t(1)")
    ax.set(xlabel="tokens scored in one target pass, k", ylabel="t(k) / t(1)  (one-token steps)",
           xticks=range(1, k_max + 1))
    worst = max(curves, key=lambda name: curves[name][-1])
    ax.set_title(f"Scoring {k_max} tokens costs {curves[worst][-1]:.2f}× one token ({worst})")
    ax.legend(fontsize=9)
    return ax.figure


def plot_speedup_vs_gamma(gammas: Sequence[int], textbook: Sequence[float], generalized: Sequence[float],
                          measured: Sequence[float], title: str = "", ax=None, *,
                          from_tau: Sequence[float] | None = None, fitted: Sequence[int] = ()):
    """Textbook prediction, generalised prediction (and from the measured τ) and measured speedup for each γ.

    fitted: the γ the overhead was fitted on, drawn hollow (their measured points test nothing).
    """
    ax = ax or plt.subplots(figsize=(6.4, 3.8))[1]
    ax.plot(gammas, textbook, "s--", color="grey", label="textbook (Theorem 3.8)")
    ax.plot(gammas, generalized, "o-", color="C0", label="generalised, from α (measured t(k), h₀ + γh₁)")
    if from_tau is not None:
        ax.plot(gammas, from_tau, "^:", color="C2", label="the same costs, from the measured τ")
    held = [i for i, g in enumerate(gammas) if g not in set(fitted)]
    ax.plot([gammas[i] for i in held], [measured[i] for i in held], "D", color="C3", ms=8,
            label="measured (held-out γ)")
    fit = [i for i, g in enumerate(gammas) if g in set(fitted)]
    if fit:
        ax.plot([gammas[i] for i in fit], [measured[i] for i in fit], "D", mfc="none", color="C3", ms=8,
                label="measured (γ the overhead was fitted on)")
    ax.axhline(1, color="black", lw=0.8)
    ax.set(xlabel="draft tokens per iteration, "
                  "γ", ylabel="speedup over plain decoding (×)", xticks=list(gammas),
           title=title)
    ax.legend(fontsize=9)
    return ax.figure


def plot_expected_speedup(alpha: float = 0.6, c: float = 0.05, slope: float = 0.0, overhead: float = 0.0,
                          gamma_max: int = 12, ax=None):
    """Predicted speedup against γ for one (α, c, verify-cost slope),
    with the textbook line and the best γ."""
    ax = ax or plt.subplots(figsize=(6.4, 3.8))[1]
    gen = speedup_by_gamma(alpha, c, linear_verify_costs(slope, gamma_max + 1), overhead, gamma_max)
    text = speedup_by_gamma(alpha, c, gamma_max=gamma_max)
    g, s = best_gamma(alpha, c, linear_verify_costs(slope, gamma_max + 1), overhead, gamma_max)
    ax.plot(list(text), list(text.values()), "s--", color="grey", label="textbook: t(k) = t(1), no overhead")
    ax.plot(list(gen), list(gen.values()), "o-", color="C0", label=f"t(k)/t(1) = 1 + {slope:.2f}(k-1), "
                                                                    f"overhead {overhead:.2f}")
    ax.plot([g], [s], "*", color="C3", ms=16, label=f"best γ = {g}: {s:.2f}×")
    ax.axhline(1, color="black", lw=0.8)
    verdict = f"best γ = {g} gives {s:.2f}×" if s > 1 else f"no γ pays off (best {s:.2f}×)"
    ax.set(xlabel="draft tokens per iteration, γ", ylabel="expected speedup (×)",
           title=f"α = {alpha:.2f}, c = {c:.2f}: {verdict}")
    ax.legend(fontsize=9)
    return ax.figure


def speedup_explorer(alpha: float = 0.6, c: float = 0.05, slope: float = 0.0, overhead: float = 0.0):
    """The live version of plot_expected_speedup: sliders for α, c, the verify-cost slope and the overhead."""
    from ipywidgets import FloatSlider, interact

    def show(alpha, c, slope, overhead):
        plot_expected_speedup(alpha, c, slope, overhead)
        plt.show()

    return interact(show, alpha=FloatSlider(value=alpha, min=0.0, max=0.99, step=0.01, description="α"),
                    c=FloatSlider(value=c, min=0.0, max=1.0, step=0.01, description="c"),
                    slope=FloatSlider(value=slope, min=0.0, max=0.5, step=0.01, description="t(k) slope"),
                    overhead=FloatSlider(value=overhead, min=-0.2, max=0.5, step=0.01,
                                         description="overhead"))


def plot_accepted_lengths_vs_geometric(accepted: Sequence[int], gamma: int, alpha: float, ax=None):
    """Histogram of accepted lengths (iterations that drafted γ tokens) against the capped geometric law."""
    ax = ax or plt.subplots(figsize=(6.4, 3.8))[1]
    counts = np.bincount(np.asarray(accepted, dtype=int), minlength=gamma + 1)[: gamma + 1]
    k = np.arange(gamma + 1)
    ax.bar(k, counts / max(counts.sum(), 1), width=0.6, color="C0",
           label=f"measured ({counts.sum()} iterations)")
    ax.plot(k, capped_geometric(alpha, gamma), "o--", color="C3", label=f"capped geometric, α = {alpha:.2f}")
    ax.set(xlabel="draft tokens accepted in one iteration, n", ylabel="fraction of iterations", xticks=k,
           title=f"Accepted lengths at γ = {gamma} vs the i.i.d. model")
    ax.legend(fontsize=9)
    return ax.figure


def plot_position_acceptance(rates: Mapping[str, tuple[Sequence[int], Sequence[int]]], ax=None):
    """Acceptance at draft position i (given positions < i were accepted), one line per setting.

    rates maps a label to (accepted, examined) counts per position; error bars are binomial standard errors.
    """
    ax = ax or plt.subplots(figsize=(6.4, 3.8))[1]
    for label, (acc, exam) in rates.items():
        acc, exam = np.asarray(acc, float), np.asarray(exam, float)
        keep = exam >= 5  # a rate from fewer than 5 examined tokens says little
        p = acc[keep] / exam[keep]
        ax.errorbar(np.arange(1, len(acc) + 1)[keep], p, yerr=np.sqrt(p * (1 - p) / exam[keep]), fmt="o-",
                    capsize=3, label=label)
    ax.set(xlabel="draft position i within an iteration", ylabel="P(accepted | reached)", ylim=(0, 1),
           title="Acceptance by draft position (the i.i.d. model says: flat)")
    ax.legend(fontsize=9)
    return ax.figure


def plot_claims_plane(claims: Mapping[str, tuple[float, float]], points: Mapping[str, tuple[float, float]],
                      gamma_max: int = 16, ax=None):
    """The (α, c) plane shaded by the best textbook speedup over γ; quoted speedup ranges as contour bands.

    claims maps a label to (low, high) speedups quoted from a source; points maps a label to a
    measured (α, c).
    """
    ax = ax or plt.subplots(figsize=(6.8, 4.8))[1]
    alphas, cs = np.linspace(0.01, 0.99, 99), np.linspace(0.0, 0.5, 51)
    best = np.array([[best_gamma(a, c, gamma_max=gamma_max)[1] for a in alphas] for c in cs])  # [c, α]
    mesh = ax.contourf(alphas, cs, best, levels=[0, 1, 1.25, 1.5, 2, 2.5, 3, 4, 6], cmap="Greens")
    plt.colorbar(mesh, ax=ax, label="best speedup over γ ≤ %d (×, textbook)" % gamma_max)
    ax.contour(alphas, cs, best, levels=[1], colors="black", linewidths=1.5)
    for i, (label, (lo, hi)) in enumerate(claims.items()):
        cs_ = ax.contour(alphas, cs, best, levels=[lo, hi], colors=[f"C{i}"], linestyles=["--", "-"],
                         linewidths=1.6)
        ax.clabel(cs_, fmt=lambda v: f"{v:g}×", fontsize=8)
        ax.plot([], [], color=f"C{i}", label=f"{label}: {lo:g}–{hi:g}× (quoted)")
    for label, (a, c) in points.items():
        ax.plot(a, c, "*", ms=15, mec="black", label=f"{label}: α = {a:.2f}, c = {c:.3f}")
    ax.set(xlabel="per-token acceptance α", ylabel="cost ratio c (draft step / target step)",
           title="Left of the black line (α ≤ c) no γ pays off")
    ax.legend(fontsize=8, loc="upper left")
    return ax.figure


def textbook_speedups(alpha: float, c: float, gammas: Sequence[int]) -> list[float]:
    """Theorem 3.8 for each γ (a convenience for tables)."""
    return [predicted_speedup(alpha, g, c) for g in gammas]


def alpha_for_speedup(goal: float, c: float, gamma_max: int = 16, step: float = 0.01) -> float | None:
    """The smallest α (on a grid of `step`) whose best textbook speedup over γ <= gamma_max reaches goal;
    None if none."""
    for alpha in np.arange(0.0, 1.0, step):
        if best_gamma(float(alpha), c, gamma_max=gamma_max)[1] >= goal:
            return float(alpha)
    return None
