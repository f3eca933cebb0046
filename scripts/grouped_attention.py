"""Hugging Face's SDPA against `kernels.grouped_attention` for the target's multi-row passes, side by side.

    PYTHONPATH=<checkout> python scripts/grouped_attention.py [--threads 2] [--prompts 6] [--rounds 2]

Hugging Face copies the cache's 3 key/value heads into 9 (`repeat_kv`) before attention whenever a pass has
a mask and more than one row, which is every pass that verifies drafts; `prepack_for_cpu` now gives CPU models
`grouped_attention` (SDPA's `enable_gqa`) instead. This times, in one process and interleaved: a target pass
of k rows after 128 tokens, k = 1..8 (`method.pass_seconds`), both ways; then plain greedy decoding and the
defaults' two methods (tree 2/2/3 greedy, chain γ = 3 at T = 1) on the bench's held-out prompts, both ways,
round after round, checking that greedy gives the same tokens both ways. One JSON line.
"""
import argparse
import json
import statistics
import time
import warnings

import torch

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=2)
p.add_argument("--prompts", type=int, default=6)
p.add_argument("--tokens", type=int, default=64)
p.add_argument("--rounds", type=int, default=2)
args = p.parse_args()
warnings.filterwarnings("ignore")
torch.set_num_threads(args.threads)
import specdec_ref as sd  # noqa: E402
from specdec_ref.lab.bench import BENCH_PROMPTS  # noqa: E402
from specdec_ref.models import kernels  # noqa: E402
from specdec_ref.models.method import pass_seconds  # noqa: E402

target, draft, tok = sd.load_offline_pair()
WAYS = {"sdpa": "sdpa", "grouped": kernels.GROUPED}
ks = [1, 2, 3, 4, 6, 8]
t_k = {way: {k: [] for k in ks} for way in WAYS}
for _ in range(3):
    for way, impl in WAYS.items():
        target.set_attn_implementation(impl)
        for k, s in pass_seconds(target, ks, 128, repeats=5).items():
            t_k[way][k].append(s)
t_k = {way: {k: statistics.median(v) * 1e3 for k, v in row.items()} for way, row in t_k.items()}

encoded = [sd.encode_chat(tok, q) for q in BENCH_PROMPTS[:args.prompts]]
runs = {"plain": None, "tree 2/2/3 greedy": sd.TreeBudget(2, 2, 3), "chain 3 at T = 1": 3}
rates = {f"{name}, {way}": [] for name in runs for way in WAYS}
tokens = {}
sd.autoregressive_generate(target, encoded[0], 8)  # warm-up
for r in range(args.rounds):
    for name, how in runs.items():
        for way, impl in WAYS.items():
            target.set_attn_implementation(impl)
            sampling = sd.SamplingConfig(1.0 if "T = 1" in name else 0)
            t0, n, out = time.perf_counter(), 0, []
            for i, ids in enumerate(encoded):
                g = torch.Generator().manual_seed(1000 * r + i)
                if how is None:
                    gen = sd.autoregressive_generate(target, ids, args.tokens, sampling=sampling, generator=g)
                else:
                    method = {"gamma": how} if isinstance(how, int) else {"tree": how}
                    gen = sd.speculative_generate(target, draft, ids, args.tokens, **method,
                                                  sampling=sampling, generator=g)
                n, out = n + gen.tokens.shape[0], out + [gen.tokens.tolist()]
            rates[f"{name}, {way}"].append(n / (time.perf_counter() - t0))
            tokens[(name, way)] = out
plain = {way: statistics.median(rates[f"plain, {way}"]) for way in WAYS}
best_plain = max(plain.values())
print(json.dumps({
    "threads": args.threads, "dtype": str(target.dtype),
    "t_k_ms": t_k, "t_k_over_t1": {w: {k: round(v / row[1], 3) for k, v in row.items()}
                                   for w, row in t_k.items()},
    "tokens_per_s": rates,
    "speedup_over_faster_plain": {name: round(statistics.median(v) / best_plain, 3)
                                  for name, v in rates.items()},
    "same_greedy_tokens": all(tokens[(name, "sdpa")] == tokens[(name, "grouped")] for name in runs
                              if "greedy" in name or name == "plain")}))
