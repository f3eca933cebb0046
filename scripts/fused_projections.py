"""The target's projections fused or not (`models.kernels.fuse_projections`), side by side in one run.

    PYTHONPATH=<checkout> python scripts/fused_projections.py [--threads 2] [--prompts 8] [--rounds 2] \
        [--methods "tree 2/2/3,tree 2/2/4,chain γ=3"] [--temperature 0]

With fusion, q, k and v are one oneDNN product and gate and up another: 4 GEMMs a decoder layer instead of 7
(and the feature head's eager body, where it has no compiled package, alike). This decodes the bench's
prompts with the offline pair both ways, round after round and prompt by prompt (`lab.bench.run_both_ways`;
the switch: `kernels.separate_products`), plain decoding and each method (named: the calibrated choice would
differ between the two), seeds varying by round and prompt, and prints one JSON line: tokens/s of every
path, each method's speedup over the plain loop with the same kernels and over the unfused plain loop, and
whether both ways gave the same tokens.
"""
import argparse
import json
import warnings

import torch

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=2)
p.add_argument("--prompts", type=int, default=8)
p.add_argument("--tokens", type=int, default=64)
p.add_argument("--rounds", type=int, default=2)
p.add_argument("--temperature", type=float, default=0.0)
p.add_argument("--methods", default="tree 2/2/3,tree 2/2/4,chain γ=3")
args = p.parse_args()
warnings.filterwarnings("ignore")
torch.set_num_threads(args.threads)
import specdec_ref as sd  # noqa: E402
from specdec_ref.lab.bench import BENCH_PROMPTS, run_both_ways  # noqa: E402
from specdec_ref.models.kernels import n_fused_groups, separate_products  # noqa: E402
from specdec_ref.models.method import method_kwargs, parse_method  # noqa: E402

target, drafter, tok = sd.load_offline_pair(draft="feature", choose_method=False)
n_groups = n_fused_groups(target)
if not n_groups:
    raise SystemExit("the target has no fused projections here (SPECDEC_FUSE=0, or no oneDNN prepacking)")
encoded = [sd.encode_chat(tok, q) for q in BENCH_PROMPTS[:args.prompts]]
names = ["plain"] + args.methods.split(",")
methods = {name: None if name == "plain" else method_kwargs(parse_method(name)) for name in names}
rows, same = run_both_ways(target, drafter, encoded, methods, lambda: separate_products(target),
                           max_new_tokens=args.tokens, sampling=sd.SamplingConfig(args.temperature),
                           rounds=args.rounds)
rate = {key: row.tokens_per_second for key, row in rows.items()}
result = {"threads": args.threads, "dtype": str(target.dtype), "temperature": args.temperature,
          "groups fused": n_groups, "same tokens both ways": f"{sum(same)}/{len(same)}"}
for on in (False, True):
    way = "fused" if on else "unfused"
    result[way] = {"plain tokens/s": round(rate[on, "plain"], 1),
                   "plain over unfused plain": round(rate[on, "plain"] / rate[False, "plain"], 3),
                   **{name: {"tokens/s": round(rate[on, name], 1),
                             "speedup": round(rate[on, name] / rate[on, "plain"], 3),
                             "over unfused plain": round(rate[on, name] / rate[False, "plain"], 3)}
                      for name in names[1:]}}
print(json.dumps(result, ensure_ascii=False))
