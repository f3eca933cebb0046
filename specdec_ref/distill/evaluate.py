"""Measure the offline draft honestly: acceptance, cost ratio, and side-by-side speed in one process.

    python -m specdec_ref.distill.evaluate                 # the full table on held-out chat prompts
    python -m specdec_ref.distill.evaluate --prompts 4 --max-new-tokens 64 --json runs/eval.json

All rows are timed in the same process, interleaved prompt by prompt (so background load hits every
row alike), on chat prompts the draft never saw in training (`distill.prompts.HELD_OUT`):
  * plain target decoding (ours) and Hugging Face `generate` without a draft;
  * our speculative loop, greedy and at T=1;
  * Hugging Face assisted generation with the same draft, at its defaults and at our γ;
  * a prompt-lookup-friendly task (rewrite a paragraph) with `NgramDrafter` and with the draft.
The speedup the Leviathan et al. formula predicts from the measured α and c is printed beside.
"""
from __future__ import annotations

import argparse
import json
import sys

import torch

from ..cache import vocab_size
from ..drafters import NgramDrafter
from ..generate import autoregressive_generate, speculative_generate
from ..lab.bench import Row, hf_generate, cost_ratio, run_interleaved
from ..lab.hf import assistant_settings, constant_gamma
from ..lab.speedup import predicted_speedup
from ..models import encode_chat, load_offline_target, offline_draft
from ..sampling import SamplingConfig
from .prompts import HELD_OUT, REWRITE_PROMPTS


@torch.inference_mode()
def agreement(target, draft, sequences: list[tuple[torch.Tensor, int]]) -> tuple[float, float]:
    """Teacher-forced on the target's own greedy answers: (greedy agreement, mean sum_x min(p_target,
    p_draft) at T=1).

    The first is α for greedy decoding along the target's path; the second is α at T=1 (1 - total
    variation).
    """
    hits, overlap, n = 0.0, 0.0, 0
    for seq, n_prompt in sequences:  # seq [T]
        tl = target(input_ids=seq[None]).logits[0, n_prompt - 1:-1].float()  # [n_answer, V]
        dl = draft(input_ids=seq[None]).logits[0, n_prompt - 1:-1].float()  # [n_answer, V]
        hits += float((tl.argmax(-1) == dl.argmax(-1)).sum())
        overlap += float(torch.minimum(tl.softmax(-1), dl.softmax(-1)).sum())
        n += tl.shape[0]
    return hits / n, overlap / n


def _hf(target, ids, n, **kw) -> tuple[int, float]:  # [1, T] -> (new tokens, seconds)
    return hf_generate(target, ids, n, SamplingConfig(temperature=0), None, **kw)


def _hf_at_gamma(target, draft, ids, n, gamma) -> tuple[int, float]:  # [1, T] -> (new tokens, seconds)
    """Hugging Face assisted, greedy, drafting exactly γ tokens every iteration.

    transformers 5 reads the assistant's settings from the draft's generation_config, not from generate().
    """
    with assistant_settings(draft, **constant_gamma(gamma)):
        return _hf(target, ids, n, assistant_model=draft)


def side_by_side(target, draft, tokenizer, prompts: list[str], max_new_tokens: int, gamma: int, seed: int = 0,
                 hf: bool = True) -> dict[str, Row]:
    """Every method on every prompt, interleaved; returns one Row per method."""
    greedy, t1 = SamplingConfig(temperature=0), SamplingConfig(temperature=1.0)
    g = torch.Generator(device=target.device).manual_seed(seed)
    ours = dict(generator=g, eos_token_id=tokenizer.eos_token_id)
    methods = {
        "plain greedy (ours)": lambda ids: autoregressive_generate(
            target, ids, max_new_tokens, sampling=greedy, **ours),
        f"speculative greedy γ={gamma} (ours)": lambda ids: speculative_generate(
            target, draft, ids, max_new_tokens, gamma=gamma, sampling=greedy, **ours),
        "plain T=1 (ours)": lambda ids: autoregressive_generate(
            target, ids, max_new_tokens, sampling=t1, **ours),
        f"speculative T=1 γ={gamma} (ours)": lambda ids: speculative_generate(
            target, draft, ids, max_new_tokens, gamma=gamma, sampling=t1, **ours),
    }
    if hf:
        methods.update({
            "HF plain greedy": lambda ids: _hf(target, ids, max_new_tokens),
            "HF assisted greedy (defaults)": lambda ids: _hf(
                target, ids, max_new_tokens, assistant_model=draft),
            f"HF assisted greedy (γ={gamma}, constant)": lambda ids: _hf_at_gamma(
                target, draft, ids, max_new_tokens, gamma),
        })
    encoded = [encode_chat(tokenizer, p, target.device) for p in prompts]
    return run_interleaved(methods, encoded, progress=lambda m: print(" ", m, flush=True))


def lookup_task(target, draft, tokenizer, max_new_tokens: int, gamma: int) -> dict[str, Row]:
    """The prompt-lookup-friendly task (copy a paragraph with small edits), greedy: n-gram drafter vs the
    draft."""
    ours = dict(sampling=SamplingConfig(temperature=0), eos_token_id=tokenizer.eos_token_id)
    lookup = NgramDrafter(vocab_size(target))
    methods = {
        "rewrite: plain greedy": lambda ids: autoregressive_generate(target, ids, max_new_tokens, **ours),
        f"rewrite: n-gram lookup γ={gamma}": lambda ids: speculative_generate(
            target, lookup, ids, max_new_tokens, gamma=gamma, **ours),
        f"rewrite: draft γ={gamma}": lambda ids: speculative_generate(
            target, draft, ids, max_new_tokens, gamma=gamma, **ours),
    }
    encoded = [encode_chat(tokenizer, p, target.device) for p in REWRITE_PROMPTS]
    return run_interleaved(methods, encoded, progress=lambda m: None)


def report(rows: dict[str, Row], baseline: str) -> list[dict]:
    """Print one line per method (tokens/s, speedup over `baseline`, α) and return them as dicts."""
    base = rows[baseline].tokens_per_second
    for r in rows.values():
        alpha = "" if r.alpha is None else f"  α={r.alpha:.2f} (accepted/drafted {r.acceptance_rate:.2f})"
        print(f"  {r.method:<42} {r.tokens_per_second:7.1f} tok/s  {r.tokens_per_second / base:5.2f}x{alpha}")
    return [r.as_dict(base) for r in rows.values()]


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
    target, tok = load_offline_target()
    draft = offline_draft.load(target, args.weights)
    prompts = HELD_OUT[:args.prompts]
    print(f"held-out prompts: {len(prompts)}, max_new_tokens={args.max_new_tokens}, γ={args.gamma}, "
          f"threads={torch.get_num_threads()}")

    c = cost_ratio(target, draft, encode_chat(tok, prompts[0]))
    print(f"cost ratio c = {c:.3f} (one draft step / one target step)")
    seqs = []
    for prompt in prompts:
        x = encode_chat(tok, prompt)
        out = autoregressive_generate(target, x, args.max_new_tokens, sampling=SamplingConfig(0),
                                      eos_token_id=tok.eos_token_id)
        seqs.append((torch.cat([x[0], out.tokens]), x.shape[1]))
    a_greedy, a_t1 = agreement(target, draft, seqs)
    print(f"teacher-forced on the target's greedy answers: α greedy {a_greedy:.3f}, α T=1 {a_t1:.3f}")
    print(f"predicted speedup (Leviathan et al. Theorem 3.8, γ={args.gamma}): greedy "
          f"{predicted_speedup(a_greedy, args.gamma, c):.2f}x, "
          f"T=1 {predicted_speedup(a_t1, args.gamma, c):.2f}x")

    print("side by side (interleaved, one process):")
    rows = side_by_side(target, draft, tok, prompts, args.max_new_tokens, args.gamma, hf=not args.no_hf)
    table = report(rows, "plain greedy (ours)")
    print("prompt-lookup-friendly task (rewrite a paragraph), greedy:")
    lookup = report(lookup_task(target, draft, tok, 2 * args.max_new_tokens, args.gamma),
                    "rewrite: plain greedy")
    result = {"command": "python -m specdec_ref.distill.evaluate "
                         + " ".join(argv if argv is not None else sys.argv[1:]),
              "threads": torch.get_num_threads(), "gamma": args.gamma, "max_new_tokens": args.max_new_tokens,
              "n_prompts": len(prompts), "c": c, "alpha_greedy": a_greedy, "alpha_t1": a_t1,
              "predicted_greedy": predicted_speedup(a_greedy, args.gamma, c),
              "predicted_t1": predicted_speedup(a_t1, args.gamma, c), "table": table, "lookup": lookup}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
