"""Side by side in one process: plain decoding (ours and Hugging Face) against the distilled LM draft and the
feature head, on the offline target in bfloat16, four held-out chat prompts, greedy and T=1, interleaved.

    python scripts/compare_offline_drafts.py [threads] [other_head_dir]
    # table to stdout and runs/compare.json

other_head_dir: a second feature head (e.g. an earlier export) to run alongside the shipped one, in the same
interleaved rounds, so that the two heads are compared on the same machine state.
"""
import json
import sys
from pathlib import Path

import torch

import specdec_ref as sd
from specdec_ref.drafters import FeatureDrafter
from specdec_ref.lab.bench import run_interleaved, hf_generate, cost_ratio
from specdec_ref.models import feature_draft, offline_draft
from specdec_ref.distill.prompts import HELD_OUT
torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
target, tok = sd.load_offline_target(dtype=torch.bfloat16)
lm = offline_draft.load(target)
heads = {"feature": feature_draft.load(target)}  # the shipped head, and optionally another to compare with it
if len(sys.argv) > 2:
    heads["other"] = feature_draft.load(target, Path(sys.argv[2]))
prompts = HELD_OUT[12:16]
enc = [sd.encode_chat(tok, p) for p in prompts]
N = 64
res = {}
for name, sampling in (("greedy", sd.SamplingConfig(0)), ("T=1", sd.SamplingConfig(1.0))):
    g = torch.Generator().manual_seed(0)
    o = dict(sampling=sampling, generator=g, eos_token_id=tok.eos_token_id)
    methods = {"plain ours": lambda ids: sd.autoregressive_generate(target, ids, N, **o),
               "plain HF": lambda ids: hf_generate(target, ids, N, sampling, g)}
    for gam in (2, 3):
        methods[f"LM draft γ={gam}"] = lambda ids, gam=gam: sd.speculative_generate(target, lm, ids, N,
                                                                                    gamma=gam, **o)
        for label, h in heads.items():
            methods[f"{label} head γ={gam}"] = lambda ids, gam=gam, h=h: sd.speculative_generate(
                target, FeatureDrafter(h), ids, N, gamma=gam, **o)
    rows = run_interleaved(methods, enc, progress=lambda m: print(name, m, flush=True))
    base = max(rows["plain ours"].tokens_per_second, rows["plain HF"].tokens_per_second)
    res[name] = {k: {"tok_s": r.tokens_per_second, "speedup": r.tokens_per_second / base, "alpha": r.alpha}
                 for k, r in rows.items()}
    for k, v in res[name].items():
        print(f"{name:7s} {k:20s} {v['tok_s']:6.1f} tok/s  {v['speedup']:.2f}x  alpha={v['alpha']}",
              flush=True)
res["c_lm"] = cost_ratio(target, lm, enc[0])
for label, h in heads.items():
    res[f"c_{label}"] = cost_ratio(target, FeatureDrafter(h), enc[0])
print(", ".join(f"{k} {v:.3f}" for k, v in res.items() if k.startswith("c_")))
Path("runs").mkdir(exist_ok=True)
json.dump(res, open("runs/compare.json", "w"), indent=1)
