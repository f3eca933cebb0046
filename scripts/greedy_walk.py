"""Greedy through the one tree walk against a separate argmax walk (the one removed when trees got one rule).

    python scripts/greedy_walk.py     # median microseconds per verification; the two agree on every tree
"""
import statistics
import time

import torch

from specdec_ref.tree import Tree, verify_tree

torch.set_num_threads(1)


def verify_tree_greedy(tree, node_tokens, target_probs):  # the walk removed: argmax at every node
    path, node = [], 0
    while True:
        best = target_probs[node].argmax()
        match = [c for c in tree.children(node) if node_tokens[c] == best]
        if not match:
            return path, best[None]
        node = match[0]
        path.append(node)


V = 49152
g = torch.Generator().manual_seed(0)
tree = Tree.from_branching((3, 2, 1, 1))
N = tree.size
res = {"one walk": [], "greedy walk": []}
for trial in range(300):
    node_tokens = torch.randint(0, V, (N + 1,), generator=g)
    argmax = torch.randint(0, V, (N + 1,), generator=g)
    for i in range(1, N + 1):  # half the nodes carry the target's choice at their parent
        if torch.rand((), generator=g) < 0.5:
            node_tokens[i] = argmax[tree.parents[i]]
    probs = torch.zeros(N + 1, V).scatter_(1, argmax[:, None], 1.0)  # greedy: one-hot target rows
    for name, fn in (("one walk", lambda: verify_tree(tree, node_tokens, probs)),
                     ("greedy walk", lambda: verify_tree_greedy(tree, node_tokens, probs))):
        t0 = time.perf_counter()
        fn()
        res[name].append(time.perf_counter() - t0)
    a, b = verify_tree(tree, node_tokens, probs), verify_tree_greedy(tree, node_tokens, probs)
    assert a[0] == b[0] and int(a[1]) == int(b[1])
for k, v in res.items():
    print(k, f"{statistics.median(v) * 1e6:.0f} µs median per tree of {N} nodes")
