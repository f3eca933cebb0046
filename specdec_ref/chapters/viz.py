"""Figures and widgets for chapters 2 and 3: the draft/verify loop made visible.

Every widget here has a static twin: `plot_step` draws one iteration, `step_through` wraps it in
controls; `plot_mass` draws the accepted/residual decomposition, `pq_explorer` wraps it in sliders.
The static functions return a matplotlib Figure, so the book shows a real figure and the tests
can check it. Widgets import ipywidgets lazily and are only built in a notebook.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.patches import Patch, Rectangle

from ..models import encode_chat
from ..generate import Generation, Step, speculative_generate
from ..sampling import SamplingConfig
from ..verify import accepted_mass, residual

# One colour per fate a token can meet in an iteration (colour-blind-safe Okabe-Ito hues).
KIND_COLORS = {
    "context": "#e6e6e6",  # already in the sequence before this iteration
    "accepted": "#009e73",  # drafted and kept
    "rejected": "#d55e00",  # drafted, failed the accept test: the iteration stops here
    "discarded": "#ffffff",  # drafted after the rejection, never examined
    "resampled": "#e69f00",  # drawn from the residual to replace the rejected token
    "bonus": "#0072b2",  # all γ accepted: one more token from the target's last row, for free
}
KIND_TEXT = {"context": "black", "accepted": "white", "rejected": "white", "discarded": "#777777",
             "resampled": "black", "bonus": "white"}


def token_text(tokenizer, token_id: int) -> str:
    """A printable form of one token: spaces as ␣, newlines as ↵ (the raw id without a tokenizer)."""
    if tokenizer is None:
        return str(int(token_id))
    s = tokenizer.decode([int(token_id)])
    return s.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥") or "∅"


def step_kinds(step: Step) -> list[tuple[int, str]]:
    """The tokens this iteration drafted and emitted, each with its fate, in sequence order."""
    gamma, n = step.draft_tokens.shape[0], step.n_accepted
    cells = [(int(t), "accepted") for t in step.draft_tokens[:n]]
    if n < gamma:
        cells.append((int(step.draft_tokens[n]), "rejected"))
        cells += [(int(t), "discarded") for t in step.draft_tokens[n + 1:]]
        cells.append((step.next_token, "resampled"))
    else:
        cells.append((step.next_token, "bonus"))
    return cells


@dataclass
class Trace:
    """One speculative generation with every iteration recorded (what the step-through widget shows)."""
    prompt_ids: torch.Tensor  # [T] the prompt
    generation: Generation  # tokens and stats, as speculative_generate returned them
    steps: list[Step] = field(default_factory=list)  # one record per draft/verify iteration
    gamma: int = 4  # the γ the loop was asked for

    @property
    def sequence(self) -> torch.Tensor:  # [T + n_new]
        return torch.cat([self.prompt_ids, self.generation.tokens.to(self.prompt_ids.device)])

    def context(self, k: int) -> torch.Tensor:  # [context_len] the sequence before iteration k
        return self.sequence[: self.steps[k].context_len]


def record(target, draft, input_ids: torch.Tensor, max_new_tokens: int, gamma: int = 4,
           sampling: SamplingConfig = SamplingConfig(), generator: torch.Generator | None = None,
           eos_token_id: int | None = None) -> Trace:
    """Run speculative_generate and keep the `Step` record of every iteration."""
    steps: list[Step] = []
    gen = speculative_generate(target, draft, input_ids, max_new_tokens, gamma=gamma, sampling=sampling,
                               generator=generator, eos_token_id=eos_token_id, on_step=steps.append)
    return Trace(input_ids[0].long(), gen, steps, gamma)


def encode_prompt(tokenizer, text: str, chat: bool = True) -> torch.Tensor:  # str -> [1, T]
    """Tokenise a user message (through the chat template when the tokenizer has one, and chat is True)."""
    if chat:
        return encode_chat(tokenizer, text)
    return tokenizer(text, return_tensors="pt").input_ids


# ----------------------------------------------------------------------------------------------
# The token tape and the per-position bars
# ----------------------------------------------------------------------------------------------

def draw_tape(ax, cells: Sequence[tuple[str, str]], max_chars: int = 64,
              fontsize: float | None = None) -> None:
    """Draw tokens as coloured boxes left to right, wrapping rows at max_chars characters."""
    rows, row, width = [], [], 0
    for text, kind in cells:
        w = len(text) + 1
        if row and width + w > max_chars:
            rows.append(row)
            row, width = [], 0
        row.append((text, kind, width, w))
        width += w
    rows.append(row)
    fig_w = ax.get_figure().get_size_inches()[0] * ax.get_position().width
    fontsize = fontsize or min(12.0, 0.85 * fig_w * 72 / (max_chars * 0.6))  # monospace: 0.6 em per char
    for r, row in enumerate(rows):
        for text, kind, x, w in row:
            ax.add_patch(Rectangle((x + 0.05, -r - 0.9), w - 0.1, 0.8, facecolor=KIND_COLORS[kind],
                                   edgecolor="#555555", linestyle="--" if kind == "discarded" else "-",
                                   lw=0.8))
            ax.text(x + w / 2, -r - 0.5, text, ha="center", va="center", family="DejaVu Sans Mono",
                    fontsize=fontsize, color=KIND_TEXT[kind])
    ax.set_xlim(0, max_chars)
    ax.set_ylim(-len(rows) - 0.05, 0.05)
    ax.axis("off")


def tape_legend(ax, kinds: Sequence[str] = ("context", "accepted", "rejected", "discarded", "resampled",
                                            "bonus"),
                **kwargs) -> None:
    handles = [Patch(facecolor=KIND_COLORS[k], edgecolor="#555555", label=k) for k in kinds]
    ax.legend(handles=handles, ncol=len(kinds), frameon=False, **kwargs)


def top_tokens(target_row: torch.Tensor, draft_row: torch.Tensor | None, k: int,
               must_include: Sequence[int] = ()) -> list[int]:
    """The k tokens to show at one position: the likeliest under either model, plus any forced ones."""
    ids = list(dict.fromkeys(int(i) for i in must_include))
    score = target_row if draft_row is None else torch.maximum(target_row, draft_row)
    for i in torch.argsort(score, descending=True).tolist():
        if len(ids) >= k:
            break
        if i not in ids:
            ids.append(i)
    return sorted(ids, key=lambda i: -float(target_row[i]))


def plot_position_bars(ax, step: Step, position: int, tokenizer=None, top: int = 8) -> None:
    """Bars of p_target and p_draft over the top tokens at one drafted position of one iteration."""
    gamma = step.draft_tokens.shape[0]
    target_row = step.target_probs[position].float().cpu()
    draft_row = step.draft_probs[position].float().cpu() if position < gamma else None
    forced = [int(step.draft_tokens[position])] if position < gamma else []
    if position == step.n_accepted:  # the deciding position: also show the replacement or bonus token
        forced.append(step.next_token)
    ids = top_tokens(target_row, draft_row, top, forced)
    x = np.arange(len(ids))
    ax.bar(x - 0.2, target_row[ids].numpy(), 0.4, color="#0072b2", label="p_target")
    if draft_row is not None:
        ax.bar(x + 0.2, draft_row[ids].numpy(), 0.4, color="#cc79a7", label="p_draft")
    drafted = int(step.draft_tokens[position]) if position < gamma else None
    emitted = step.next_token if position == step.n_accepted else None
    labels = [("▶" if i == drafted else "") + token_text(tokenizer, i) + ("◀" if i == emitted else "")
              for i in ids]
    ax.set_xticks(x, labels, rotation=30, ha="right", family="DejaVu Sans Mono", fontsize=9)
    for tick, i in zip(ax.get_xticklabels(), ids):
        if i == drafted:
            tick.set_color(KIND_COLORS["accepted" if position < step.n_accepted else "rejected"])
            tick.set_fontweight("bold")
        elif i == emitted:
            tick.set_color(KIND_COLORS["bonus" if position == gamma else "resampled"])
            tick.set_fontweight("bold")
    ax.set_ylabel("probability")
    ax.set_ylim(0, 1.05)
    ax.legend(frameon=False, fontsize=9, loc="upper right")
    if position < gamma:
        x_tok = int(step.draft_tokens[position])
        p, q = float(target_row[x_tok]), float(draft_row[x_tok])
        fate = "accepted" if position < step.n_accepted else ("rejected" if position == step.n_accepted else
                                                                "never examined")
        ax.set_title(f"position {position}: ▶drafted {token_text(tokenizer, x_tok)!s}; "
                     f"P(accept) = min(1, {p:.3f}/{q:.3f}) = {min(1.0, p / q) if q > 0 else 0:.3f}; {fate}"
                     + ("; ◀emitted instead" if fate == "rejected" else ""),
                     fontsize=10)
    else:
        ax.set_title(f"position {position} (bonus row): all drafts accepted, so "
                     f"◀{token_text(tokenizer, step.next_token)} is sampled from this p_target", fontsize=10)


def step_title(k: int, step: Step) -> str:
    gamma, n = step.draft_tokens.shape[0], step.n_accepted
    if n == gamma:
        return (f"Iteration {k}: all {gamma} drafts accepted, plus a bonus token: {n + 1} tokens for one "
                "target pass")
    return (f"Iteration {k}: {n} of {gamma} drafts accepted, then one resampled token: {n + 1} for one "
            "target pass")


def plot_step(trace: Trace, k: int = 0, position: int | None = None, tokenizer=None, top: int = 8,
              n_context: int = 8):
    """One iteration: the token tape (last n_context context tokens + this iteration's tokens) above
    the p_target / p_draft bars at `position` (default: the position that decided the iteration)."""
    step = trace.steps[k]
    gamma = step.draft_tokens.shape[0]
    position = min(step.n_accepted, gamma) if position is None else position
    if not 0 <= position <= gamma:
        raise ValueError(f"position must be in [0, {gamma}] for this iteration (γ = {gamma}), got {position}")
    ctx = trace.context(k)[-n_context:].tolist()
    cells = [(token_text(tokenizer, t), "context") for t in ctx]
    cells += [(token_text(tokenizer, t), kind) for t, kind in step_kinds(step)]
    fig = plt.figure(figsize=(10, 5.2))
    gs = fig.add_gridspec(2, 1, height_ratios=[1, 2.2], hspace=0.45)
    ax_tape, ax_bars = fig.add_subplot(gs[0]), fig.add_subplot(gs[1])
    draw_tape(ax_tape, cells)
    tape_legend(ax_tape, loc="upper center", bbox_to_anchor=(0.5, 0.0), fontsize=9)
    ax_tape.set_title(step_title(k, step), fontsize=12)
    plot_position_bars(ax_bars, step, position, tokenizer, top)
    return fig


def plot_steps(trace: Trace, iterations: Sequence[int] | None = None, tokenizer=None, n_context: int = 6):
    """The static twin of the widget: the token tape of several iterations, one row each."""
    iterations = list(range(min(4, len(trace.steps)))) if iterations is None else list(iterations)
    fig, axes = plt.subplots(len(iterations), 1, figsize=(10, 1.0 + 1.0 * len(iterations)), squeeze=False)
    for ax, k in zip(axes[:, 0], iterations):
        step = trace.steps[k]
        ctx = trace.context(k)[-n_context:].tolist()
        cells = [(token_text(tokenizer, t), "context") for t in ctx]
        cells += [(token_text(tokenizer, t), kind) for t, kind in step_kinds(step)]
        draw_tape(ax, cells, max_chars=72)
        ax.set_title(step_title(k, step), fontsize=10, loc="left")
    tape_legend(axes[-1, 0], loc="upper center", bbox_to_anchor=(0.5, 0.0), fontsize=9)
    n_tok = sum(trace.steps[k].n_accepted + 1 for k in iterations)
    fig.suptitle(f"{len(iterations)} iterations, {len(iterations)} target passes, {n_tok} "
                 "tokens", fontsize=12)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------------------------
# Counting calls and the KV caches
# ----------------------------------------------------------------------------------------------

def accepted_length_counts(accepted: Sequence[int], gamma: int) -> np.ndarray:  # -> [γ+1]
    """How many iterations accepted 0, 1, ..., γ draft tokens."""
    return np.bincount(np.asarray(accepted, dtype=int), minlength=gamma + 1)[: gamma + 1]


def plot_accepted_lengths(accepted: Sequence[int], gamma: int, ax=None):
    """Histogram of accepted draft tokens per iteration."""
    counts = accepted_length_counts(accepted, gamma)
    fig, ax = (ax.get_figure(), ax) if ax is not None else plt.subplots(figsize=(6, 3.5))
    ax.bar(np.arange(gamma + 1), counts, color="#009e73")
    ax.set_xticks(np.arange(gamma + 1))
    ax.set_xlabel("draft tokens accepted in the iteration (tokens)")
    ax.set_ylabel("iterations (count)")
    mean = float(np.mean(accepted)) if len(accepted) else float("nan")
    ax.set_title(f"{len(accepted)} iterations accept {mean:.2f} drafts on average "
                 f"({mean + 1:.2f} tokens per target pass)")
    return fig


def plot_cache_lengths(steps: Sequence[Step], ax=None):
    """Both KV caches per iteration: the length after drafting/scoring, and after rollback."""
    fig, ax = (ax.get_figure(), ax) if ax is not None else plt.subplots(figsize=(8, 4))
    it = np.arange(len(steps))
    t_before = np.array([s.target_cache_before for s in steps])
    t_after = np.array([s.target_cache_after for s in steps])
    d_before = np.array([s.draft_cache_before for s in steps])
    d_after = np.array([s.draft_cache_after for s in steps])
    ax.vlines(it - 0.12, t_after, t_before, color="#0072b2", lw=3, alpha=0.35)
    ax.vlines(it + 0.12, d_after, d_before, color="#cc79a7", lw=3, alpha=0.35)
    ax.plot(it - 0.12, t_before, "^", color="#0072b2", label="target cache after scoring")
    ax.plot(it - 0.12, t_after, "v", color="#0072b2", mfc="white", label="target cache after rollback")
    ax.plot(it + 0.12, d_before, "^", color="#cc79a7", label="draft cache after drafting")
    ax.plot(it + 0.12, d_after, "v", color="#cc79a7", mfc="white", label="draft cache after rollback")
    seq = np.array([s.context_len + s.n_accepted + 1 for s in steps])
    ax.plot(it, seq, "k.-", lw=1, label="sequence length after the iteration")
    ax.set_xlabel("iteration")
    ax.set_ylabel("length (tokens)")
    dropped = int((t_before - t_after).sum())
    ax.set_title(f"Rollback drops {dropped} target cache entries in {len(steps)} iterations; "
                 "the target's cache ends one token behind the sequence", fontsize=10)
    ax.legend(fontsize=8, frameon=False, loc="upper left")
    return fig


# ----------------------------------------------------------------------------------------------
# The accept/reject decomposition (chapter 3)
# ----------------------------------------------------------------------------------------------

def normalise(weights: Sequence[float]) -> torch.Tensor:  # [V] -> [V]
    w = torch.as_tensor(weights, dtype=torch.float64).clamp(min=0)
    if float(w.sum()) <= 0:
        raise ValueError("at least one weight must be positive")
    return w / w.sum()


def mass_decomposition(target_probs: torch.Tensor, draft_probs: torch.Tensor) -> dict[str, torch.Tensor]:
    """The two ways a token can be emitted at one position, and their sum (which is p_target)."""
    # acceptance probability β = Σ min(p_target, p_draft)
    beta = accepted_mass(target_probs, draft_probs).sum(-1)
    return {"accepted": accepted_mass(target_probs, draft_probs),  # P(drafted and accepted)
            "resampled": (1 - beta) * residual(target_probs, draft_probs),  # P(rejected) * residual
            "beta": beta}


def plot_mass(target_probs, draft_probs, labels: Sequence[str] | None = None, axes=None):
    """Left: p_target and p_draft. Right: accepted mass + resampled mass, stacked, against p_target."""
    p = torch.as_tensor(target_probs).detach().cpu().double()
    q = torch.as_tensor(draft_probs).detach().cpu().double()
    parts = mass_decomposition(p, q)
    beta = float(parts["beta"])
    tv = 0.5 * float((p - q).abs().sum())
    labels = list(labels) if labels is not None else [f"x{i}" for i in range(p.shape[0])]
    if axes is None:
        fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    fig = axes[0].get_figure()
    x = np.arange(p.shape[0])
    axes[0].bar(x - 0.2, p.numpy(), 0.4, color="#0072b2", label="p_target")
    axes[0].bar(x + 0.2, q.numpy(), 0.4, color="#cc79a7", label="p_draft")
    axes[0].set_title("the two distributions")
    acc, res = parts["accepted"].numpy(), parts["resampled"].numpy()
    axes[1].bar(x, acc, 0.6, color="#009e73", label="accepted: min(p_target, p_draft)")
    axes[1].bar(x, res, 0.6, bottom=acc, color="#e69f00", label="rejected, then resampled: (1-β)·residual")
    axes[1].step(np.r_[x - 0.4, x[-1] + 0.4], np.r_[p.numpy(), p.numpy()[-1]], where="post", color="black",
                 lw=1.5, label="p_target")
    axes[1].set_title("what verify emits: the two parts add up to p_target")
    for ax in axes:
        ax.set_xticks(x, labels)
        ax.set_xlabel("token")
        ax.legend(frameon=False, fontsize=8, loc="upper right")
    axes[0].set_ylabel("probability")
    top = max(float(p.max()), float(q.max()))
    axes[0].set_ylim(0, 1.35 * top)
    fig.suptitle(f"β = Σ min(p_target, p_draft) = {beta:.3f} = 1 − TV(p_target, p_draft) = 1 − {tv:.3f}",
                 fontsize=12)
    fig.tight_layout()
    return fig


def pq_explorer(target_weights: Sequence[float], draft_weights: Sequence[float],
                labels: Sequence[str] | None = None):
    """Sliders for unnormalised p_target and p_draft weights over a few tokens; redraws plot_mass."""
    import ipywidgets as widgets
    from IPython.display import display

    labels = list(labels) if labels is not None else [f"x{i}" for i in range(len(target_weights))]
    def sliders(weights, prefix):
        return [widgets.FloatSlider(value=float(w), min=0.0, max=1.0, step=0.01,
                                    description=f"{prefix} {lab}", continuous_update=False)
                for w, lab in zip(weights, labels)]
    ps, qs = sliders(target_weights, "p_target"), sliders(draft_weights, "p_draft")
    out, beta = widgets.Output(), widgets.HTML()

    def redraw(_=None):
        p, q = [s.value for s in ps], [s.value for s in qs]
        if sum(p) <= 0 or sum(q) <= 0:  # nothing to normalise: say so instead of drawing
            beta.value = "<b>Give at least one token a positive weight in each distribution.</b>"
            return
        parts = mass_decomposition(normalise(p), normalise(q))
        beta.value = f"β = Σ min(p_target, p_draft) = {float(parts['beta']):.3f}"
        with out:
            out.clear_output(wait=True)
            plot_mass(normalise(p), normalise(q), labels)
            plt.show()
    for s in ps + qs:
        s.observe(redraw, names="value")
    redraw()
    ui = widgets.VBox([widgets.HBox([widgets.VBox(ps), widgets.VBox(qs)]), beta, out])
    display(ui)
    return ui


# ----------------------------------------------------------------------------------------------
# Monte Carlo results
# ----------------------------------------------------------------------------------------------

def plot_counts_vs_probs(counts: Mapping, probs: Mapping, labels: Mapping | None = None, top: int = 15,
                         title: str | None = None, ax=None):
    """Observed frequencies (with ±2 standard errors) against exact probabilities,
    for the likeliest outcomes."""
    n = sum(counts.values())
    keys = sorted(probs, key=probs.get, reverse=True)[:top]
    rest_p = 1 - sum(probs[k] for k in keys)
    rest_c = n - sum(counts.get(k, 0) for k in keys)
    ps = np.array([probs[k] for k in keys] + [rest_p])
    fs = np.array([counts.get(k, 0) / n for k in keys] + [rest_c / n])
    names = [str(labels[k]) if labels is not None else str(k) for k in keys] + ["(all others)"]
    fig, ax = (ax.get_figure(), ax) if ax is not None else plt.subplots(figsize=(10, 4))
    x = np.arange(len(ps))
    ax.bar(x, fs, 0.6, color="#e69f00", label=f"emitted by the sampler (n = {n})")
    ax.errorbar(x, ps, yerr=2 * np.sqrt(np.clip(ps * (1 - ps), 0, None) / n), fmt="_", color="black", ms=14,
                mew=2, capsize=3, label="exact probability ± 2 s.e.")
    ax.set_xticks(x, names, rotation=35, ha="right", family="DejaVu Sans Mono", fontsize=9)
    ax.set_ylabel("probability")
    ax.legend(frameon=False, fontsize=9)
    if title:
        ax.set_title(title, fontsize=11)
    fig.tight_layout()
    return fig


def plot_p_values(results: Mapping[str, float], level: float, ax=None, floor: float = 1e-300,
                  title: str | None = None):
    """Horizontal bars of -log10(p) per sampler, with the rejection threshold -log10(level)."""
    names = list(results)
    ps = np.array([max(float(results[k]), floor) for k in names])
    fig, ax = (ax.get_figure(), ax) if ax is not None else plt.subplots(figsize=(8, 0.5 + 0.5 * len(names)))
    colors = ["#d55e00" if p < level else "#009e73" for p in ps]
    y = np.arange(len(names))[::-1]
    ax.barh(y, -np.log10(ps), color=colors)
    ax.axvline(-math.log10(level), color="black", ls="--", lw=1, label=f"reject below p = {level:g}")
    ax.set_yticks(y, names)
    ax.set_xscale("symlog", linthresh=10)
    ax.set_xlabel("−log10(p-value)  (longer bar: stronger evidence of a wrong distribution)")
    for yi, p in zip(y, ps):
        ax.text(-math.log10(p), yi, f" p = {p:.2g}" if p > floor else f" p < {floor:g}", va="center",
                fontsize=8)
    n_rej = int((ps < level).sum())
    ax.set_title(title or f"{n_rej} of {len(names)} tests reject at significance level {level:g}",
                 fontsize=11)
    ax.legend(frameon=False, fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------------------------
# The step-through widget (chapter 2)
# ----------------------------------------------------------------------------------------------

def step_through(target, draft, tokenizer, prompt: str = "What is the capital of France?", gamma: int = 4,
                 sampling: SamplingConfig = SamplingConfig(), seed: int = 0, max_new_tokens: int = 24,
                 trace: Trace | None = None):
    """Prompt box, γ, temperature, top-k/top-p and seed controls; next/previous iteration and position.

    Pass a `trace` recorded with the same settings to show it without generating again.
    """
    import ipywidgets as widgets
    from IPython.display import display

    w_prompt = widgets.Text(value=prompt, description="prompt", layout=widgets.Layout(width="60%"))
    w_gamma = widgets.IntSlider(value=gamma, min=1, max=8, description="γ")
    w_temp = widgets.FloatSlider(value=sampling.temperature, min=0.0, max=2.0, step=0.05,
                                 description="temperature")
    w_topk = widgets.IntText(value=sampling.top_k or 0, description="top-k (0: off)")
    w_topp = widgets.FloatSlider(value=sampling.top_p or 1.0, min=0.05, max=1.0, step=0.05,
                                 description="top-p")
    w_seed = widgets.IntText(value=seed, description="seed")
    w_run = widgets.Button(description="generate", button_style="primary")
    w_prev, w_next = widgets.Button(description="◀ previous"), widgets.Button(description="next ▶")
    w_iter = widgets.IntSlider(value=0, min=0, max=0, description="iteration")
    w_pos = widgets.IntSlider(value=0, min=0, max=gamma, description="position")
    out, info = widgets.Output(), widgets.HTML()
    state = {"trace": trace}

    def generate(_=None):
        cfg = SamplingConfig(w_temp.value, w_topk.value or None, None if w_topp.value >= 1 else w_topp.value)
        ids = encode_prompt(tokenizer, w_prompt.value).to(next(target.parameters()).device)
        gen = torch.Generator(device=ids.device).manual_seed(w_seed.value)
        state["trace"] = record(target, draft, ids, max_new_tokens, w_gamma.value, cfg, gen,
                                getattr(tokenizer, "eos_token_id", None))
        show_iteration(reset=True)

    def show_iteration(_=None, reset=False):
        tr = state["trace"]
        w_iter.max = len(tr.steps) - 1
        step = tr.steps[w_iter.value]
        w_pos.max = step.draft_tokens.shape[0]
        if reset or _ is not None and getattr(_, "owner", None) is w_iter:
            w_pos.value = min(step.n_accepted, step.draft_tokens.shape[0])
        st = tr.generation.stats
        info.value = (f"{tr.generation.tokens.shape[0]} tokens in {len(tr.steps)} iterations; target passes "
                      f"{st.target_calls} (plain decoding: {tr.generation.tokens.shape[0]}); "
                      f"acceptance rate {st.acceptance_rate:.2f}")
        with out:
            out.clear_output(wait=True)
            plot_step(tr, w_iter.value, w_pos.value, tokenizer)
            plt.show()

    def move(delta):
        def f(_):
            w_iter.value = int(np.clip(w_iter.value + delta, 0, w_iter.max))
        return f

    w_run.on_click(generate)
    w_prev.on_click(move(-1))
    w_next.on_click(move(+1))
    w_iter.observe(show_iteration, names="value")
    w_pos.observe(lambda ch: show_iteration(), names="value")
    ui = widgets.VBox([widgets.HBox([w_prompt, w_run]), widgets.HBox([w_gamma, w_temp, w_topp]),
                       widgets.HBox([w_topk, w_seed]), widgets.HBox([w_prev, w_iter, w_next, w_pos]),
                       info, out])
    if trace is None:
        generate()
    else:
        show_iteration(reset=True)
    display(ui)
    return ui
