"""Figures, widgets and small measurements of chapter 6, "In production". Every formula comes from lab/."""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import torch

from ..drafters import ModelDrafter
from ..generate import Step, speculative_generate
from ..lab import bench, timing
from ..lab.speedup import generalized_speedup
from ..lab.stats import chi_square_gof, two_sample_chi_square
from ..sampling import SamplingConfig
from ..tree import Tree
from ..verify import verify_tree

Costs = Mapping[tuple[int, int], float]  # (batch size B, tokens per sequence k) -> seconds of one target pass


# ---------------------------------------------------------------------------------------------
# Hugging Face side by side: how much a test can see
# ---------------------------------------------------------------------------------------------

def simulated_power(null_probs: np.ndarray, alt_probs: np.ndarray, n: int, trials: int = 200, seed: int = 0,
                    level: float = 0.001) -> dict[str, float]:
    """How often each chi-square test rejects when one sample of n comes from alt_probs instead of null_probs.

    "two-sample": n draws from null_probs against n from alt_probs (what comparing two samplers can see);
    "goodness of fit": n draws from alt_probs against the exact null_probs (one sample, exact reference).
    Both are simulated from the exact distributions, so no model runs:
    the power of the test we are about to run.
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
# Hugging Face's defaults: how long are the drafts under the confidence stop?
# ---------------------------------------------------------------------------------------------

@torch.inference_mode()
def confidence_stop_drafts(target, draft, encoded: Sequence[torch.Tensor], max_new_tokens: int, *, cap: int,
                           threshold: float, eos_token_id: int | None = None) -> tuple[list[int], list[int]]:
    """Our loop, greedy, with Hugging Face's default drafting rule: up to `cap` tokens,
    stop below `threshold`.

    Returns (draft length, the most it could have drafted) for every iteration on every prompt (one
    `[1, T]` tensor each). The most is `cap`, or fewer near max_new_tokens; iterations that could draft
    nothing are left out. The threshold stays fixed (Hugging Face moves it only when scikit-learn is
    installed).
    """
    drafter = ModelDrafter(draft, confidence_stop=threshold)
    lengths, caps = [], []
    for ids in encoded:
        n_prompt = ids.shape[1]

        def record(step: Step) -> None:
            room = min(cap, max_new_tokens - (step.context_len - n_prompt) - 1)  # as speculative_generate
            if room > 0:
                lengths.append(int(step.draft_tokens.shape[0]))
                caps.append(room)

        speculative_generate(target, drafter, ids, max_new_tokens, gamma=cap,
                             sampling=SamplingConfig(temperature=0), eos_token_id=eos_token_id,
                             on_step=record)
    return lengths, caps


def hf_draft_passes_per_target_pass(target, draft, encoded: Sequence[torch.Tensor], max_new_tokens: int,
                                    generator: torch.Generator, **assist) -> float:
    """Hugging Face assisted generation, greedy: draft forward passes per target forward pass,
    counted by hooks.

    Each drafted token costs the assistant one forward pass and each iteration costs the target one, so
    this is Hugging Face's mean draft length (a little under it:
    an iteration near max_new_tokens drafts nothing).
    """
    with bench.forward_seconds(target, draft) as record:
        for ids in encoded:
            bench.hf_generate(target, ids, max_new_tokens, SamplingConfig(temperature=0), generator,
                              assistant_model=draft, **assist)
    target_calls, draft_calls = record["calls"]
    return draft_calls / target_calls


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


def batch_speedup(costs: Costs, draft_costs: Costs, alpha: float, gamma: int, B: float, *,
                  overhead: float = 0.0) -> float:
    """Predicted speedup at batch size B, eq. (eq-batch-speedup): eq. (eq-generalized) with c(B),
    t(B, γ+1)/t(B, 1) and h(B) at that B.

    c(B) = t_draft(B, 1) / t(B, 1); verify cost t(B, γ+1) / t(B, 1); overhead is h(B), the loop's time per
    iteration outside the model passes in units of t(B, 1) (at B = 1, chapter 4's h, so S(1) is chapter 4's
    S_gen). The default 0 prices the model passes alone: an upper bound for a loop with overhead. Every
    sequence in the batch is assumed to accept α per token (a batch waits for none: each sequence keeps its
    own accepted tokens).
    """
    t1 = interp_cost(costs, B, 1)
    return generalized_speedup(alpha, gamma, interp_cost(draft_costs, B, 1) / t1,
                               interp_cost(costs, B, gamma + 1) / t1, overhead)


@dataclass(frozen=True)
class PaperModel:
    """A decoder described on paper (no weights): enough to price one pass with the roofline."""
    # parameters multiplied for every token (head included, input embedding gather excluded)
    matmul_params: float
    # parameters a pass reads from memory (the same, unless an untied embedding is gathered)
    read_params: float
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
        """As `timing.forward_flops`: 2 per matmul parameter per token,
        plus 4 per head dim per attended key."""
        keys = k * context_len + k * (k + 1) // 2
        return batch_size * (2 * self.matmul_params * k
                             + 4 * self.layers * self.n_heads * self.head_dim * keys)

    def kv_bytes(self, context_len: int, batch_size: int = 1, bytes_per_param: int = 2) -> float:
        """Bytes of the KV cache: 2 (K and V) x layers x kv heads x head dim x tokens x sequences (∝ B·ℓ)."""
        return 2 * self.layers * self.n_kv_heads * self.head_dim * context_len * batch_size * bytes_per_param

    def bytes(self, k: int, context_len: int, batch_size: int = 1, bytes_per_param: int = 2) -> float:
        """As `timing.bytes_moved`: the weights once, plus every sequence's keys and values."""
        return (self.read_params * bytes_per_param
                + self.kv_bytes(context_len + k, batch_size, bytes_per_param))


def spec_sheet_costs(model: PaperModel, spec: timing.SpecSheet, batch_sizes: Sequence[int], ks: Sequence[int],
                     context_len: int = 512) -> dict[tuple[int, int], float]:
    """t(B, k) by the roofline for a 16-bit model on a GPU's spec sheet: a lower bound
    (no kernel overheads)."""
    return {(B, k): timing.roofline_time(model.flops(k, context_len, B), model.bytes(k, context_len, B),
                                         spec.flops_16bit, spec.bandwidth)
            for B in batch_sizes for k in ks}


def fitting_batches(models: Sequence[PaperModel], spec: timing.SpecSheet, batch_sizes: Sequence[int],
                    context_len: int, gpus: int = 8, k_max: int = 8, bytes_per_param: int = 2) -> list[int]:
    """The batch sizes whose weights and KV caches (every model's, ℓ + k_max tokens each) fit
    in `gpus` such GPUs.

    Tensor parallelism over several GPUs divides every pass's bytes and FLOPs alike, so the ratios that
    eq. (eq-batch-speedup) needs are those of one GPU (communication left out).
    """
    capacity = gpus * spec.memory_gib * 2**30

    def need(B):
        return sum(m.read_params * bytes_per_param + m.kv_bytes(context_len + k_max, B, bytes_per_param)
                   for m in models)

    return [B for B in batch_sizes if need(B) <= capacity]


def context_speedups(target: PaperModel, draft: PaperModel, spec: timing.SpecSheet, alpha: float, gamma: int,
                     batch_sizes: Sequence[int], contexts: Sequence[int],
                     gpus: int = 8) -> dict[int, dict[int, float]]:
    """{ℓ: {B: predicted speedup}} by the roofline, for the batch sizes that fit at each context length ℓ.

    Every pass reads the weights once and each sequence's KV cache (∝ B·ℓ); the draft reads its own,
    smaller one.
    """
    out = {}
    for ctx in contexts:
        Bs = fitting_batches((target, draft), spec, batch_sizes, ctx, gpus, gamma + 1)
        costs = spec_sheet_costs(target, spec, Bs, [1, gamma + 1], ctx)
        draft_costs = spec_sheet_costs(draft, spec, Bs, [1], ctx)
        out[ctx] = {B: batch_speedup(costs, draft_costs, alpha, gamma, B) for B in Bs}
    return out


def breakeven_batch(costs: Costs, draft_costs: Costs, alpha: float, gamma: int) -> float | None:
    """The smallest grid batch size at which the predicted speedup falls to 1 or below
    (None: it never does)."""
    for B in sorted({b for b, _ in costs}):
        if batch_speedup(costs, draft_costs, alpha, gamma, B) <= 1:
            return B
    return None


# ---------------------------------------------------------------------------------------------
# Trees: what one iteration costs, with multi-row draft passes and re-fed rows
# ---------------------------------------------------------------------------------------------

def sampled_children_kept(target_row: torch.Tensor, draft_row: torch.Tensor, k: int, n: int = 2000,
                          seed: int = 0, replacement: bool = False) -> float:  # [V], [V] -> probability
    """How often a node whose k children are drawn from draft_row without replacement (or i.i.d., SpecInfer's
    rule) keeps one of them: n draws, each judged by the loop's own walk (`verify_tree`), with a fixed
    seed."""
    g = torch.Generator(device=target_row.device).manual_seed(seed)
    tree, p, q = Tree.from_branching((k,)), target_row.double(), draft_row.double()
    rows, q_rows = torch.stack([p] * (k + 1)), torch.stack([q] + [torch.zeros_like(q)] * k)  # [k+1, V] each
    kept = 0
    for _ in range(n):
        children = torch.multinomial(q, k, replacement=replacement, generator=g)  # [k], in the order drawn
        path, _ = verify_tree(tree, torch.cat([children[:1], children]), rows, q_rows, g, replacement)
        kept += bool(path)
    return kept / n


def draft_rows_per_pass(tree: Tree, refed: float) -> list[float]:
    """Rows each draft pass of one static-tree iteration scores (`tree.draft_tree`), in order.

    Pass 0 feeds the new root plus the `refed` tokens accepted last time (the loop rolled the draft's
    cache back to the context); pass i >= 1 feeds every node at depth i that has children. A chain of γ
    is [refed + 1, 1, ..., 1]; a tree's later passes score several rows each.
    """
    depth = tree.depths()
    inner = [sum(1 for v in range(1, tree.size + 1) if depth[v] == d and tree.children(v))
             for d in range(1, max(depth))]  # nodes of depth d that have children
    return [refed + 1.0] + [float(m) for m in inner]


def tree_iteration_cost(tree: Tree, refed: float, draft_cost: Callable[[float], float],
                        verify_cost: Callable[[float], float], refed_target: float = 0.0) -> float:
    """Time of one static-tree iteration in target steps t(1): Σ_i t_draft(m_i)/t(1) + t(|𝒯| + 1 + ρ)/t(1).

    draft_cost(m) = t_draft(m)/t(1) for a draft pass scoring m rows; verify_cost(k) = t(k)/t(1); m_i from
    `draft_rows_per_pass` (the draft re-feeds the `refed` tokens accepted last time). The target's pass scores
    the |𝒯| nodes, the root and ρ = refed_target re-fed tokens: 0 for this package's loop, which keeps the
    accepted rows of the target's cache (`CachedModel.keep_rows`); `refed` for a loop that rolls it back.
    The loop overhead h is left out.
    """
    return (sum(draft_cost(m) for m in draft_rows_per_pass(tree, refed))
            + verify_cost(tree.size + 1 + refed_target))


def cost_curve(latencies: Mapping[int, float], unit: float) -> Callable[[float], float]:
    """k -> latency(k) / unit, linear between measured k (a median per k, e.g. from
    `timing.latency_curve`)."""
    ks = sorted(latencies)
    return lambda k: float(np.interp(k, ks, [latencies[kk] for kk in ks])) / unit


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
    """Two panels: this machine (measured t(B, k)) and spec-sheet GPUs (roofline), at one (α, γ),
    star at B."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4))
    cpu_Bs = np.arange(1, max(b for b, _ in cpu_costs) + 1)
    s = [batch_speedup(cpu_costs, cpu_draft, alpha, gamma, b) for b in cpu_Bs]
    here = batch_speedup(cpu_costs, cpu_draft, alpha, gamma, B)
    plot_speedup_vs_batch({"this machine (measured t(B, k))": (cpu_Bs, s)}, mark=(B, here), ax=left,
                          title=f"This machine, α = {alpha:.2f}, γ = {gamma}: {here:.2f}× at B = {B}")
    curves = {}
    for name, (costs, draft) in gpu_costs.items():
        Bs = sorted({b for b, _ in costs})
        curves[name] = (Bs, [batch_speedup(costs, draft, alpha, gamma, b) for b in Bs])
    first = next(iter(curves.values()))
    cross = next((b for b, v in zip(*first) if v <= 1), None)
    plot_speedup_vs_batch(curves, ax=right,
                          title=(f"Spec sheets (roofline): {next(iter(curves))} stops paying at "
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
        ax.text(i + 0.2, rows[n]["tokens_per_cost"], f"{rows[n]['tokens_per_cost']:.2f}", ha="center",
                va="bottom")
    ax.set_xticks(x, names, fontsize=9)
    ax.axhline(1, color="black", lw=0.8, ls="--")
    best = max(names, key=lambda n: rows[n]["tokens_per_cost"])
    ax.set(ylabel="tokens", title=f"Per unit of time on this machine, {best} wins")
    ax.legend(fontsize=9)
    return ax.figure
