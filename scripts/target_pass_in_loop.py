"""Does the target's pass cost more inside the speculative loop than back to back? One run, one process.

    PYTHONPATH=<checkout> python scripts/target_pass_in_loop.py [--threads 2] [--prompts 4] [--rounds 2]

First the loops: plain greedy decoding and the default greedy tree 2/2/3 on the bench's prompts (64 tokens),
with every target pass timed by a wrapper around `CachedModel.logits`: the median one-row pass of the plain
loop and the median four-row pass of the tree loop. Then the same four-row tree pass alone, after 80 tokens of
one answer, timed after each of: another target pass (back to back), the head drafting a tree 2/2/3, a stream
through 100 MB of other memory, and 20,000 small Python objects made and dropped; shuffled with a fixed seed,
medians in ms. One JSON line.
"""
import argparse
import json
import random
import statistics
import time
import warnings

import torch

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=2)
p.add_argument("--prompts", type=int, default=4)
p.add_argument("--rounds", type=int, default=2)
p.add_argument("--repeats", type=int, default=40)
args = p.parse_args()
warnings.filterwarnings("ignore")
torch.set_num_threads(args.threads)
import specdec_ref as sd  # noqa: E402
from specdec_ref import cache  # noqa: E402
from specdec_ref.lab.bench import BENCH_PROMPTS  # noqa: E402
from specdec_ref.tree import Tree, tree_attention_mask, tree_position_ids  # noqa: E402

target, drafter, tok = sd.load_offline_pair()
encoded = [sd.encode_chat(tok, q) for q in BENCH_PROMPTS[:args.prompts]]
greedy, tree = sd.SamplingConfig(0), sd.TreeBudget(2, 2, 3)
passes: list[tuple[int, float]] = []  # (rows, seconds) of every target pass after a 20-token context
untimed = cache.CachedModel.logits


def timed(self, context_ids, keep=None, **kwargs):
    n_cached, start = self.n_cached, time.perf_counter()
    out = untimed(self, context_ids, keep, **kwargs)
    if n_cached > 20:
        passes.append((context_ids.shape[0] - n_cached, time.perf_counter() - start))
    return out


cache.CachedModel.logits = timed
loops = {"plain": [], "tree 2/2/3": []}
for _ in range(args.rounds):
    for name in loops:
        passes.clear()
        for ids in encoded:
            if name == "plain":
                sd.autoregressive_generate(target, ids, 64, sampling=greedy)
            else:
                sd.speculative_generate(target, drafter, ids, 64, tree=tree, sampling=greedy)
        loops[name] += [s for rows, s in passes if rows == (1 if name == "plain" else 4)]
cache.CachedModel.logits = untimed

new_tokens = sd.autoregressive_generate(target, encoded[0], 64, sampling=greedy).tokens
answer = torch.cat([encoded[0][0], new_tokens])
n = min(80, answer.shape[0] - 4)
other = torch.zeros(25_000_000)  # 100 MB of float32 that no model uses
with torch.inference_mode():
    lm = cache.CachedModel(target, keep_hidden=True, name="target")
    lm.logits(answer[:n])
    hidden = lm.hidden
    drafter.sync(0)
    drafter.sync(n, hidden)
    shape = Tree((-1, 0, 0, 1))  # the newest token, two children, a grandchild under the first: rows n..n + 3
    mask = tree_attention_mask(shape, n + 1, n, n + 4, lm.dtype)  # the loop's own mask and positions
    positions = tree_position_ids(shape, n + 1, n, n + 4)

    def draft_tree() -> None:
        drafter.sync(n - 1, hidden[:n - 1])
        drafter.sync(n, hidden)
        drafter.propose_tree(answer[:n], tree, greedy)

    before = {"back to back": lambda: None, "after the head drafts a tree": draft_tree,
              "after 100 MB streamed": lambda: other.add_(1.0),
              "after 20,000 Python objects": lambda: [dict(i=i, x=[i] * 10) for i in range(20000)]}
    alone = {case: [] for case in before}
    order = list(before) * args.repeats
    random.Random(0).shuffle(order)
    for case in order:
        before[case]()
        lm.rollback(n)
        start = time.perf_counter()
        lm.logits(answer[:n + 4], position_ids=positions, attention_mask=mask)
        alone[case].append(time.perf_counter() - start)
ms = {name: round(statistics.median(v) * 1e3, 2) for name, v in loops.items()}
print(json.dumps({"threads": args.threads, "dtype": str(target.dtype),
                  "in_loop_ms": {"plain, one row": ms["plain"], "tree 2/2/3, four rows": ms["tree 2/2/3"]},
                  "alone_four_rows_ms": {c: round(statistics.median(v[3:]) * 1e3, 2)
                                         for c, v in alone.items()}}))
