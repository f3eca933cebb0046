"""How a sampled tree should draw its children at T = 1: the head's q sharpened by s, up to children chosen
deterministically (its top w, judged as point masses).

    PYTHONPATH=<checkout> python scripts/tree_children_at_t1.py [--threads 2] [--grid 1,1.2,2,5,20] \
        [--trees 2/2/4,3/3/6] [--seeds 2] [--deterministic]

A dynamic tree at T > 0 draws each node's w children without replacement from the head's q and verifies them
by recursive rejection sampling (`tree.grow_tree`, `tree.verify_tree`); any q is exact, so q may be sharpened
(`FeatureDrafter(sharpness=s)`, s = 1.2 fitted for the depth-1 draw of a chain, `scripts/draft_sharpness.py`).
As s grows the draws approach the head's top w tokens in order, and with --deterministic the children are
exactly those, verified as point masses (the head grows the tree greedily; the target still samples at T = 1).
For each tree and each s: τ (tokens per target pass, the prefill's pass counted) over the tuning prompts
(`distill.prompts.TUNING[:12]`, 64 tokens, --seeds seeds each). One JSON line.
"""
import argparse
import json
import warnings

import torch

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=2)
p.add_argument("--grid", default="1,1.2,2,5,20")
p.add_argument("--trees", default="2/2/4,3/3/6")
p.add_argument("--seeds", type=int, default=2)
p.add_argument("--tokens", type=int, default=64)
p.add_argument("--deterministic", action="store_true", help="also the head's top w, judged as point masses")
args = p.parse_args()
warnings.filterwarnings("ignore")
torch.set_num_threads(args.threads)
import specdec_ref as sd  # noqa: E402
from specdec_ref.distill.prompts import TUNING  # noqa: E402
from specdec_ref.models.method import parse_method  # noqa: E402

target, drafter, tok = sd.load_offline_pair(draft="feature", choose_method=False)
encoded = [sd.encode_chat(tok, q) for q in TUNING[:12]]
T1 = sd.SamplingConfig(1.0)


class TopChildren:
    """The drafter with its tree grown greedily (top-w children, draft_probs None: point masses)."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def propose_tree(self, context_ids, shape, sampling, generator=None, max_depth=None):
        return self.inner.propose_tree(context_ids, shape, sd.SamplingConfig(0), generator, max_depth)


def tau(draft, tree) -> float:
    tokens = passes = 0
    for seed in range(args.seeds):
        for ids in encoded:
            gen = sd.speculative_generate(target, draft, ids, args.tokens, tree=tree, sampling=T1,
                                          generator=torch.Generator().manual_seed(seed))
            tokens, passes = tokens + gen.tokens.shape[0], passes + len(gen.stats.accepted)
    return tokens / passes


result = {"threads": args.threads, "dtype": str(target.dtype), "prompts": "TUNING[:12]", "seeds": args.seeds}
for name in args.trees.split(","):
    tree = parse_method(f"tree {name}")
    row = {}
    for s in (float(x) for x in args.grid.split(",")):
        drafter.sharpness = s
        row[f"s={s:g}"] = round(tau(drafter, tree), 3)
    if args.deterministic:
        row["top w, point masses"] = round(tau(TopChildren(drafter), tree), 3)
    result[f"tree {name}"] = row
    print(json.dumps({f"tree {name}": row}), flush=True)
print(json.dumps(result))
