"""Would software prefetching make the dot-product micro-GEMM stream its weights faster? One layer, both ways.

    PYTHONPATH=. python scripts/micro_gemm_prefetch.py [--threads 2] [--shape 49152x576] \
        [--distances 16,64,128] [--rounds 40] [--out /tmp/prefetch_probe]

`models.bf16_gemm`'s kernel loads each 64-byte line of weights just before it multiplies with it; asked to,
it also requests the line `prefetch` k ahead (`bf16_gemm.micro_gemm_class(prefetch)`; each step of 2 in k is
192 bytes further on). This builds one bfloat16 linear layer (by default the offline target's output layer,
N x K = 49,152 x 576: 57 MB, more than the caches hold) into an AOTInductor package with the kernel as it is
("base") and at each given distance, a few seconds each (the C++ template only: autotuning never swaps in
oneDNN's product). Then it times M = 1, 2, 4, 8 rows through every
package in turn, round after round, after writing 64 MB between passes as a target pass would, and prints
median ms, t(M)/t(1) and the rate at which one row streams the weights. Needs a CPU with AVX512-BF16
(`bf16_gemm.wanted()`).
"""
import argparse
import functools
import statistics
import time
from pathlib import Path

import torch

from specdec_ref.models import aot, bf16_gemm

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=2)
p.add_argument("--shape", default="49152x576", help="N x K: output and input features")
p.add_argument("--distances", default="16,64,128", help="prefetch distances in k (even numbers)")
p.add_argument("--rounds", type=int, default=40)
p.add_argument("--out", default="/tmp/prefetch_probe")
args = p.parse_args()
torch.set_num_threads(args.threads)
if not bf16_gemm.wanted():
    raise SystemExit("this CPU (or compiler) has no AVX512-BF16 dot-product instruction for bf16_gemm")
N, K = map(int, args.shape.split("x"))


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(K, N, bias=False, dtype=torch.bfloat16)

    def forward(self, x):
        return (self.lin(x),)


torch.manual_seed(0)
layer = Layer().eval()
out = Path(args.out)
CPP_ONLY = dict(aot.INDUCTOR, max_autotune_gemm_backends="CPP")
variants = {"base": 0} | {f"prefetch {d}": int(d) for d in args.distances.split(",")}
runners = {}
for name, distance in variants.items():
    path = out / f"{name.replace(' ', '_')}_{N}x{K}_{args.threads}.pt2"  # built again every run
    rows = torch.export.Dim("rows", min=1, max=64)
    saved = bf16_gemm.dot_products
    bf16_gemm.dot_products = functools.partial(saved, prefetch=distance)  # aot._compile calls it
    try:  # the C++ template only, so the product is the dot-product kernel's, never oneDNN's
        aot._compile(layer, (torch.randn(3, K, dtype=torch.bfloat16),), ({0: rows},), path, CPP_ONLY, name)
    finally:
        bf16_gemm.dot_products = saved
    runners[name] = aot.load_package(path)
ms = (1, 2, 4, 8)
xs = {m: torch.randn(m, K, dtype=torch.bfloat16) for m in ms}
for name, run in runners.items():  # every variant computes the layer
    worst = float((run(xs[8])[0].float() - layer.lin(xs[8]).float()).abs().max())
    assert worst < 0.1, (name, worst)
flush = torch.empty(64 << 20, dtype=torch.uint8)
times = {(name, m): [] for name in runners for m in ms}
for r in range(args.rounds):
    for m in ms:
        for name, run in runners.items():
            flush.add_(1)
            t0 = time.perf_counter()
            run(xs[m])
            times[name, m].append(time.perf_counter() - t0)
print(f"{N} x {K} bfloat16, {args.threads} threads, {args.rounds} interleaved rounds "
      "(medians, the first 3 dropped)")
for name in runners:
    med = {m: statistics.median(times[name, m][3:]) for m in ms}
    print(f"{name:12s} " + " ".join(f"M={m}: {med[m] * 1e3:6.3f} ms" for m in ms)
          + " | t(M)/t(1) " + " ".join(f"{med[m] / med[1]:.2f}" for m in ms[1:])
          + f" | one row at {N * K * 2 / med[1] / 1e9:.1f} GB/s")
