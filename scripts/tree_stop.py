"""A dynamic tree that stops drafting deeper where its draft is unsure (`TreeBudget.stop`), side by side.

    PYTHONPATH=<checkout> python scripts/tree_stop.py [--threads 2] [--prompts 8] [--rounds 2] \
        [--methods "tree 2/2/3,tree 4/3/6,tree 4/3/6 stop 0.15"] [--temperature 0]

Dynamic trees (`models.method` names), some with a stop (`TreeBudget.stop`): a draft pass at depth d + 1 is
skipped when no node at depth d has a path probability (by the draft) of at least stop. Plain decoding and
every method, interleaved prompt by prompt on the bench's held-out prompts, round after round, seeds varying
by round and prompt; prints one JSON line: tokens/s, speedup over the plain loop and τ for every method.
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
    return sd.speculative_generate(target, drafter, ids, args.tokens, **method_kwargs(parse_method(name)),
                                   sampling=sampling, generator=g)


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
