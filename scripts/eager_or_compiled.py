"""The target's paths through the loops, side by side in one process: its compiled pass (`models.aot`; this
machine's package, or any given with --package) and the eager model (oneDNN's prepacked weights), the feature
head compiled in all of them.

    python scripts/eager_or_compiled.py [--threads 2] [--prompts 8] [--tokens 64] [--temperature 0]
    python scripts/eager_or_compiled.py --package micro-gemm=A.pt2 --package onednn=B.pt2 \
        --methods 1,2/2/4,3/3/8
    python scripts/eager_or_compiled.py --package old=OLD.pt2 --wide old --package new=NEW.pt2 --methods 2/2/3

Plain decoding and each method (chains γ, trees depth/width/nodes) through each path, paths and methods
interleaved prompt by prompt (`lab.bench.run_interleaved`) on held-out chat prompts
(`distill.prompts.HELD_OUT[12:]`): tokens/s, speedup over the fastest plain loop, and τ per target pass.
`models.aot_use` makes the same choice for plain decoding on a package's first load. To build a package with
oneDNN's kernels instead of the autotuned micro-GEMM: `aot.build(model, path, options=dict(freezing=True))`
on the plain model (book/measurement_log.md). Needs `python -m specdec_ref compile`.
"""
import argparse
import os
from pathlib import Path

import torch

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=2)
p.add_argument("--prompts", type=int, default=8)
p.add_argument("--tokens", type=int, default=64)
p.add_argument("--temperature", type=float, default=0.0)
p.add_argument("--methods", default="1,2,1/2/2,2/2/4,3/3/8,4/4/12",
               help="chains (γ) and trees (depth/width/nodes), comma-separated")
p.add_argument("--package", action="append", default=[], help="NAME=PATH of a package (repeatable); "
               "default: this machine's")
p.add_argument("--wide", action="append", default=[], metavar="NAME",
               help="a package of FORMAT 5 or older (masks as wide as the buffers)")
p.add_argument("--format", action="append", default=[], metavar="NAME=N",
               help="a package of an older FORMAT N (lab.packages.older_runner), e.g. old=6")
args = p.parse_args()
FORMATS = {n: int(v) for n, _, v in (f.partition('=') for f in args.format)}
torch.set_num_threads(args.threads)
os.environ.setdefault("SPECDEC_CALIBRATE", "0")  # the methods are given below
os.environ["SPECDEC_AOT"] = "1"  # attach the package whatever its first load measured: every path is timed
import specdec_ref as sd  # noqa: E402
from specdec_ref.distill.prompts import HELD_OUT  # noqa: E402
from specdec_ref.lab.bench import run_interleaved  # noqa: E402
from specdec_ref.lab import packages  # noqa: E402
from specdec_ref.models import aot, aot_use  # noqa: E402
from specdec_ref.models.method import method_kwargs, method_name, parse_method  # noqa: E402

target, draft, tok = sd.load_offline_pair(draft="feature")
paths = {}  # name -> the CompiledPass to attach, or None for the eager target
for item in args.package:
    name, _, path = item.partition("=")
    if not path:
        p.error(f"give each package as NAME=PATH, got {item!r}")
    runner = packages.checked_package(target, path, 5 if name in args.wide else FORMATS.get(name))
    use = aot_use.first_load(target, lambda r=runner: aot.CompiledCachedModel(target, r), Path(path))
    paths[name] = aot.CompiledPass(target, runner, Path(path), use.pad_single)
if not paths:
    compiled = aot.compiled_pass(target)
    if compiled is None:
        raise SystemExit("no compiled pass on this machine: run python -m specdec_ref compile")
    paths["compiled"] = compiled
paths["eager"] = None
sampling, g = sd.SamplingConfig(args.temperature), torch.Generator().manual_seed(0)
methods = {"plain": None} | {method_name(m): m for m in
                             (parse_method(f"tree {x}" if "/" in x else f"chain γ={x}")
                              for x in args.methods.split(","))}


def run(path, method, ids):  # one generation of `method` with the target on `path`
    target.__dict__.pop(aot.COMPILED_PASS, None)
    if path is not None:
        target.__dict__[aot.COMPILED_PASS] = path
    opts = dict(sampling=sampling, generator=g)
    if method is None:
        return sd.autoregressive_generate(target, ids, args.tokens, **opts)
    how = method_kwargs(method)
    return sd.speculative_generate(target, draft, ids, args.tokens, **how, **opts)


encoded = [sd.encode_chat(tok, q) for q in HELD_OUT[12:12 + args.prompts]]
runs = {(pn, mn): (lambda ids, pa=pa, m=m: run(pa, m, ids))
        for pn, pa in paths.items() for mn, m in methods.items()}
rows = run_interleaved(runs, encoded, progress=lambda _: None)
plain = max(rows[pn, "plain"].tokens_per_second for pn in paths)
print(f"{target.dtype}, {args.threads} threads, T = {args.temperature:g}, {len(encoded)} prompts x "
      f"{args.tokens} tokens; tokens/s (speedup over the fastest plain loop, {plain:.1f} tokens/s; "
      "τ per target pass)")
print("| target | " + " | ".join(methods) + " |\n|---|" + "---:|" * len(methods))
for pn in paths:
    cells = []
    for mn in methods:
        row = rows[pn, mn]
        tau = f", τ {row.tau:.2f}" if row.tau is not None else ""
        cells.append(f"{row.tokens_per_second:.1f} ({row.tokens_per_second / plain:.2f}×{tau})")
    print(f"| {pn} | " + " | ".join(cells) + " |")
