"""The offline pair's methods side by side in one run: plain decoding and any chains and trees.

    PYTHONPATH=<checkout> python scripts/side_by_side.py [--threads 2] [--prompts 8] [--rounds 2] \
        [--methods "tree 2/2/3,tree 4/3/6,tree 4/3/6 stop 0.15"] [--temperature 0]

Methods by their `models.method` names: "chain γ=3", "tree 2/2/4" (depth / width / nodes), "tree 4/3/6 stop
0.15" (a dynamic tree that skips the pass at depth d + 1 when no node at depth d has a draft path probability
of at least 0.15, `TreeBudget.stop`); a chain name may end in " block" (judged by block verification,
`verify_block`). Plain decoding and every method run interleaved prompt by prompt on the bench's held-out
prompts, round after round, with seeds varying by round and prompt (each method sees the same seeds); prints
one JSON line: tokens/s, speedup over the plain loop and τ for every method. (It replaces the sixth and
seventh sessions' tree_widths.py and tree_stop.py: `--methods "tree 2/2/3,tree 2/2/4,..."` runs the former.)
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
p.add_argument("--methods", default="tree 2/2/3,tree 4/3/6,tree 4/3/6 stop 0.15",
               help="comma-separated method names (models.method.method_name)")
args = p.parse_args()
warnings.filterwarnings("ignore")
torch.set_num_threads(args.threads)
import specdec_ref as sd  # noqa: E402
from specdec_ref.lab.bench import BENCH_PROMPTS, Row  # noqa: E402
from specdec_ref.models.method import method_kwargs, parse_method  # noqa: E402

target, drafter, tok = sd.load_offline_pair(draft="feature", choose_method=False)
encoded = [sd.encode_chat(tok, q) for q in BENCH_PROMPTS[:args.prompts]]
sampling = sd.SamplingConfig(args.temperature)
names = ["plain"] + args.methods.split(",")


def run(name: str, ids: torch.Tensor, seed: int):
    g = torch.Generator().manual_seed(seed)
    if name == "plain":
        return sd.autoregressive_generate(target, ids, args.tokens, sampling=sampling, generator=g)
    method, block, _ = name.partition(" block")
    return sd.speculative_generate(target, drafter, ids, args.tokens, **method_kwargs(parse_method(method)),
                                   sampling=sampling, generator=g, verification="block" if block else "token")


for name in names:  # warm-up
    run(name, encoded[0][:, :8], 0)
rows = {name: Row(name) for name in names}
for r in range(args.rounds):
    for i, ids in enumerate(encoded):
        for name in names:
            rows[name].add(run(name, ids, 1000 * r + i))
plain = rows["plain"].tokens_per_second
print(json.dumps({"temperature": args.temperature, "threads": args.threads,
                  "plain tokens/s": round(plain, 1),
                  **{name: {"tokens/s": round(row.tokens_per_second, 1),
                            "speedup": round(row.tokens_per_second / plain, 3), "tau": round(row.tau, 3)}
                     for name, row in rows.items() if name != "plain"}}))
