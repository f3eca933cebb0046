"""Tokens per second of our loops on the offline pair, for one checkout: run it on two checkouts, alternating,
to compare the loop before and after a change on the same machine (the package is imported from --repo).

    python scripts/loop_speed.py --repo . --prompts 4 --tokens 48 --threads 1

Prints one JSON line: tokens/s of plain decoding, a chain (γ = 2) and a dynamic tree (3/3/8) with the feature
head, and a chain (γ = 3) with the LM draft, greedy, on distill.prompts.EVALUATION. Methods are named
explicitly (never the default choice), so both checkouts run the same methods.
"""
import argparse
import json
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--repo", default=".")
p.add_argument("--prompts", type=int, default=4)
p.add_argument("--tokens", type=int, default=48)
p.add_argument("--threads", type=int, default=1)
args = p.parse_args()
sys.path.insert(0, args.repo)
import torch  # noqa: E402

import specdec_ref as sd  # noqa: E402
from specdec_ref.distill.prompts import HELD_OUT  # noqa: E402
from specdec_ref.models import offline_draft  # noqa: E402

torch.set_num_threads(args.threads)
target, feature, tok = sd.load_offline_pair(draft="feature")
lm = sd.prepack_for_cpu(offline_draft.load(target))
enc = [sd.encode_chat(tok, q) for q in HELD_OUT[12:12 + args.prompts]]
g = sd.SamplingConfig(0)
runs = {"plain": lambda ids: sd.autoregressive_generate(target, ids, args.tokens, sampling=g),
        "chain γ=2, head": lambda ids: sd.speculative_generate(target, feature, ids, args.tokens, gamma=2,
                                                              sampling=g),
        "tree 3/3/8, head": lambda ids: sd.speculative_generate(target, feature, ids, args.tokens,
                                                               tree=sd.TreeBudget(3, 3, 8), sampling=g),
        "chain γ=3, LM": lambda ids: sd.speculative_generate(target, lm, ids, args.tokens, gamma=3,
                                                            sampling=g)}
for run in runs.values():
    run(enc[0])  # warm up
tokens, seconds = dict.fromkeys(runs, 0), dict.fromkeys(runs, 0.0)
for ids in enc:  # interleaved prompt by prompt
    for name, run in runs.items():
        t0 = time.perf_counter()
        out = run(ids)
        seconds[name] += time.perf_counter() - t0
        tokens[name] += out.tokens.shape[0]
print(json.dumps({"repo": args.repo, **{k: tokens[k] / seconds[k] for k in runs}}))
