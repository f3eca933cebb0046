"""Figures, widgets and small measurements of chapter 6, "In production". Every formula comes from lab/."""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import torch

from ..lab import timing
from ..lab.speedup import generalized_speedup
from ..lab.stats import chi_square_gof, two_sample_chi_square

Costs = Mapping[tuple[int, int], float]  # (batch size B, tokens per sequence k) -> seconds of one target pass


# ---------------------------------------------------------------------------------------------
# Hugging Face side by side: how much a test can see
# ---------------------------------------------------------------------------------------------

def simulated_power(null_probs: np.ndarray, alt_probs: np.ndarray, n: int, trials: int = 200, seed: int = 0,
                    level: float = 0.001) -> dict[str, float]:
    """How often each chi-square test rejects when one sample of n comes from alt_probs instead of null_probs.

    "two-sample": n draws from null_probs against n from alt_probs (what comparing two samplers can see);
    "goodness of fit": n draws from alt_probs against the exact null_probs (one sample, exact reference).
    Both are simulated from the exact distributions, so no model runs: the power of the test we are about to run.
    """
    rng = np.random.default_rng(seed)
    null_probs, alt_probs = null_probs / null_probs.sum(), alt_probs / alt_probs.sum()
    exact = {int(i): float(null_probs[i]) for i in np.nonzero(null_probs > 0)[0]}
    two = gof = 0
    for _ in range(trials):
        a = rng.choice(len(null_probs), n, p=null_probs)
        b = rng.choice(len(alt_probs), n, p=alt_probs)
        two += two_sample_chi_square(a.tolist(), b.tolist()).rejects(level)
        gof += chi_square_gof(Counter(b.tolist()), exact).rejects(level)
    return {"two-sample": two / trials, "goodness of fit": gof / trials}


# ---------------------------------------------------------------------------------------------
# Batching: the target's cost t(B, k), measured here or predicted from a spec sheet
# ---------------------------------------------------------------------------------------------

def measure_batch_costs(model, batch_sizes: Sequence[int], ks: Sequence[int], context_len: int = 64,
                        repeats: int = 5) -> dict[tuple[int, int], float]:
    """Median seconds of one cached pass scoring k new tokens for each of B sequences, for every (B, k).

    For each B, all k are timed interleaved (`timing.latency_curve`), so background load hits them alike.
    """
    costs = {}
    for B in batch_sizes:
        curve = timing.latency_curve(model, ks, context_len=context_len, batch_size=B, repeats=repeats)
        costs.update({(B, k): curve.median(k) for k in ks})
    return costs


def interp_cost(costs: Costs, B: float, k: float) -> float:
    """t(B, k) between the measured grid points: linear in k at each measured B, then linear in B."""
    Bs = sorted({b for b, _ in costs})
    ks = sorted({kk for _, kk in costs})
    at_B = [np.interp(k, ks, [costs[(b, kk)] for kk in ks]) for b in Bs]
    return float(np.interp(B, Bs, at_B))


def batch_speedup(costs: Costs, draft_costs: Costs, alpha: float, gamma: int, B: float) -> float:
    """Predicted speedup at batch size B: eq. (eq-generalized) with c and t(γ+1)/t(1) measured at that B.

    c(B) = t_draft(B, 1) / t(B, 1); verify cost t(B, γ+1) / t(B, 1). Every sequence in the batch is assumed
    to accept α per token (a batch waits for none: each sequence keeps its own accepted tokens).
    """
    t1 = interp_cost(costs, B, 1)
    return generalized_speedup(alpha, gamma, interp_cost(draft_costs, B, 1) / t1, interp_cost(costs, B, gamma + 1) / t1)


@dataclass(frozen=True)
class PaperModel:
    """A decoder described on paper (no weights): enough to price one pass with the roofline."""
    matmul_params: float  # parameters multiplied for every token (head included, input embedding gather excluded)
    read_params: float  # parameters a pass reads from memory (the same, unless an untied embedding is gathered)
    layers: int  # transformer blocks
    n_heads: int  # query heads
    n_kv_heads: int  # key/value heads (grouped-query attention when fewer than n_heads)
    head_dim: int  # dimension of one head

    @classmethod
    def llama(cls, hidden: int, layers: int, n_heads: int, n_kv_heads: int, intermediate: int, vocab: int,
              head_dim: int | None = None) -> PaperModel:
        """From a Llama config: q, k, v, o and the three MLP matrices per layer, plus the LM head."""
        head_dim = head_dim or hidden // n_heads
        per_layer = hidden * head_dim * (2 * n_heads + 2 * n_kv_heads) + 3 * hidden * intermediate
        matmul = layers * per_layer + vocab * hidden
        return cls(matmul, matmul, layers, n_heads, n_kv_heads, head_dim)

    def flops(self, k: int, context_len: int, batch_size: int = 1) -> float:
        """As `timing.forward_flops`: 2 per matmul parameter per token, plus 4 per head dim per attended key."""
        keys = k * context_len + k * (k + 1) // 2
        return batch_size * (2 * self.matmul_params * k + 4 * self.layers * self.n_heads * self.head_dim * keys)

    def bytes(self, k: int, context_len: int, batch_size: int = 1, bytes_per_param: int = 2) -> float:
        """As `timing.bytes_moved`: the weights once, plus every sequence's keys and values."""
        kv = 2 * self.layers * self.n_kv_heads * self.head_dim * (context_len + k) * batch_size * bytes_per_param
        return self.read_params * bytes_per_param + kv


def spec_sheet_costs(model: PaperModel, spec: timing.SpecSheet, batch_sizes: Sequence[int], ks: Sequence[int],
                     context_len: int = 512) -> dict[tuple[int, int], float]:
    """t(B, k) by the roofline for a 16-bit model on a GPU's spec sheet: a lower bound (no kernel overheads)."""
    return {(B, k): timing.roofline_time(model.flops(k, context_len, B), model.bytes(k, context_len, B),
                                         spec.flops_16bit, spec.bandwidth)
            for B in batch_sizes for k in ks}


def breakeven_batch(costs: Costs, draft_costs: Costs, alpha: float, gamma: int) -> float | None:
    """The smallest grid batch size at which the predicted speedup falls to 1 or below (None: it never does)."""
    for B in sorted({b for b, _ in costs}):
        if batch_speedup(costs, draft_costs, alpha, gamma, B) <= 1:
            return B
    return None


# ---------------------------------------------------------------------------------------------
# Figures and the widget
# ---------------------------------------------------------------------------------------------

def plot_batch_costs(costs: Costs, ax=None):
    """t(B, k) / t(1, 1) against the tokens per pass B·k, one line per B: do more tokens cost more time?"""
    ax = ax or plt.subplots(figsize=(6.4, 3.8))[1]
    Bs, ks = sorted({b for b, _ in costs}), sorted({k for _, k in costs})
    base = costs[(Bs[0], ks[0])]
    for B in Bs:
        ax.plot([B * k for k in ks], [costs[(B, k)] / base for k in ks], "o-", label=f"B = {B}")
    n = max(Bs) * max(ks)
    ax.plot([1, n], [1, n], ls=":", color="grey", label="time ∝ tokens (compute-bound)")
    ax.axhline(1, ls="--", color="grey", label="time flat (memory-bound)")
    ax.set(xscale="log", yscale="log", xlabel="tokens scored in one target pass, B·k",
           ylabel="t(B, k) / t(1, 1)")
    worst = costs[(Bs[-1], ks[-1])] / base
    ax.set_title(f"{n} tokens in one pass cost {worst:.1f}× one token on this machine")
    ax.legend(fontsize=8, ncol=2)
    return ax.figure


def plot_speedup_vs_batch(curves: Mapping[str, tuple[Sequence[float], Sequence[float]]], title: str = "",
                          mark: tuple[float, float] | None = None, ax=None):
    """Predicted speedup against batch size, one line per label; `mark` = (B, speedup) draws a star."""
    ax = ax or plt.subplots(figsize=(6.4, 3.8))[1]
    for label, (Bs, s) in curves.items():
        ax.plot(Bs, s, "o-", ms=3, label=label)
    if mark is not None:
        ax.plot([mark[0]], [mark[1]], "*", color="C3", ms=16)
    ax.axhline(1, color="black", lw=0.8)
    ax.set(xscale="log", xlabel="batch size B (sequences decoded together)", ylabel="predicted speedup (×)",
           title=title)
    ax.legend(fontsize=8)
    return ax.figure


def plot_batch_speedup_twin(cpu_costs: Costs, cpu_draft: Costs, gpu_costs: Mapping[str, tuple[Costs, Costs]],
                            alpha: float, gamma: int, B: int = 1):
    """Two panels: this CPU (measured t(B, k)) and spec-sheet GPUs (roofline), at one (α, γ), star at B."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4))
    cpu_Bs = np.arange(1, max(b for b, _ in cpu_costs) + 1)
    s = [batch_speedup(cpu_costs, cpu_draft, alpha, gamma, b) for b in cpu_Bs]
    here = batch_speedup(cpu_costs, cpu_draft, alpha, gamma, B)
    plot_speedup_vs_batch({"this CPU (measured t(B, k))": (cpu_Bs, s)}, mark=(B, here), ax=left,
                          title=f"This CPU, α = {alpha:.2f}, γ = {gamma}: {here:.2f}× at B = {B}")
    curves = {}
    for name, (costs, draft) in gpu_costs.items():
        Bs = sorted({b for b, _ in costs})
        curves[name] = (Bs, [batch_speedup(costs, draft, alpha, gamma, b) for b in Bs])
    first = next(iter(curves.values()))
    cross = next((b for b, v in zip(*first) if v <= 1), None)
    plot_speedup_vs_batch(curves, ax=right, title=(f"Spec sheets (roofline): {next(iter(curves))} stops paying at "
                                                   f"B ≈ {cross}" if cross else "Spec sheets (roofline)"))
    fig.tight_layout()
    return fig


def batch_explorer(cpu_costs: Costs, cpu_draft: Costs, gpu_costs: Mapping[str, tuple[Costs, Costs]],
                   alpha: float = 0.6, gamma: int = 3):
    """The live version of plot_batch_speedup_twin: sliders for B, α and γ (γ up to the measured k - 1)."""
    from ipywidgets import FloatSlider, IntSlider, interact
    k_max = min(max(k for _, k in cpu_costs), min(max(k for _, k in c) for c, _ in gpu_costs.values()))

    def show(B, alpha, gamma):
        plot_batch_speedup_twin(cpu_costs, cpu_draft, gpu_costs, alpha, gamma, B)
        plt.show()

    return interact(show, B=IntSlider(value=1, min=1, max=max(b for b, _ in cpu_costs), description="B"),
                    alpha=FloatSlider(value=alpha, min=0.0, max=0.99, step=0.01, description="α"),
                    gamma=IntSlider(value=min(gamma, k_max - 1), min=1, max=k_max - 1, description="γ"))


def plot_tree_vs_chain(rows: Mapping[str, Mapping[str, float]], ax=None):
    """Two bars per shape: accepted tokens per target pass, and tokens per unit of cost (target steps)."""
    ax = ax or plt.subplots(figsize=(7, 3.8))[1]
    names = list(rows)
    x = np.arange(len(names))
    ax.bar(x - 0.2, [rows[n]["tokens_per_pass"] for n in names], 0.4, label="tokens per target pass")
    ax.bar(x + 0.2, [rows[n]["tokens_per_cost"] for n in names], 0.4, label="tokens per target-step of time")
    for i, n in enumerate(names):
        ax.text(i + 0.2, rows[n]["tokens_per_cost"], f"{rows[n]['tokens_per_cost']:.2f}", ha="center", va="bottom")
    ax.set_xticks(x, names, fontsize=9)
    ax.axhline(1, color="black", lw=0.8, ls="--")
    best = max(names, key=lambda n: rows[n]["tokens_per_cost"])
    ax.set(ylabel="tokens", title=f"Per unit of time on this CPU, {best} wins")
    ax.legend(fontsize=9)
    return ax.figure
