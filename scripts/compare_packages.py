"""t(k) of two or more compiled packages of the offline target, side by side in one process.

    python scripts/compare_packages.py NAME=PATH.pt2 NAME=PATH.pt2 [--threads 2] [--rounds 5]

Each PATH is an AOTInductor package of the offline target's pass (`python -m specdec_ref compile` writes this
machine's to ~/.cache/specdec_ref/aot/; keep a copy of an older one to compare). Every round times one pass of
k rows after a 200-token context for every k and every package in turn, so a burst of load lands on all
alike; medians of the rounds after the first are printed, with each package's t(k)/t(1).
"""
import argparse
import statistics
import time

import torch

from specdec_ref.models import aot
from specdec_ref.models.loading import default_dtype, load_offline_target

CONTEXT, KS = 200, (1, 2, 3, 4, 5, 6, 8, 10, 12, 16)

p = argparse.ArgumentParser()
p.add_argument("packages", nargs="+", help="NAME=PATH of each package")
p.add_argument("--threads", type=int, default=2)
p.add_argument("--rounds", type=int, default=5)
args = p.parse_args()
torch.set_num_threads(args.threads)
model, _ = load_offline_target("cpu", default_dtype(torch.device("cpu")), prepack=False)
lms = {}
for item in args.packages:
    name, _, path = item.partition("=")
    if not path:
        p.error(f"give each package as NAME=PATH, got {item!r}")
    lms[name] = aot.CompiledPass(model, aot.load_package(path), path).lm(name=name)
g = torch.Generator().manual_seed(0)
ids = torch.randint(0, model.config.vocab_size, (CONTEXT + max(KS),), generator=g)
times = {(name, k): [] for name in lms for k in KS}
with torch.inference_mode():
    for lm in lms.values():
        lm.logits(ids[:CONTEXT], keep=1)
    for r in range(args.rounds + 1):  # the first round warms up
        for k in KS:
            for name, lm in lms.items():
                lm.rollback(CONTEXT)
                t0 = time.perf_counter()
                lm.logits(ids[:CONTEXT + k], keep=k)
                if r:
                    times[name, k].append(time.perf_counter() - t0)
t = {key: statistics.median(v) for key, v in times.items()}
print(f"offline target, {model.dtype}, {args.threads} threads, context {CONTEXT}, "
      f"medians of {args.rounds} rounds")
print("k   " + "".join(f"{name:>14s}" for name in lms))
for k in KS:
    print(f"{k:<3d} " + "".join(f"{t[name, k] * 1e3:11.1f} ms" for name in lms))
for name in lms:
    print(f"{name}: t(k)/t(1) " + " ".join(f"{t[name, k] / t[name, 1]:.2f}" for k in KS))
