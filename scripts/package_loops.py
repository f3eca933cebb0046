"""Two compiled packages of the offline target in the loops themselves, side by side in one process.

    python scripts/package_loops.py NAME=PATH.pt2 NAME=PATH.pt2 [--threads 2] [--prompts 8] [--tokens 64]

`scripts/compare_packages.py` times single passes; this runs plain decoding, the feature head's chain of
γ = 1 and its trees 2/2/4 and 3/3/8 through each package (greedy, held-out chat prompts
`distill.prompts.HELD_OUT[12:]`), packages and methods interleaved prompt by prompt, and prints tokens/s and
the speedup over the faster plain loop of the two. To build a package with oneDNN's kernels instead of the
autotuned micro-GEMM: `aot.build(model, path, options=dict(freezing=True))` on the plain model (the README).
"""
import argparse
import collections
import os
from pathlib import Path
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("packages", nargs=2, help="NAME=PATH of each package")
p.add_argument("--threads", type=int, default=2)
p.add_argument("--prompts", type=int, default=8)
p.add_argument("--tokens", type=int, default=64)
args = p.parse_args()
torch.set_num_threads(args.threads)
os.environ.setdefault("SPECDEC_CALIBRATE", "0")  # the methods are given below
import specdec_ref as sd  # noqa: E402
from specdec_ref.distill.prompts import HELD_OUT  # noqa: E402
from specdec_ref.models import aot, aot_use  # noqa: E402

target, draft, tok = sd.load_offline_pair(draft="feature")
packages = {}
for item in args.packages:
    name, _, path = item.partition("=")
    if not path:
        p.error(f"give each package as NAME=PATH, got {item!r}")
    runner = aot.load_package(path)
    fresh = (lambda r: lambda: aot.CompiledCachedModel(target, r))(runner)  # a CachedModel of this package
    pad = aot_use.first_load(target, fresh, Path(path)).pad_single
    packages[name] = aot.CompiledPass(target, runner, path, pad)
methods = {"plain": None, "chain γ=1": dict(gamma=1), "tree 2/2/4": dict(tree=sd.TreeBudget(2, 2, 4)),
           "tree 3/3/8": dict(tree=sd.TreeBudget(3, 3, 8))}
encoded = [sd.encode_chat(tok, q) for q in HELD_OUT[12:12 + args.prompts]]


def run(method, ids, n):
    how = methods[method]
    return (sd.autoregressive_generate(target, ids, n) if how is None
            else sd.speculative_generate(target, draft, ids, n, **how))


seconds, tokens = collections.Counter(), collections.Counter()
for name, compiled in packages.items():  # warm up every package and method
    target.__dict__["_specdec_compiled"] = compiled
    for m in methods:
        run(m, encoded[0], 8)
for ids in encoded:
    for name, compiled in packages.items():
        target.__dict__["_specdec_compiled"] = compiled
        for m in methods:
            start = time.perf_counter()
            out = run(m, ids, args.tokens)
            seconds[name, m] += time.perf_counter() - start
            tokens[name, m] += out.tokens.shape[0]
plain = max(tokens[name, "plain"] / seconds[name, "plain"] for name in packages)
print(f"{target.dtype}, {args.threads} threads, {len(encoded)} prompts x {args.tokens} tokens, greedy; "
      f"speedups over the faster plain loop ({plain:.1f} tokens/s)")
print("| package | " + " | ".join(methods) + " |\n|---|" + "---:|" * len(methods))
for name in packages:
    speeds = [tokens[name, m] / seconds[name, m] for m in methods]
    print(f"| {name} | " + " | ".join(f"{v:.1f} tokens/s ({v / plain:.2f}×)" for v in speeds) + " |")
