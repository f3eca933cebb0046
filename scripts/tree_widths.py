"""Wider dynamic trees at depth 2 against the calibration's candidates, side by side in one run (greedy).

    PYTHONPATH=<checkout> python scripts/tree_widths.py [--threads 2] [--rounds 2] \
        [--trees 2/2/3,2/2/4,2/3/4,2/3/5,2/4/6,3/3/6] [--temperature 0]

With t(k)/t(1) flat up to five or six rows, a tree can give depth 1 more siblings for little: the head's first
pass already ranks them. This runs plain decoding and each tree (TreeBudget depth/topk/n_nodes) on the bench's
prompts, prompt by prompt and round after round (`lab.bench.run_interleaved`; at T > 0 each row's generator
moves on from prompt to prompt), and prints one JSON line: each tree's speedup over the plain loop and τ
(tokens per target pass, the prefill's pass counted).
"""
import argparse
import json
import warnings

import torch

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=2)
p.add_argument("--rounds", type=int, default=2)
p.add_argument("--prompts", type=int, default=8)
p.add_argument("--tokens", type=int, default=64)
p.add_argument("--temperature", type=float, default=0.0)
p.add_argument("--trees", default="2/2/3,2/2/4,2/3/4,2/3/5,2/4/6,3/3/6")
args = p.parse_args()
warnings.filterwarnings("ignore")
torch.set_num_threads(args.threads)
import specdec_ref as sd  # noqa: E402
from specdec_ref.lab.bench import BENCH_PROMPTS, run_interleaved  # noqa: E402
from specdec_ref.models.method import parse_method  # noqa: E402

target, drafter, tok = sd.load_offline_pair(draft="feature", choose_method=False)
encoded = [sd.encode_chat(tok, q) for q in BENCH_PROMPTS[:args.prompts]]
sampling = sd.SamplingConfig(args.temperature)
names = ["plain"] + [f"tree {t}" for t in args.trees.split(",")]


def runner(name: str):
    g = torch.Generator().manual_seed(0)  # one per row: its draws move on from prompt to prompt
    if name == "plain":
        return lambda ids: sd.autoregressive_generate(target, ids, args.tokens, sampling=sampling,
                                                      generator=g)
    return lambda ids: sd.speculative_generate(target, drafter, ids, args.tokens, tree=parse_method(name),
                                               sampling=sampling, generator=g)


# rounds as more prompts: every row runs on every prompt in turn, prompt by prompt (a warm-up first)
rows = run_interleaved({name: runner(name) for name in names}, encoded * args.rounds, progress=lambda _: None)
plain = rows["plain"].tokens_per_second
print(json.dumps({"threads": args.threads, "dtype": str(target.dtype), "temperature": args.temperature,
                  "plain tokens/s": round(plain, 1),
                  **{name: {"speedup": round(row.tokens_per_second / plain, 3), "tau": round(row.tau, 2)}
                     for name, row in rows.items() if name != "plain"}}))
