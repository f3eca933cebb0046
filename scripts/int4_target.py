"""The target on the GGUF's own 4-bit weights (`models.int4`) or on the weights as loaded, side by side.

    PYTHONPATH=<checkout> python scripts/int4_target.py [--threads 2] [--prompts 8] [--rounds 2] \
        [--methods "tree 2/2/3,chain γ=2"] [--temperature 0]

Loads the offline pair with the 4-bit copies attached (`load_offline_pair(int4=True)`) and decodes the bench's
prompts both ways, round after round and prompt by prompt (`lab.bench.run_both_ways`; the switch:
`int4.without_int4`), plain decoding
and each method (named: the calibrated choice would differ between the two), seeds varying by round and
prompt.
Prints one JSON line: tokens/s of every path, each method's speedup over the plain loop with the same weights
and over the faster of the two plain loops, τ, and how many outputs were the same token for token (the two
ways round differently, so bfloat16 outputs part at near-ties; in float32 they match to 1e-4 in the logits).
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
p.add_argument("--methods", default="tree 2/2/3,chain γ=2")
args = p.parse_args()
warnings.filterwarnings("ignore")
torch.set_num_threads(args.threads)
import specdec_ref as sd  # noqa: E402
from specdec_ref.lab.bench import BENCH_PROMPTS, run_both_ways  # noqa: E402
from specdec_ref.models import int4  # noqa: E402
from specdec_ref.models.kernels import n_int4  # noqa: E402
from specdec_ref.models.method import method_kwargs, parse_method  # noqa: E402

target, drafter, tok = sd.load_offline_pair(draft="feature", choose_method=False, int4=True)
if not n_int4(target):
    raise SystemExit("no 4-bit copies on this target (no CPU int4 kernel in this torch, or no prepacking)")
encoded = [sd.encode_chat(tok, q) for q in BENCH_PROMPTS[:args.prompts]]
names = ["plain"] + args.methods.split(",")
methods = {name: None if name == "plain" else method_kwargs(parse_method(name)) for name in names}
rows, same = run_both_ways(target, drafter, encoded, methods, int4.without_int4, max_new_tokens=args.tokens,
                           sampling=sd.SamplingConfig(args.temperature), rounds=args.rounds)
rate = {key: row.tokens_per_second for key, row in rows.items()}
fastest_plain = max(rate[False, "plain"], rate[True, "plain"])
result = {"threads": args.threads, "dtype": str(target.dtype), "temperature": args.temperature,
          "layers on 4-bit weights": n_int4(target), "same tokens both ways": f"{sum(same)}/{len(same)}"}
for four_bit in (False, True):
    way = "4-bit" if four_bit else "as loaded"
    result[way] = {"plain tokens/s": round(rate[four_bit, "plain"], 1),
                   **{name: {"tokens/s": round(rate[four_bit, name], 1),
                             "speedup": round(rate[four_bit, name] / rate[four_bit, "plain"], 3),
                             "over the faster plain": round(rate[four_bit, name] / fastest_plain, 3),
                             "tau": round(rows[four_bit, name].tau, 3)}
                      for name in names[1:]}}
result["4-bit plain over plain as loaded"] = round(rate[True, "plain"] / rate[False, "plain"], 3)
print(json.dumps(result))
