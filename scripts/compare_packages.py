"""t(k) of two or more compiled packages of the offline target, side by side in one process.

    python scripts/compare_packages.py NAME=PATH.pt2 NAME=PATH.pt2 [--threads 2] [--rounds 5]
    python scripts/compare_packages.py old=OLD.pt2 new=NEW.pt2 --wide old --context 240 --buffer 512

Each PATH is an AOTInductor package of the offline target's pass (`python -m specdec_ref compile` writes this
machine's to ~/.cache/specdec_ref/aot/; keep a copy of an older one to compare). Every round times one pass of
k rows after a --context of 200 tokens (in KV buffers of --buffer positions, by default the fewest that hold
it, at least `aot.MIN_BLOCKS` blocks) for every k and every package in turn, so a burst of load lands on all
alike; medians of the rounds after the first are printed, with each package's t(k)/t(1). Each round also
reads as many bytes as the target's weights hold (a sum over one buffer that size, on the same threads): the
last lines say what fraction of that read rate each package's fastest pass of one token streams its weights
at, which bounds what any faster kernel for these weights could gain. --wide NAME: that package is of a format
before 6 (`aot.FORMAT`), whose masks are as wide as the buffers: its masks are padded with "never".
"""
import argparse
import statistics
import time

import torch

from specdec_ref.lab import packages
from specdec_ref.models import aot
from specdec_ref.models.loading import default_dtype, load_offline_target

KS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16)

p = argparse.ArgumentParser()
p.add_argument("packages", nargs="+", help="NAME=PATH of each package")
p.add_argument("--threads", type=int, default=2)
p.add_argument("--rounds", type=int, default=5)
p.add_argument("--context", type=int, default=200)
p.add_argument("--buffer", type=int, default=0, help="KV buffers of at least this many positions")
p.add_argument("--wide", action="append", default=[], metavar="NAME",
               help="a package of FORMAT 5 or older (masks as wide as the buffers)")
p.add_argument("--format", action="append", default=[], metavar="NAME=N",
               help="a package of an older FORMAT N (lab.packages.older_runner), e.g. old=6")
args = p.parse_args()
FORMATS = {n: int(v) for n, _, v in (f.partition('=') for f in args.format)}
torch.set_num_threads(args.threads)
model, _ = load_offline_target("cpu", default_dtype(torch.device("cpu")), prepack=False)


lms = {}
for item in args.packages:
    name, _, path = item.partition("=")
    if not path:
        p.error(f"give each package as NAME=PATH, got {item!r}")
    runner = packages.checked_package(model, path, 5 if name in args.wide else FORMATS.get(name))
    lms[name] = aot.CompiledPass(model, runner, path).lm(name=name)
CONTEXT = args.context
g = torch.Generator().manual_seed(0)
ids = torch.randint(0, model.config.vocab_size, (max(CONTEXT + max(KS), args.buffer),), generator=g)
times = {(name, k): [] for name in lms for k in KS}
n_bytes = sum(w.numel() * w.element_size() for w in model.parameters())  # the tied output layer once
weights_sized = torch.ones(n_bytes // 2, dtype=torch.bfloat16)
reads = []
with torch.inference_mode():
    for lm in lms.values():
        if args.buffer > CONTEXT:  # grow the buffers first
            lm.logits(ids[:args.buffer], keep=1)
            lm.rollback(0)
        lm.logits(ids[:CONTEXT], keep=1)
    for r in range(args.rounds + 1):  # the first round warms up
        for k in KS:
            for name, lm in lms.items():
                lm.rollback(CONTEXT)
                t0 = time.perf_counter()
                lm.logits(ids[:CONTEXT + k], keep=k)
                if r:
                    times[name, k].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        weights_sized.sum()
        if r:
            reads.append(time.perf_counter() - t0)
t = {key: statistics.median(v) for key, v in times.items()}
print(f"offline target, {model.dtype}, {args.threads} threads, context {CONTEXT}, buffers of "
      f"{next(iter(lms.values())).capacity} positions, medians of {args.rounds} rounds")
print("k   " + "".join(f"{name:>14s}" for name in lms))
for k in KS:
    print(f"{k:<3d} " + "".join(f"{t[name, k] * 1e3:11.1f} ms" for name in lms))
for name in lms:
    print(f"{name}: t(k)/t(1) " + " ".join(f"{t[name, k] / t[name, 1]:.2f}" for k in KS))
read = statistics.median(reads)
print(f"the weights: {n_bytes / 1e6:.0f} MB; reading as many bytes takes {read * 1e3:.1f} ms "
      f"({n_bytes / read / 1e9:.1f} GB/s)")
for name in lms:
    one = min(t[name, 1], t[name, 2])  # one new token: a 1-row pass, or 2 rows where the package pads
    print(f"{name}: one token in {one * 1e3:.1f} ms streams the weights at {n_bytes / one / 1e9:.1f} GB/s, "
          f"{read / one:.2f} of the read rate")
