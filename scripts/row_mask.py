"""Plain decoding with and without the one-row mask (`cache.CachedModel.prepare`), side by side in one run.

    PYTHONPATH=<checkout> python scripts/row_mask.py [--threads 2] [--prompts 6] [--rounds 3] [--dtype auto]

PyTorch's CPU flash-attention kernel is slower for one bfloat16 query row without a mask than with one, so
the package gives every one-row bfloat16 pass on a CPU its position and an all-visible mask. This times plain
greedy decoding of the offline target both ways (the switch is `cache.ROW_MASK`), round after round on the
bench's prompts, checks that both give the same tokens, and prints tokens/s per round and the median ratio as
one JSON line, with the attention kernel's time per layer for one row after 100 tokens, both
ways (`torch.profiler`: the self time of the scaled-dot-product-attention operators, per layer).
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
p.add_argument("--rounds", type=int, default=3)
p.add_argument("--dtype", choices=["auto", "float32", "bfloat16"], default="auto")
args = p.parse_args()
warnings.filterwarnings("ignore")
torch.set_num_threads(args.threads)
import specdec_ref as sd  # noqa: E402
from specdec_ref import cache  # noqa: E402
from specdec_ref.lab.bench import BENCH_PROMPTS  # noqa: E402

target, _, tok = sd.load_offline_pair(dtype=None if args.dtype == "auto" else getattr(torch, args.dtype),
                                      draft="lm")
encoded = [sd.encode_chat(tok, q) for q in BENCH_PROMPTS[:args.prompts]]
rates = {"no mask": [], "one-row mask": []}
tokens = {}
sd.autoregressive_generate(target, encoded[0], 8)  # warm-up
for _ in range(args.rounds):
    for name in rates:
        cache.ROW_MASK = "1" if name == "one-row mask" else "0"
        t0, n, out = time.perf_counter(), 0, []
        for ids in encoded:
            gen = sd.autoregressive_generate(target, ids, args.tokens, sampling=sd.SamplingConfig(0))
            n, out = n + gen.tokens.shape[0], out + [gen.tokens]
        rates[name].append(n / (time.perf_counter() - t0))
        tokens[name] = out
same = all(torch.equal(a, b) for a, b in zip(tokens["no mask"], tokens["one-row mask"]))


def attention_us_per_layer(row_mask: bool, context: int = 100, passes: int = 10) -> float:
    """Mean self time (µs) of the attention operator in a one-row pass after `context` random tokens."""
    from torch.profiler import ProfilerActivity, profile
    cache.ROW_MASK = "1" if row_mask else "0"
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, target.config.vocab_size, (context + 1,), generator=g)
    lm = cache.CachedModel(target)
    with torch.inference_mode():
        lm.logits(ids[:context], keep=1)
        for _ in range(3):  # warm-up
            lm.rollback(context)
            lm.logits(ids, keep=1)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(passes):
                lm.rollback(context)
                lm.logits(ids, keep=1)
    ops = [e for e in prof.key_averages() if "scaled_dot_product" in e.key]
    return sum(e.self_cpu_time_total for e in ops) / (passes * target.config.num_hidden_layers)


attention = {"no mask": attention_us_per_layer(False), "one-row mask": attention_us_per_layer(True)}
ratio = statistics.median(m / u for m, u in zip(rates["one-row mask"], rates["no mask"]))
print(json.dumps({"threads": args.threads, "dtype": str(target.dtype), "tokens_per_s": rates,
                  "ratio_median": ratio, "same_tokens": same, "attention_us_per_layer": attention}))
