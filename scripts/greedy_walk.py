"""Greedy verification of one tree, from the target's logits: the general route (one-hot rows by
`logits_to_probs`, then the one walk `verify_tree`) against the loop's shortcut (one `sampling.argmax`, then
`verify_tree_greedy` on integers, plus the one-hot rows that `Step` reports).

    python scripts/greedy_walk.py [--threads 1] [--dtype bfloat16]  # µs per tree; both agree

It also times the argmax of those rows both ways: `torch.argmax` and `sampling.argmax` (through `max`).
"""
import argparse
import statistics
import time

import torch

from specdec_ref.sampling import SamplingConfig, argmax, logits_to_probs, point_masses
from specdec_ref.tree import Tree, verify_tree, verify_tree_greedy

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=1)
p.add_argument("--dtype", default="bfloat16")
args = p.parse_args()
torch.set_num_threads(args.threads)
V, greedy = 49152, SamplingConfig(0)
g = torch.Generator().manual_seed(0)
tree = Tree.from_branching((3, 2, 1, 1))
N = tree.size


def general(logits, node_tokens):
    return verify_tree(tree, node_tokens, logits_to_probs(logits, greedy))


def shortcut(logits, node_tokens):  # as the loop does it: argmax through max
    best = argmax(logits)
    path, token = verify_tree_greedy(tree, node_tokens, best)
    point_masses(best, V, logits.dtype)  # the rows Step carries
    return path, token


res = {"general route": [], "shortcut": []}
for trial in range(100):
    logits = torch.randn(N + 1, V, generator=g).to(getattr(torch, args.dtype))
    best = logits.argmax(-1)
    node_tokens = torch.randint(0, V, (N + 1,), generator=g)
    for i in range(1, N + 1):  # half the nodes carry the target's choice at their parent
        if torch.rand((), generator=g) < 0.5:
            node_tokens[i] = best[tree.parents[i]]
    for name, fn in (("general route", general), ("shortcut", shortcut)):
        fn(logits, node_tokens)  # warm: the first call after new logits pays for fresh memory
        t0 = time.perf_counter()
        for _ in range(5):
            fn(logits, node_tokens)
        res[name].append((time.perf_counter() - t0) / 5)
    a, b = general(logits, node_tokens), shortcut(logits, node_tokens)
    assert a[0] == b[0] and int(a[1]) == int(b[1])
for k, v in res.items():
    print(f"{k:14s} {statistics.median(v) * 1e6:5.0f} µs median per tree of {N} nodes over {V} tokens "
          f"({args.dtype}, {args.threads} thread)")

for rows in (1, 5, N + 1):
    x = torch.randn(rows, V, generator=g).to(getattr(torch, args.dtype))
    cost = {}
    for name, fn in (("torch.argmax", lambda: x.argmax(-1)), ("sampling.argmax", lambda: argmax(x))):
        fn()
        t0 = time.perf_counter()
        for _ in range(100):
            fn()
        cost[name] = (time.perf_counter() - t0) / 100 * 1e6
    print(f"argmax of {rows:2d} rows: " + ", ".join(f"{k} {v:.0f} µs" for k, v in cost.items()))
