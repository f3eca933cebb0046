"""A free branch for the head's tree: what followed the context's last tokens earlier in the context.

    PYTHONPATH=<checkout> python scripts/lookup_branch.py [--threads 2] [--rounds 2] [--length 2] \
        [--min-n 1] [--prompts 10] [--dtype float32]

Prompt lookup drafts by finding the context's last n tokens (n = 3, else 2, ... down to --min-n) earlier in
the context and proposing the --length tokens that followed them, with no model pass. Here that chain is hung
under the root of the head's greedy tree 2/2/3, sharing the nodes it agrees with; greedy verification keeps
a node exactly when it is the target's argmax, so any extra branch is exact and can only lengthen the kept
path. First the estimate: along the target's plain greedy answers to the evaluation prompts (64 tokens), how
often the lookup would have kept more than the head's tree did, and τ with it. Then the loop, the two
alternating prompt by prompt on the same prompts: tokens per second, τ (tokens per target pass after the
prefill) and the plain loop's rate, and whether both wrote the same tokens (in bfloat16 a pass with other
rows can part at a near-tie; --dtype float32 checks exactness without that). One JSON line.
"""
import argparse
import json
import time
import warnings

import torch

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=2)
p.add_argument("--rounds", type=int, default=2)
p.add_argument("--length", type=int, default=2)
p.add_argument("--min-n", type=int, default=1)
p.add_argument("--prompts", type=int, default=10, help="how many of the 10 evaluation prompts")
p.add_argument("--dtype", default=None, help="the target's dtype (default: the faster on this machine)")
args = p.parse_args()
warnings.filterwarnings("ignore")
torch.set_num_threads(args.threads)
import specdec_ref as sd  # noqa: E402
from specdec_ref import drafters  # noqa: E402
from specdec_ref.distill.prompts import HELD_OUT  # noqa: E402


def graft(tree: sd.Tree, tokens: list[int], chain: list[int]) -> tuple[sd.Tree, list[int]]:
    """The chain hung under the root, following the nodes whose tokens it matches; breadth first again."""
    parents, tokens, node = list(tree.parents), list(tokens), 0
    for token in chain:
        child = next((c for c in range(1, len(parents)) if parents[c] == node and tokens[c] == token), None)
        if child is None:
            parents.append(node)
            tokens.append(token)
            child = len(parents) - 1
        node = child
    depth = [0]
    for parent in parents[1:]:
        depth.append(depth[parent] + 1)
    order = sorted(range(len(parents)), key=lambda v: (depth[v], v))
    new_id = {v: i for i, v in enumerate(order)}
    return sd.Tree(tuple(-1 if v == 0 else new_id[parents[v]] for v in order)), [tokens[v] for v in order]


target, drafter, tok = sd.load_offline_pair(dtype=getattr(torch, args.dtype) if args.dtype else None)
lookup = sd.NgramDrafter(sd.vocab_size(target), max_ngram=3, min_ngram=args.min_n)
encoded = [sd.encode_chat(tok, text) for text in HELD_OUT[12:12 + args.prompts]]  # the evaluation prompts
tree, greedy = sd.TreeBudget(2, 2, 3), sd.SamplingConfig(0)
grafting = [False]
head_tree = drafters.FeatureDrafter.propose_tree


def propose_tree(self, context_ids, shape, sampling, generator=None, max_depth=None):
    shape_, tokens, q = head_tree(self, context_ids, shape, sampling, generator, max_depth)
    if grafting[0] and q is None and shape_.size:
        chain = lookup.lookup(context_ids, args.length if max_depth is None else min(args.length, max_depth))
        if chain.shape[0]:
            shape_, tokens = graft(shape_, tokens.tolist(), chain.tolist())
            tokens = context_ids.new_tensor(tokens)
    return shape_, tokens, q


drafters.FeatureDrafter.propose_tree = propose_tree
# the estimate, along the plain greedy answers: the head's tree as it is, and the lookup's match
kept, longer, iterations, extra = 0, 0, 0, 0
for ids in encoded:
    starts: list[tuple[int, int]] = []
    out = sd.speculative_generate(target, drafter, ids, 64, tree=tree, sampling=greedy,
                                  on_step=lambda s: starts.append((s.context_len, s.n_accepted)))
    answer = torch.cat([ids[0], out.tokens])
    for T, n in starts[1:]:  # the first is the prefill
        truth = answer[T:T + args.length].tolist()  # what the target wrote next (shorter at the end)
        chain = lookup.lookup(answer[:T], args.length).tolist()[:len(truth)]
        m = next((j for j, t in enumerate(chain) if t != truth[j]), len(chain))  # tokens the lookup got right
        iterations, kept, longer, extra = iterations + 1, kept + n, longer + (m > n), extra + max(m - n, 0)
estimate = {"iterations": iterations, "tau_tree": round(1 + kept / iterations, 3),
            "tau_with_lookup": round(1 + (kept + extra) / iterations, 3), "lookup_kept_more": longer}

seconds, tokens, passes, after, answers = {}, {}, {}, {}, {}
for r in range(args.rounds):
    for i, ids in enumerate(encoded):
        for name in (["tree", "tree + lookup"] if (i + r) % 2 == 0 else ["tree + lookup", "tree"]):
            grafting[0] = name == "tree + lookup"
            t0 = time.perf_counter()
            out = sd.speculative_generate(target, drafter, ids, 64, tree=tree, sampling=greedy)
            seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - t0
            tokens[name] = tokens.get(name, 0) + out.tokens.shape[0]
            # after the prefill (which wrote the first token): tokens per target pass
            passes[name] = passes.get(name, 0) + out.stats.target_calls - 1
            after[name] = after.get(name, 0) + out.tokens.shape[0] - 1
            answers.setdefault(name, []).append(out.tokens.tolist())
        t0 = time.perf_counter()
        out = sd.autoregressive_generate(target, ids, 64, sampling=greedy)
        seconds["plain"] = seconds.get("plain", 0.0) + time.perf_counter() - t0
        tokens["plain"] = tokens.get("plain", 0) + out.tokens.shape[0]
print(json.dumps({"threads": args.threads, "length": args.length, "min_n": args.min_n, "estimate": estimate,
                  "tokens_per_s": {k: round(tokens[k] / seconds[k], 2) for k in seconds},
                  "tau": {k: round(after[k] / passes[k], 3) for k in passes},
                  "same_tokens": answers["tree"] == answers["tree + lookup"]}))
