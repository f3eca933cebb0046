"""The target's two paths in the loops, side by side in one process: its compiled pass (`models.aot`) and the
eager model (oneDNN's prepacked weights), the feature head compiled in both.

    python scripts/eager_or_compiled.py [--threads 2] [--prompts 8] [--tokens 64] [--temperature 0]

Plain decoding, chains γ = 1 and 2 and trees 1/2/2, 2/2/4, 3/3/8 and 4/4/12 through each path, paths and
methods interleaved prompt by prompt on held-out chat prompts (`distill.prompts.HELD_OUT[12:]`): tokens/s,
speedup over the faster plain loop of the two, and τ per target pass. `models.aot_use` makes the same choice
for plain decoding on a package's first load. Needs `python -m specdec_ref compile`.
"""
import argparse
import collections
import os
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=2)
p.add_argument("--prompts", type=int, default=8)
p.add_argument("--tokens", type=int, default=64)
p.add_argument("--temperature", type=float, default=0.0)
args = p.parse_args()
torch.set_num_threads(args.threads)
os.environ.setdefault("SPECDEC_CALIBRATE", "0")  # the methods are given below
os.environ["SPECDEC_AOT"] = "1"  # attach the package whatever its first load measured: both paths are timed
import specdec_ref as sd  # noqa: E402
from specdec_ref.distill.prompts import HELD_OUT  # noqa: E402

target, draft, tok = sd.load_offline_pair(draft="feature")
compiled = target.__dict__.get("_specdec_compiled")
if compiled is None:
    raise SystemExit("no compiled pass on this machine: run python -m specdec_ref compile")
paths = {"compiled target": compiled, "eager target": None}
sampling = sd.SamplingConfig(args.temperature)
encoded = [sd.encode_chat(tok, q) for q in HELD_OUT[12:12 + args.prompts]]
B = sd.TreeBudget
methods = {"plain": None, "chain γ=1": dict(gamma=1), "chain γ=2": dict(gamma=2),
           "tree 1/2/2": dict(tree=B(1, 2, 2)), "tree 2/2/4": dict(tree=B(2, 2, 4)),
           "tree 3/3/8": dict(tree=B(3, 3, 8)), "tree 4/4/12": dict(tree=B(4, 4, 12))}
g = torch.Generator().manual_seed(0)


def use(path):
    if path is None:
        target.__dict__.pop("_specdec_compiled", None)
    else:
        target.__dict__["_specdec_compiled"] = path


def run(method, ids, n):
    how, opts = methods[method], dict(sampling=sampling, generator=g)
    return (sd.autoregressive_generate(target, ids, n, **opts) if how is None
            else sd.speculative_generate(target, draft, ids, n, **how, **opts))


seconds, tokens, passes = collections.Counter(), collections.Counter(), collections.Counter()
for name, path in paths.items():  # warm up both paths and every method
    use(path)
    for m in methods:
        run(m, encoded[0], 8)
for ids in encoded:
    for name, path in paths.items():
        use(path)
        for m in methods:
            start = time.perf_counter()
            out = run(m, ids, args.tokens)
            seconds[name, m] += time.perf_counter() - start
            tokens[name, m] += out.tokens.shape[0]
            passes[name, m] += out.stats.target_calls
plain = max(tokens[name, "plain"] / seconds[name, "plain"] for name in paths)
print(f"{target.dtype}, {args.threads} threads, T = {args.temperature:g}, {len(encoded)} prompts x "
      f"{args.tokens} tokens; tokens/s (speedup over the faster plain loop, {plain:.1f} tokens/s; "
      "τ per target pass)")
print("| target | " + " | ".join(methods) + " |\n|---|" + "---:|" * len(methods))
for name in paths:
    cells = []
    for m in methods:
        speed = tokens[name, m] / seconds[name, m]
        tau = f", τ {tokens[name, m] / passes[name, m]:.2f}" if m != "plain" else ""
        cells.append(f"{speed:.1f} ({speed / plain:.2f}×{tau})")
    print(f"| {name} | " + " | ".join(cells) + " |")
