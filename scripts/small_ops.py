"""The loop's small tensor operations timed back to back, hot in the caches: what they cost on their own, to
set beside what `scripts/loop_phases.py` finds them costing inside the loop, right after a target pass.

    python scripts/small_ops.py [--threads 2] [--repeats 3000]

Shapes are the offline pair's: the target's vocabulary (V = 49,152), the head's reduced one (K = 8,192), a
chain of γ = 2 (3 target rows) and a tree's 1-3 expanded nodes. Prints µs per call.
"""
import argparse
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=2)
p.add_argument("--repeats", type=int, default=3000)
args = p.parse_args()
torch.set_num_threads(args.threads)
from specdec_ref.sampling import SamplingConfig, logits_to_probs, point_masses, sample  # noqa: E402
from specdec_ref.verify import residual  # noqa: E402

V, K = 49152, 8192
g = torch.Generator().manual_seed(0)


def micros(fn, n=args.repeats) -> float:
    for _ in range(n // 20):
        fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def grow_step(logits: torch.Tensor, w: int = 3):  # what tree.grow_tree does per greedy draft pass: [n, K]
    top = logits.topk(w, dim=-1)
    return logits.log_softmax(-1, dtype=torch.float32).gather(-1, top.indices).tolist(), top.indices.tolist()


target_rows = torch.randn(3, V, generator=g).bfloat16()
p_target = logits_to_probs(target_rows, SamplingConfig(1.0))
p_draft = logits_to_probs(torch.randn(3, V, generator=g), SamplingConfig(1.0))
token = torch.tensor([5])
ops = {
    "one-hot draft row [1, V] (point_masses)": lambda: point_masses(token, V, torch.bfloat16),
    "greedy tree growth, 1 node [1, K]": (lambda x: lambda: grow_step(x))(torch.randn(1, K).bfloat16()),
    "greedy tree growth, 3 nodes [3, K]": (lambda x: lambda: grow_step(x))(torch.randn(3, K).bfloat16()),
    "target logits_to_probs at T = 1 [3, V]": lambda: logits_to_probs(target_rows, SamplingConfig(1.0)),
    "residual [V]": lambda: residual(p_target[0], p_draft[0]),
    "sample [V]": lambda: sample(p_target[0], g),
}
print(f"{args.threads} threads, {torch.get_num_threads()} in use; µs per call, back to back")
for name, fn in ops.items():
    print(f"{name:42s} {micros(fn):7.1f}")
