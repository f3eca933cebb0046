"""Measure the offline draft honestly: acceptance, cost ratio, and side-by-side speed in one process.

    python -m specdec_ref.draft_eval                 # the full table on held-out chat prompts
    python -m specdec_ref.draft_eval --prompts 4 --max-new-tokens 64 --json runs/eval.json

All rows are timed in the same process, interleaved prompt by prompt (so background load hits every
row alike), on chat prompts the draft never saw in training (`draft_prompts.HELD_OUT`):
  * plain target decoding (ours) and Hugging Face `generate` without a draft;
  * our speculative loop, greedy and at T=1;
  * Hugging Face assisted generation with the same draft, at its defaults and at our γ;
  * a prompt-lookup-friendly task (rewrite a paragraph) with `NgramDrafter` and with the draft.
The speedup the Leviathan et al. formula predicts from the measured α and c is printed beside.
"""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass

import torch

from .draft_prompts import HELD_OUT, REWRITE_PROMPTS, chat_ids
from .drafters import CachedModel, NgramDrafter
from .generate import autoregressive_generate, speculative_generate
from .sampling import SamplingConfig
from .timing import synchronize


@dataclass
class Row:
    name: str  # what was run
    tokens: int = 0  # new tokens over all prompts
    seconds: float = 0.0  # wall time over all prompts
    accepted: int = 0  # accepted draft tokens (speculative rows)
    drafted: int = 0  # drafted tokens (speculative rows)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds else float("nan")

    @property
    def alpha(self) -> float:
        return self.accepted / self.drafted if self.drafted else float("nan")


def predicted_speedup(alpha: float, gamma: int, c: float) -> float:
    """Leviathan et al. (2023), eq. 1: expected tokens per iteration over the cost of one iteration."""
    return (1 - alpha ** (gamma + 1)) / ((1 - alpha) * (gamma * c + 1))


@torch.inference_mode()
def step_ms(model, ids: torch.Tensor, n: int = 16) -> float:  # ids [1, T]
    """Milliseconds for one decode step with a KV cache (median of n)."""
    lm, x, times = CachedModel(model), ids[0], []
    lm.logits(x)
    for _ in range(n):
        x = torch.cat([x, x[-1:]])
        synchronize(x.device)
        t0 = time.perf_counter()
        lm.logits(x)
        synchronize(x.device)
        times.append(time.perf_counter() - t0)
    return 1000 * sorted(times)[n // 2]


def cost_ratio(target, draft, ids: torch.Tensor, repeats: int = 5) -> tuple[float, float, float]:
    """(target ms/token, draft ms/token, c), each measured `repeats` times interleaved; medians."""
    t, d = [], []
    for _ in range(repeats):
        t.append(step_ms(target, ids))
        d.append(step_ms(draft, ids))
    t_ms, d_ms = sorted(t)[repeats // 2], sorted(d)[repeats // 2]
    return t_ms, d_ms, d_ms / t_ms


@torch.inference_mode()
def agreement(target, draft, sequences: list[tuple[torch.Tensor, int]]) -> tuple[float, float]:
    """Teacher-forced on the target's own greedy answers: (greedy agreement, mean sum_x min(p_target, p_draft) at T=1).

    The first is α for greedy decoding along the target's path; the second is α at T=1 (1 - total variation).
    """
    hits, overlap, n = 0.0, 0.0, 0
    for seq, n_prompt in sequences:  # seq [T]
        tl = target(input_ids=seq[None]).logits[0, n_prompt - 1:-1].float()  # [n_answer, V]
        dl = draft(input_ids=seq[None]).logits[0, n_prompt - 1:-1].float()  # [n_answer, V]
        hits += float((tl.argmax(-1) == dl.argmax(-1)).sum())
        overlap += float(torch.minimum(tl.softmax(-1), dl.softmax(-1)).sum())
        n += tl.shape[0]
    return hits / n, overlap / n


def _timed(fn):
    synchronize()
    t0 = time.perf_counter()
    out = fn()
    synchronize()
    return out, time.perf_counter() - t0


def _hf(target, ids, n, **kw):
    out = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, **kw)
    return out[0, ids.shape[1]:]


def side_by_side(target, draft, tokenizer, prompts: list[str], max_new_tokens: int, gamma: int, seed: int = 0,
                 hf: bool = True) -> dict[str, Row]:
    """Every method on every prompt, interleaved; returns one Row per method."""
    eos = tokenizer.eos_token_id
    greedy, t1 = SamplingConfig(temperature=0), SamplingConfig(temperature=1.0)
    methods = {
        "plain greedy (ours)": lambda ids, g: autoregressive_generate(target, ids, max_new_tokens, greedy, g, eos),
        f"speculative greedy γ={gamma} (ours)":
            lambda ids, g: speculative_generate(target, draft, ids, max_new_tokens, gamma, greedy, g, eos),
        "plain T=1 (ours)": lambda ids, g: autoregressive_generate(target, ids, max_new_tokens, t1, g, eos),
        f"speculative T=1 γ={gamma} (ours)":
            lambda ids, g: speculative_generate(target, draft, ids, max_new_tokens, gamma, t1, g, eos),
    }
    if hf:
        methods.update({
            "HF plain greedy": lambda ids, g: _hf(target, ids, max_new_tokens, do_sample=False),
            "HF assisted greedy (defaults)":
                lambda ids, g: _hf(target, ids, max_new_tokens, do_sample=False, assistant_model=draft),
            f"HF assisted greedy (γ={gamma}, constant)":
                lambda ids, g: _hf(target, ids, max_new_tokens, do_sample=False, assistant_model=draft,
                                   num_assistant_tokens=gamma, num_assistant_tokens_schedule="constant",
                                   assistant_confidence_threshold=0.0),
        })
    rows = {name: Row(name) for name in methods}
    for i, prompt in enumerate(prompts):
        ids = chat_ids(tokenizer, prompt).to(target.device)
        for name, fn in methods.items():
            g = torch.Generator(device=target.device).manual_seed(seed + i)
            out, seconds = _timed(lambda: fn(ids, g))
            tokens = out.tokens if hasattr(out, "tokens") else out
            rows[name].tokens += tokens.shape[0]
            rows[name].seconds += seconds
            if hasattr(out, "stats") and out.stats.drafted:
                rows[name].accepted += sum(out.stats.accepted)
                rows[name].drafted += sum(out.stats.drafted)
        print(f"  prompt {i + 1}/{len(prompts)} done", flush=True)
    return rows


def lookup_task(target, draft, tokenizer, max_new_tokens: int, gamma: int) -> dict[str, Row]:
    """The prompt-lookup-friendly task (copy a paragraph with small edits), greedy: n-gram drafter vs the draft."""
    greedy, eos = SamplingConfig(temperature=0), tokenizer.eos_token_id
    methods = {
        "rewrite: plain greedy": lambda ids: autoregressive_generate(target, ids, max_new_tokens, greedy, None, eos),
        f"rewrite: n-gram lookup γ={gamma}": lambda ids: speculative_generate(
            target, NgramDrafter(target.config.vocab_size), ids, max_new_tokens, gamma, greedy, None, eos),
        f"rewrite: draft γ={gamma}":
            lambda ids: speculative_generate(target, draft, ids, max_new_tokens, gamma, greedy, None, eos),
    }
    rows = {name: Row(name) for name in methods}
    for prompt in REWRITE_PROMPTS:
        ids = chat_ids(tokenizer, prompt).to(target.device)
        for name, fn in methods.items():
            out, seconds = _timed(lambda: fn(ids))
            rows[name].tokens += out.tokens.shape[0]
            rows[name].seconds += seconds
            rows[name].accepted += sum(out.stats.accepted)
            rows[name].drafted += sum(out.stats.drafted)
    return rows


def report(rows: dict[str, Row], baseline: str) -> list[dict]:
    base = rows[baseline].tokens_per_second
    table = []
    for r in rows.values():
        table.append({"method": r.name, "tokens": r.tokens, "seconds": round(r.seconds, 2),
                      "tokens_per_s": round(r.tokens_per_second, 2), "speedup": round(r.tokens_per_second / base, 3),
                      "acceptance": None if r.alpha != r.alpha else round(r.alpha, 3)})
        alpha = "" if r.alpha != r.alpha else f"  α={r.alpha:.2f}"
        print(f"  {r.name:<42} {r.tokens_per_second:7.1f} tok/s  {r.tokens_per_second / base:5.2f}x{alpha}")
    return table


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=8, help="held-out chat prompts to time (at most 24)")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--gamma", type=int, default=4)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument("--no-hf", action="store_true", help="skip the Hugging Face rows")
    p.add_argument("--weights", default=None, help="draft weights directory (default: the shipped one)")
    p.add_argument("--json", default=None, help="also write the results to this file")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from . import offline_draft
    from .models import load_offline_target
    target, tok = load_offline_target()
    draft = offline_draft.load(target, args.weights)
    prompts = HELD_OUT[:args.prompts]
    print(f"held-out prompts: {len(prompts)}, max_new_tokens={args.max_new_tokens}, γ={args.gamma}, "
          f"threads={torch.get_num_threads()}")

    ids = chat_ids(tok, prompts[0])
    t_ms, d_ms, c = cost_ratio(target, draft, ids)
    print(f"cost: target {t_ms:.1f} ms/token, draft {d_ms:.1f} ms/token, c = {c:.3f}")
    seqs = []
    for prompt in prompts:
        x = chat_ids(tok, prompt)
        out = autoregressive_generate(target, x, args.max_new_tokens, SamplingConfig(0), None, tok.eos_token_id)
        seqs.append((torch.cat([x[0], out.tokens]), x.shape[1]))
    a_greedy, a_t1 = agreement(target, draft, seqs)
    print(f"teacher-forced on the target's greedy answers: greedy agreement {a_greedy:.3f}, α(T=1) {a_t1:.3f}")
    print(f"predicted speedup (Leviathan eq. 1, γ={args.gamma}): greedy "
          f"{predicted_speedup(a_greedy, args.gamma, c):.2f}x, T=1 {predicted_speedup(a_t1, args.gamma, c):.2f}x")

    print("side by side (interleaved, one process):")
    rows = side_by_side(target, draft, tok, prompts, args.max_new_tokens, args.gamma, hf=not args.no_hf)
    table = report(rows, "plain greedy (ours)")
    print("prompt-lookup-friendly task (rewrite a paragraph), greedy:")
    lookup = report(lookup_task(target, draft, tok, 2 * args.max_new_tokens, args.gamma), "rewrite: plain greedy")
    result = {"command": "python -m specdec_ref.draft_eval " + " ".join(argv if argv is not None else __import__("sys").argv[1:]),
              "threads": torch.get_num_threads(), "gamma": args.gamma, "max_new_tokens": args.max_new_tokens,
              "n_prompts": len(prompts), "target_ms": t_ms, "draft_ms": d_ms, "c": c,
              "greedy_agreement": a_greedy, "alpha_t1": a_t1,
              "predicted_greedy": predicted_speedup(a_greedy, args.gamma, c),
              "predicted_t1": predicted_speedup(a_t1, args.gamma, c), "table": table, "lookup": lookup}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
