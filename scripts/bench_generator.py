"""The corpus generator before and after: answer tokens/s of `distill.train.sample_batch_plain` (the loop as
first written: one padded prefill, a DynamicCache, SDPA with a padding mask) and `sample_batch` (each prompt
prefilled alone, buffers allocated once, `one_token_attention`), on the same prompts, alternating.

    OMP_NUM_THREADS=1 python scripts/bench_generator.py --threads 1 --batch 64 --max-new-tokens 96

It loads the offline target once and answers the first --batch prompts of the seed-1 corpus as chats, with
the generation copy `distill.eagle.run` makes (`prepack_for_cpu(copy_model(target).to(dtype))`).
At temperature 0 it also reports how many answers the two agree on token for token.
"""
import argparse
import json
import warnings
from pathlib import Path

import torch

from specdec_ref.device import seconds_since, start_timer
from specdec_ref.distill.batch_sample import sample_batch, sample_batch_plain
from specdec_ref.distill.train import pick_dtype
from specdec_ref.models import load_offline_target
from specdec_ref.models.aot import copy_model
from specdec_ref.models.kernels import prepack_for_cpu

PROMPTS = Path(__file__).resolve().parents[1] / "specdec_ref/distill/corpus/seed1/prompts.json"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, default=64, help="prompts answered together")
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--repeats", type=int, default=1, help="old/new pairs, alternating")
    p.add_argument("--dtype", default="auto",
                   help="auto (as distill.eagle: bfloat16 where native), float32, ...")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    target, tokenizer = load_offline_target("cpu")
    dtype = pick_dtype(args.dtype, target)
    gen_model = prepack_for_cpu(copy_model(target).to(dtype))  # as distill.eagle.run makes it
    chats = [[{"role": "user", "content": c}] for c in json.loads(PROMPTS.read_text())[:args.batch]]
    # as distill.eagle._generate encodes conversations
    prompts = [tokenizer.apply_chat_template(c, add_generation_prompt=True,
                                             return_tensors="pt")["input_ids"][0] for c in chats]
    print(f"{len(prompts)} prompts of {min(map(len, prompts))}-{max(map(len, prompts))} tokens, {dtype}, "
          f"{args.threads} thread(s), T={args.temperature}, up to {args.max_new_tokens} new tokens",
          flush=True)
    totals = {"old": [0, 0.0], "new": [0, 0.0]}
    for r in range(args.repeats):
        answers = {}
        for name, fn in (("old", sample_batch_plain), ("new", sample_batch)):
            t0 = start_timer("cpu")
            rows = fn(gen_model, prompts, args.max_new_tokens, args.temperature, 1, tokenizer.eos_token_id,
                      torch.Generator().manual_seed(r))
            seconds, n = seconds_since(t0, "cpu"), sum(row["answer"].shape[0] for row in rows)
            totals[name][0] += n
            totals[name][1] += seconds
            answers[name] = [row["answer"].tolist() for row in rows]
            print(f"repeat {r} {name}: {n} answer tokens in {seconds:.1f} s = {n / seconds:.0f} tok/s",
                  flush=True)
        if args.temperature == 0:
            same = sum(a == b for a, b in zip(answers["old"], answers["new"]))
            print(f"repeat {r}: {same}/{len(prompts)} greedy answers identical token for token", flush=True)
    old, new = (totals[k][0] / totals[k][1] for k in ("old", "new"))
    print(f"answer tokens/s: old {old:.0f}, new {new:.0f}, new/old {new / old:.2f}x")


if __name__ == "__main__":
    main()
