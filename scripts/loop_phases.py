"""Where the loop's own time goes, phase by phase, for the offline pair's compiled target and head.

    python scripts/loop_phases.py [--threads 2] [--prompts 8] [--tokens 64] [--gamma 2] [--temperature 0]
    python scripts/loop_phases.py --tree 2/2/3     # a dynamic tree (TreeBudget depth/topk/n_nodes) instead

Chains (or, with --tree, dynamic trees) of the feature head on `distill.prompts.HELD_OUT[12:]`, greedy unless
--temperature is given. The compiled packages' calls are timed (their runners wrapped), and so is each phase
of an iteration (the drafter's propose and its parts, the target's `logits` wrapper, verification, rollback,
...), each less the package time inside it: what is left is Python and the small torch operations around the
packages, in ms per iteration. Phases nest (propose holds the head's passes, which hold their masks), so the
rows do not add up.
Needs `python -m specdec_ref compile`.
"""
import argparse
import collections
import os
import sys
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=2)
p.add_argument("--prompts", type=int, default=8)
p.add_argument("--tokens", type=int, default=64)
p.add_argument("--gamma", type=int, default=2)
p.add_argument("--temperature", type=float, default=0.0)
p.add_argument("--tree", default=None, help="depth/topk/n_nodes of a TreeBudget, e.g. 2/2/3 (not --gamma)")
args = p.parse_args()
torch.set_num_threads(args.threads)
os.environ.setdefault("SPECDEC_CALIBRATE", "0")  # the method is given below
import specdec_ref as sd  # noqa: E402
import specdec_ref.drafters as drafters  # noqa: E402
import specdec_ref.generate as gen  # noqa: E402
import specdec_ref.tree as trees  # noqa: E402
from specdec_ref.distill.prompts import HELD_OUT  # noqa: E402
from specdec_ref.lab.timing import InsideClock  # noqa: E402
from specdec_ref.models import aot, aot_chain, aot_head, aot_tree, aot_verdict  # noqa: E402
from specdec_ref.models.method import parse_method  # noqa: E402

target, draft, tok = sd.load_offline_pair(draft="feature")
compiled = sd.models.aot.compiled_pass(target)
if compiled is None or not isinstance(draft.head, aot_head.CompiledHead):
    raise SystemExit("no compiled target or head on this machine: run python -m specdec_ref compile")
inside, spent = InsideClock(), collections.Counter()


def phase(name, fn):  # fn's time less the package time inside it
    def timed(*a, **k):
        before, t0 = inside.seconds, time.perf_counter()
        out = fn(*a, **k)
        spent[name] += time.perf_counter() - t0 - (inside.seconds - before)
        return out
    return timed


compiled.runner = inside.wrap(compiled.runner)
draft.head.__dict__["runner"] = inside.wrap(draft.head.runner)
if getattr(draft.head, "chains", None) is not None:  # chains of γ in one call (models.aot_chain), where built
    draft.head.chains.wrap(inside.wrap)
if getattr(draft.head, "trees", None) is not None:  # greedy trees in one call (models.aot_tree), where built
    draft.head.trees.wrap(inside.wrap)
F, H, C = type(draft), aot_head.CompiledHead, aot.CompiledCachedModel
PHASES = ((F, "propose", "drafter.propose"), (F, "feed_context", "  feed_context"),
          (aot_chain.CompiledChains, "draft", "  the chain's call, outside its package"),
          (aot_tree.CompiledTrees, "grow", "  the tree's call, outside its package"),
          (aot_tree, "best_nodes", "    its best nodes"),
          (F, "pending", "  the pairs to feed"), (aot_head.HeadKV, "make_room", "  head make_room"),
          (F, "sync", "draft sync"),
          (H, "forward", "  head pass, outside its package"), (H, "reduced_logits", "  head reduced_logits"),
          (H, "greedy_tokens", "  head greedy_tokens"), (drafters, "point_masses", "  one-hot draft rows"),
          (drafters, "draw", "  draft draw"), (drafters, "spread", "  draft rows spread"),
          (H, "ranked", "  head ranked"),
          (aot_head, "pass_mask", "  head mask"), (C, "logits", "target pass, outside its package"),
          (aot, "mask_block", "  target mask"), (C, "note_finite", "  target note_finite"),
          (C, "_make_room", "  target make_room"),
          (C, "rollback", "target rollback"), (gen, "verify_greedy", "verify_greedy"),
          (gen, "greedy_tokens", "greedy_tokens"), (gen, "trim_new_tokens", "trim_new_tokens"),
          (gen, "speculative_step", "the whole iteration"),
          (gen, "logits_to_probs", "target logits_to_probs"), (gen, "verify", "verify (sampled)"),
          (sys.modules["specdec_ref.verify"], "sample", "  its sample"),
          (sys.modules["specdec_ref.verify"], "residual", "  its residual"),
          (gen, "tree_step", "the whole iteration (tree)"), (F, "propose_tree", "drafter.propose_tree"),
          (drafters, "draft_tree", "  draft_tree"), (trees, "grow_tree", "    grow_tree"),
          (drafters, "tree_rows_mask", "    head tree mask"),
          (drafters, "tree_node_positions", "    head tree positions"),
          (gen, "tree_attention_mask", "target tree mask"),
          (gen, "tree_position_ids", "target tree positions"),
          (C, "keep_rows", "target keep_rows"), (gen, "verify_tree_greedy", "verify_tree_greedy"),
          (gen, "verify_tree", "verify_tree (sampled)"),
          (aot_verdict.SampledPackages, "judge", "the compiled verdict, its call included"))
for owner, name, label in PHASES:
    setattr(owner, name, phase(label, getattr(owner, name)))
gen.PACKAGED_RULES = (gen.logits_to_probs, gen.verify)  # timed, the same rules: the compiled verdict serves
sampling = sd.SamplingConfig(args.temperature)
if args.tree:
    method = dict(tree=parse_method(f"tree {args.tree}"))
    label = f"tree {args.tree}"
else:
    method, label = dict(gamma=args.gamma), f"chain γ = {args.gamma}"
encoded = [sd.encode_chat(tok, q) for q in HELD_OUT[12:12 + args.prompts]]
sd.speculative_generate(target, draft, encoded[0], 8, sampling=sampling, **method)  # warm up
spent.clear()
inside.reset()
wall = 0.0
iterations = 0
for ids in encoded:
    t0 = time.perf_counter()
    out = sd.speculative_generate(target, draft, ids, args.tokens, sampling=sampling, **method)
    wall += time.perf_counter() - t0
    iterations += len(out.stats.accepted)
print(f"{label}, T = {args.temperature:g}, {target.dtype}, {args.threads} threads, "
      f"{iterations} iterations: "
      f"{(wall - inside.seconds) / iterations * 1e3:.2f} ms per iteration outside the packages, "
      f"{inside.seconds / iterations * 1e3:.1f} ms inside")
for name, seconds in spent.most_common():
    print(f"{name:36s} {seconds / iterations * 1e3:6.3f} ms")
