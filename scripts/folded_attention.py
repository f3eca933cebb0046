"""Folding the query heads that share a key head into one head of more rows: faster alone, not in the loop.

    PYTHONPATH=<checkout> python scripts/folded_attention.py [--threads 2] [--rounds 2]

`kernels.grouped_attention` runs a verification pass's attention as SDPA with `enable_gqa` (9 query heads on
3 key heads for SmolLM2-135M). Hugging Face's own one-row path folds instead: the 3 query heads of each key
head become one head of 3 rows (`pack_gqa`). The same fold works for q rows (one head of 3q rows per key
head, each row with its own mask row). First, SDPA alone, per layer, bfloat16, in µs (medians): one row
folded (Hugging Face's path), q = 4 and 8 rows with `enable_gqa`, and folded (mask folded once). Then the
loop: the default greedy tree 2/2/3 on the bench's 8 prompts × 64 tokens, the two kernels alternating prompt
by prompt, tokens per second and whether they wrote the same tokens. One JSON line.
"""
import argparse
import json
import statistics
import time
import warnings

import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=2)
p.add_argument("--rounds", type=int, default=2)
args = p.parse_args()
warnings.filterwarnings("ignore")
torch.set_num_threads(args.threads)
import specdec_ref as sd  # noqa: E402
from specdec_ref.lab.bench import BENCH_PROMPTS  # noqa: E402
from specdec_ref.models import kernels  # noqa: E402


def micro(f, repeats: int = 300) -> float:  # median µs of f()
    for _ in range(20):
        f()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return round(statistics.median(times) * 1e6, 1)


H, KV, D = 9, 3, 64
g = H // KV
alone = {}
for n in (84, 200):
    for q in (1, 4, 8):
        query = torch.randn(1, q, H, D, dtype=torch.bfloat16).transpose(1, 2)  # [1, H, q, d], as a layer's
        key, value = (torch.randn(1, KV, n + q, D, dtype=torch.bfloat16) for _ in range(2))
        mask = torch.zeros(1, 1, q, n + q, dtype=torch.bfloat16)
        mask[..., n:] = torch.triu(torch.full((q, q), float("-inf")), 1)
        folded_mask = mask.repeat(1, 1, g, 1)
        row = {"folded": micro(lambda: F.scaled_dot_product_attention(
            query.reshape(1, KV, g * q, D), key, value, attn_mask=folded_mask))}
        if q > 1:
            row["enable_gqa"] = micro(lambda: F.scaled_dot_product_attention(
                query, key, value, attn_mask=mask, enable_gqa=True))
        alone[f"{q} rows after {n}"] = row

grouped = kernels.AttentionInterface._global_mapping[kernels.GROUPED]
folded_for: list = [None, None]


def folded(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    b, h, q, d = query.shape
    groups = h // key.shape[1]
    if q == 1 or attention_mask is None or attention_mask.shape[1] != 1 or groups == 1:
        return grouped(module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs)
    if module.layer_idx == 0 or folded_for[0] is not attention_mask:  # one fold of the mask per pass
        folded_for[:] = [attention_mask, attention_mask.repeat(1, 1, groups, 1)]
    out = F.scaled_dot_product_attention(query.reshape(b, key.shape[1], groups * q, d), key, value,
                                         attn_mask=folded_for[1], scale=scaling)
    return out.reshape(b, h, q, d).transpose(1, 2).contiguous(), None


target, drafter, tok = sd.load_offline_pair()
encoded = [sd.encode_chat(tok, text) for text in BENCH_PROMPTS[:8]]
tree, greedy = sd.TreeBudget(2, 2, 3), sd.SamplingConfig(0)
kernel = {"enable_gqa": grouped, "folded": folded}
seconds, tokens, answers = {k: 0.0 for k in kernel}, {k: 0 for k in kernel}, {k: [] for k in kernel}
for r in range(args.rounds):
    for i, ids in enumerate(encoded):
        for name in (list(kernel) if (i + r) % 2 == 0 else list(kernel)[::-1]):
            kernels.AttentionInterface._global_mapping[kernels.GROUPED] = kernel[name]
            t0 = time.perf_counter()
            out = sd.speculative_generate(target, drafter, ids, 64, tree=tree, sampling=greedy)
            seconds[name] += time.perf_counter() - t0
            tokens[name] += out.tokens.shape[0]
            answers[name].append(out.tokens.tolist())
kernels.AttentionInterface._global_mapping[kernels.GROUPED] = grouped
print(json.dumps({"threads": args.threads, "sdpa_alone_us": alone,
                  "tree_2/2/3_tokens_per_s": {k: round(tokens[k] / seconds[k], 2) for k in kernel},
                  "same_tokens": answers["enable_gqa"] == answers["folded"]}))
