"""Record the shipped feature head's quality beside its weights: the input of the default-method choice.

    python scripts/record_head_quality.py [--prompts 12] [--tokens 160] [--samples 3]
        [--out specdec_ref/models/weights/feature_draft]

Writes quality.json: the factor s on the head's logits when it samples (`draft_sharpness`: the s of
`lab.coverage.SHARPNESS_GRID` with the highest acceptance at depth 1 along the target's answers sampled at
T = 1, `lab.coverage.acceptance_by_sharpness`), then, drafting with it, τ (new tokens per target pass) and
draft passes and drafted tokens per iteration of every candidate method (`models.method.CANDIDATES`:
chains γ = 1..6 and the dynamic trees), greedy and at T = 1, on `distill.prompts.TUNING` (never on
EVALUATION, where speedups are reported); α per draft position of a γ = 4 chain; and coverage@k per depth
along the target's greedy answers (`lab.coverage`). None of it depends on the machine's speed, only on the
head and the target: rerun it after retraining the head. `load_offline_pair` then picks each default from
these τ and this machine's calibrated costs (`models.choice.choose_defaults`).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import specdec_ref as sd  # noqa: E402
from specdec_ref.distill.prompts import TUNING  # noqa: E402
from specdec_ref.lab.compare import target_answers  # noqa: E402
from specdec_ref.lab.coverage import acceptance_by_sharpness, coverage_by_depth  # noqa: E402
from specdec_ref.lab.diagnose import method_taus, position_acceptance  # noqa: E402
from specdec_ref.models import feature_draft  # noqa: E402
from specdec_ref.models.method import CANDIDATES, method_kwargs, method_name  # noqa: E402

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--prompts", type=int, default=12)
p.add_argument("--tokens", type=int, default=160,
               help="answer length (160: 2.5 times the positions of 64, where every greedy τ came out 5-7%% "
                    "lower; the measurement log's twenty-second session)")
p.add_argument("--threads", type=int, default=1)
p.add_argument("--samples", type=int, default=3,
               help="runs of every prompt at T = 1 (one generator throughout): τ there is a random quantity")
p.add_argument("--out", default=str(feature_draft.WEIGHTS_DIR))
args = p.parse_args()
torch.set_num_threads(args.threads)

t0 = time.time()
target, draft, tok = sd.load_offline_pair(draft="feature")
encoded = [sd.encode_chat(tok, q) for q in TUNING[:args.prompts]]
methods = {method_name(m): method_kwargs(m)
           for m in CANDIDATES}
quality = {"prompts": f"distill.prompts.TUNING[:{args.prompts}]", "samples_at_T=1": args.samples,
           "max_new_tokens": args.tokens,
           "dtype": str(target.dtype).removeprefix("torch."), "date": time.strftime("%Y-%m-%d"), "tau": {},
           "draft_passes": {}, "draft_nodes": {}, "alpha_per_position": {}}
sampled_answers = target_answers(target, encoded, args.tokens, tok.eos_token_id, sd.SamplingConfig(1.0))
beta = acceptance_by_sharpness(target, getattr(draft.head, "inner", draft.head), sampled_answers)
draft.sharpness = max(beta, key=beta.get)
quality["draft_sharpness"] = {"s": draft.sharpness,
                              "fitted_on": "the target's answers to these prompts at T = 1",
                              "beta_at_depth_1_by_s": {str(s): round(b, 4) for s, b in beta.items()}}
print("sharpness", draft.sharpness, {s: round(b, 4) for s, b in beta.items()}, flush=True)
for name, sampling in (("greedy", sd.SamplingConfig(0)), ("T=1", sd.SamplingConfig(1.0))):
    runs = encoded * (1 if sampling.greedy else args.samples)  # greedy runs are all alike
    # per iteration: fewer than the budget for a tree that stops early
    quality["draft_passes"][name], quality["draft_nodes"][name] = {}, {}
    quality["tau"][name] = method_taus(target, draft, runs, methods, args.tokens, sampling, 0,
                                       tok.eos_token_id, quality["draft_passes"][name],
                                       quality["draft_nodes"][name])
    print(name, {k: round(v, 3) for k, v in quality["tau"][name].items()}, f"{time.time() - t0:.0f} s",
          flush=True)
    steps = []
    for ids in encoded:
        out = sd.speculative_generate(target, draft, ids, args.tokens, gamma=4, sampling=sampling,
                                      generator=torch.Generator().manual_seed(0),
                                      eos_token_id=tok.eos_token_id)
        steps += list(zip(out.stats.accepted, out.stats.drafted))
    acc, exam = position_acceptance([a for a, _ in steps], [d for _, d in steps])
    quality["alpha_per_position"][name] = [a / e if e else None for a, e in zip(acc, exam)]
cov = coverage_by_depth(target, draft.head, target_answers(target, encoded, args.tokens, tok.eos_token_id),
                        depth=5)
quality["coverage"] = {"ks": list(cov.ks), "positions": cov.positions,
                       "by_depth": [[row[k] for k in cov.ks] for row in cov.by_depth],
                       "path": [[row[k] for k in cov.ks] for row in cov.path]}
quality["seconds"] = round(time.time() - t0)
Path(args.out, "quality.json").write_text(json.dumps(quality, indent=1) + "\n")
print(cov.table())
print(f"wrote {Path(args.out, 'quality.json')} in {quality['seconds']} s")
