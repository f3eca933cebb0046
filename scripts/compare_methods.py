"""Side by side in one process on the offline pair: what the core's speed work changes, measured.

    python scripts/compare_methods.py [threads] [tokens] [prompts]
    # table to stdout, JSON to runs/methods.json

1. The verify cost t(k)/t(1): the target with plain F.linear against the same target with prepacked linears
   (two copies, timed in alternating rounds, medians).
2. The loop's overhead per iteration (wall time outside every model forward, per target pass): our chain loop
   against Hugging Face assisted generation, both with the distilled LM draft at a constant γ = 3.
3. Tokens per target pass (τ) and speedup for chains and dynamic trees, greedy and T = 1, on held-out chat
   prompts, against the faster of our plain loop and Hugging Face `generate()`.
4. The shipped feature head's coverage@k per depth (`lab.coverage`) along the target's greedy answers to ten
   other held-out prompts.
"""
import json
import statistics
import sys
from pathlib import Path

import torch

import specdec_ref as sd
from specdec_ref.distill.prompts import HELD_OUT
from specdec_ref.lab.hf import assistant_settings, constant_gamma
from specdec_ref.lab.bench import forward_seconds, hf_generate, run_interleaved
from specdec_ref.lab.timing import latency_curve
from specdec_ref.models import feature_draft, offline_draft
from specdec_ref.models.aot import copy_model

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
N = int(sys.argv[2]) if len(sys.argv) > 2 else 64
n_prompts = int(sys.argv[3]) if len(sys.argv) > 3 else 4
torch.set_num_threads(threads)
target, tok = sd.load_offline_target(dtype=sd.models.default_dtype(torch.device("cpu")))
plain_copy = sd.models.kernels.unpack(copy_model(target))
lm = offline_draft.load(target)
sd.prepack_for_cpu(lm)
head = sd.prepack_for_cpu(feature_draft.load(target))
env = {"cpu": torch.backends.cpu.get_cpu_capability(), "dtype": str(target.dtype), "threads": threads,
       "kernel_path": sd.kernel_path(target), "torch": torch.__version__}
print(env, flush=True)
res = {"env": env}

# 1. t(k)/t(1), plain vs prepacked
ks = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32]
rounds = {"plain F.linear": [], "prepacked": []}
for r in range(5):
    for name, model in (("plain F.linear", plain_copy), ("prepacked", target)):
        rounds[name].append(latency_curve(model, ks, context_len=200, warmup=int(r == 0), repeats=3))
res["verify_cost"] = {name: {k: statistics.median(c.cost_ratio(k) for c in curves) for k in ks}
                      for name, curves in rounds.items()}
res["t1_ms"] = {name: statistics.median(c.median(1) for c in curves) * 1e3 for name, curves in rounds.items()}
for name, row in res["verify_cost"].items():
    print(f"{name:15s} t(1) {res['t1_ms'][name]:5.1f} ms  "
          + "  ".join(f"{k}:{v:.2f}" for k, v in row.items()), flush=True)
del plain_copy

# 2. loop overhead per iteration, ours vs Hugging Face assisted, same LM draft, γ = 3
enc = [sd.encode_chat(tok, p) for p in HELD_OUT[12:12 + n_prompts]]
greedy = sd.SamplingConfig(0)
modules = (target.base_model, target.get_output_embeddings(), lm.base_model, lm.get_output_embeddings())
over = {"ours": [], "HF assisted": []}
for ids in [enc[0]] + enc:  # the first prompt twice: the first round is a warm-up, dropped below
    for name in over:
        with forward_seconds(*modules) as rec:
            if name == "ours":
                out = sd.speculative_generate(target, sd.ModelDrafter(lm), ids, N, gamma=3, sampling=greedy)
                wall = out.stats.seconds
            else:
                # on the draft's config: generate() ignores them
                with assistant_settings(lm, **constant_gamma(3)):
                    _, wall = hf_generate(target, ids, N, greedy, torch.Generator().manual_seed(0),
                                          assistant_model=lm)
        passes = rec["calls"][0]
        over[name].append((wall - rec["seconds"]) / passes * 1e3)
res["overhead_ms_per_iteration"] = {k: statistics.median(v[1:]) for k, v in over.items()}
print("loop overhead per target pass (ms):",
      {k: round(v, 2) for k, v in res["overhead_ms_per_iteration"].items()}, flush=True)

# 3. chains and dynamic trees, greedy and T = 1
budgets = {"tree (3, 3, 8)": sd.TreeBudget(3, 3, 8), "tree (4, 4, 12)": sd.TreeBudget(4, 4, 12),
           "tree (5, 4, 16)": sd.TreeBudget(5, 4, 16)}
for sname, sampling in (("greedy", sd.SamplingConfig(0)), ("T=1", sd.SamplingConfig(1.0))):
    g = torch.Generator().manual_seed(0)
    o = dict(sampling=sampling, generator=g, eos_token_id=tok.eos_token_id)
    feature = sd.FeatureDrafter(head)
    methods = {"plain, ours": lambda ids: sd.autoregressive_generate(target, ids, N, **o),
               "plain, HF generate": lambda ids: hf_generate(target, ids, N, sampling, g),
               "HF assisted, LM draft (defaults)": lambda ids: hf_generate(target, ids, N, sampling, g,
                                                                           assistant_model=lm),
               "chain, LM draft γ=3": lambda ids: sd.speculative_generate(target, lm, ids, N, gamma=3, **o),
               "tree (4, 4, 12), LM draft": lambda ids: sd.speculative_generate(
                   target, lm, ids, N, tree=budgets["tree (4, 4, 12)"], **o)}
    for gam in (2, 3):
        methods[f"chain, feature head γ={gam}"] = lambda ids, gam=gam: sd.speculative_generate(
            target, feature, ids, N, gamma=gam, **o)
    for bname, b in budgets.items():
        methods[f"{bname}, feature head"] = lambda ids, b=b: sd.speculative_generate(target, feature, ids, N,
                                                                                           tree=b, **o)
    rows = run_interleaved(methods, enc, progress=lambda m: print(sname, m, flush=True))
    base = max(rows["plain, ours"].tokens_per_second, rows["plain, HF generate"].tokens_per_second)
    table = {}
    for k, r in rows.items():
        tau = ((1 + sum(r.stats.accepted) / len(r.stats.accepted))
               if r.stats is not None and r.stats.accepted else None)
        table[k] = {"tok_s": r.tokens_per_second, "speedup": r.tokens_per_second / base, "tau": tau}
        print(f"{sname:6s} {k:34s} {r.tokens_per_second:6.1f} tok/s  {r.tokens_per_second / base:.2f}x  "
              f"tau={'' if tau is None else f'{tau:.2f}'}", flush=True)
    res[sname] = table
# 4. coverage@k per depth of the feature head
from specdec_ref.lab.compare import target_answers  # noqa: E402
from specdec_ref.lab.coverage import coverage_by_depth  # noqa: E402
seqs = target_answers(target, [sd.encode_chat(tok, p) for p in HELD_OUT[:10]], 64, tok.eos_token_id)
cov = coverage_by_depth(target, head, seqs, depth=4, ks=(1, 2, 4, 8))
print(f"coverage@k per depth, {cov.positions} positions:")
print(cov.table())
res["coverage"] = {"by_depth": cov.by_depth, "path": cov.path, "positions": cov.positions}
Path("runs").mkdir(exist_ok=True)
json.dump(res, open("runs/methods.json", "w"), indent=1)
print("written to runs/methods.json")
