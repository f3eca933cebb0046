"""Where a compiled pass of the offline target spends its time, kernel by kernel.

    PYTHONPATH=. python scripts/build_package.py /tmp/prof.pt2 --inductor cpp.enable_kernel_profile=True
    PYTHONPATH=. python scripts/profile_package.py /tmp/prof.pt2 [--rows 2] [--context 200] [--buffer 512]

A package built with Inductor's `cpp.enable_kernel_profile` records each of its kernels with the profiler
(any other package shows only the ATen operations it calls). This times 20 passes of --rows new rows after
--context tokens, in KV buffers of at least --buffer positions, and prints the kernels by their share of the
time (the profiler's own cost included: compare shares, not totals). --wide: a package of `aot.FORMAT` 5 or
older (masks as wide as its buffers).
"""
import argparse

import torch
from torch.profiler import ProfilerActivity, profile

from specdec_ref.lab import packages
from specdec_ref.models import aot
from specdec_ref.models.loading import default_dtype, load_offline_target

p = argparse.ArgumentParser()
p.add_argument("package")
p.add_argument("--rows", type=int, default=2)
p.add_argument("--context", type=int, default=200)
p.add_argument("--buffer", type=int, default=0)
p.add_argument("--threads", type=int, default=2)
p.add_argument("--wide", action="store_true", help="a package of FORMAT 5 or older")
p.add_argument("--format", type=int, default=None,
               help="an older FORMAT's package (lab.packages.older_runner)")
p.add_argument("--top", type=int, default=15)
args = p.parse_args()
torch.set_num_threads(args.threads)
model, _ = load_offline_target("cpu", default_dtype(torch.device("cpu")), prepack=False)
runner = packages.checked_package(model, args.package, 5 if args.wide else args.format)
lm = aot.CompiledPass(model, runner, args.package).lm()
ids = torch.randint(0, model.config.vocab_size, (max(args.context + args.rows, args.buffer),),
                    generator=torch.Generator().manual_seed(0))
with torch.inference_mode():
    if args.buffer > args.context:  # grow the buffers first
        lm.logits(ids[:args.buffer], keep=1)
        lm.rollback(0)
    lm.logits(ids[:args.context], keep=1)
    for _ in range(5):  # warm up
        lm.rollback(args.context)
        lm.logits(ids[:args.context + args.rows], keep=args.rows)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(20):
            lm.rollback(args.context)
            lm.logits(ids[:args.context + args.rows], keep=args.rows)
events = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
total = sum(e.self_cpu_time_total for e in events)
print(f"{args.rows} rows after {args.context} tokens, buffers of {lm.capacity} positions: "
      f"{total / 20 / 1e3:.1f} ms a pass under the profiler")
for e in events[:args.top]:
    print(f"{e.self_cpu_time_total / total:6.1%} {e.self_cpu_time_total / 20 / 1e3:7.3f} ms a pass "
          f"{e.count // 20:4d} calls  {e.key[:90]}")
