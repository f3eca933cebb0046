"""Small dynamic trees against chains on the offline pair, side by side in one process: where t(k) is flat
only up to 3-4 rows (a 2-core CPU), a tree of 2-3 nodes is all a tree can afford.

    python scripts/small_trees.py [--threads 2] [--prompts 8] [--tokens 64] [--methods 1,2,1/2/2,1/3/3,2/2/3]

Plain decoding, chains γ = 1 and 2, trees 1/2/2, 1/3/3 and 2/2/3 (depth / width / nodes) and the default the
loader chose, interleaved prompt by prompt (`lab.diagnose.measure_speedups`) on held-out chat prompts
(`distill.prompts.HELD_OUT[12:]`), greedy and at T = 1: tokens/s, speedup over plain decoding and τ per
target pass. Prints one table per sampling setting.
"""
import argparse

import torch

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=2)
p.add_argument("--prompts", type=int, default=8)
p.add_argument("--tokens", type=int, default=64)
p.add_argument("--methods", default="1,2,1/2/2,1/3/3,2/2/3",
               help="chains (γ) and trees (depth/width/nodes), comma-separated, e.g. 1,2,2/2/4,3/3/8")
args = p.parse_args()
torch.set_num_threads(args.threads)
import specdec_ref as sd  # noqa: E402
from specdec_ref.distill.prompts import HELD_OUT  # noqa: E402
from specdec_ref.lab.diagnose import measure_speedups  # noqa: E402
from specdec_ref.models.method import method_kwargs, method_name, parse_method  # noqa: E402

target, draft, tok = sd.load_offline_pair(draft="feature")
encoded = [sd.encode_chat(tok, q) for q in HELD_OUT[12:12 + args.prompts]]
methods = [parse_method(f"tree {m}" if "/" in m else f"chain γ={m}") for m in args.methods.split(",")]
for label, sampling in (("greedy", sd.SamplingConfig(0)), ("T=1", sd.SamplingConfig(1.0))):
    default = draft.default_method(sampling)
    runs = {method_name(m): (draft, method_kwargs(m))
            for m in methods}
    runs[f"the default ({method_name(default)})"] = (draft, {})
    rows = measure_speedups(target, runs, encoded, args.tokens, sampling, 0, tok.eos_token_id)
    plain = rows["plain"].tokens_per_second
    print(f"\n{label}, {target.dtype}, {args.threads} threads, {len(encoded)} prompts x {args.tokens} tokens")
    print("| method | tokens/s | speedup | τ per target pass |\n|---|---:|---:|---:|")
    for name, row in rows.items():
        tau = f"{row.tau:.2f}" if name != "plain" else ""
        print(f"| {name} | {row.tokens_per_second:.1f} | {row.tokens_per_second / plain:.2f}× | {tau} |")
