"""Compare feature heads the way a tree uses them: coverage@k per depth, τ of chains and trees, predicted
speedup.

    python scripts/compare_heads.py HEAD_DIR [HEAD_DIR ...] [--threads 2] [--speed] [--json runs/heads.json]

HEAD_DIR is an exported head (`python -m specdec_ref.distill.eagle --export DIR`); "shipped" names the one in
the package. Every head is judged on the same held-out prompts (`distill.prompts.HELD_OUT`), none of which
any training run sees:
1. coverage@{1,2,4,8} at depths 1-4 along the target's greedy answers to HELD_OUT[:10] (`lab.coverage`), and
   to HELD_OUT[12:22] (EVALUATION, the prompts `diagnose` and the benchmarks use);
2. τ (tokens per target pass) of chains γ = 1-4 and trees 2/2/4, 3/3/8, 4/4/12, greedy and at T = 1, on
   HELD_OUT[12:16];
3. the predicted speedup (`models.method.predicted_speedup`, the cost model of the default choice), from this
   machine's costs calibrated once (or, with --costs, those of an earlier run, so that heads compared in two
   runs share them);
4. with --speed, the measured speedups of every head's best chain and tree, interleaved in one run (give it a
   quiet machine: timing under load measures the load).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import specdec_ref as sd  # noqa: E402
from specdec_ref.distill.prompts import HELD_OUT  # noqa: E402
from specdec_ref.lab.compare import target_answers  # noqa: E402
from specdec_ref.lab.coverage import coverage_by_depth  # noqa: E402
from specdec_ref.lab.diagnose import measure_speedups, method_taus  # noqa: E402
from specdec_ref.models import feature_draft  # noqa: E402
from specdec_ref.models.method import Costs, calibrate, parse_method, predicted_speedup  # noqa: E402

METHODS = {"chain γ=1": dict(gamma=1), "chain γ=2": dict(gamma=2), "chain γ=3": dict(gamma=3),
           "chain γ=4": dict(gamma=4), "tree 2/2/4": dict(tree=sd.TreeBudget(2, 2, 4)),
           "tree 3/3/8": dict(tree=sd.TreeBudget(3, 3, 8)), "tree 4/4/12": dict(tree=sd.TreeBudget(4, 4, 12))}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("heads", nargs="+")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tokens", type=int, default=64, help="new tokens per prompt for τ and speed")
    p.add_argument("--speed", action="store_true", help="also measure speedups side by side (quiet machine)")
    p.add_argument("--json", default="runs/heads.json")
    p.add_argument("--costs", default=None,
                   help="reuse the costs (c, t(k)/t(1), overhead) of an earlier run's JSON, "
                        "so that heads compared in two runs are predicted on the same costs")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    target, _, tok = sd.load_offline_pair(draft="feature")
    print(f"target: {target.dtype}, kernel path {sd.kernel_path(target)}, {args.threads} threads")
    heads = {h: feature_draft.load(target, None if h == "shipped" else h) for h in args.heads}
    eos = tok.eos_token_id
    cov_sets = {name: target_answers(target, [sd.encode_chat(tok, q) for q in prompts], 80, eos)
                for name, prompts in (("HELD_OUT[:10]", HELD_OUT[:10]), ("HELD_OUT[12:22]", HELD_OUT[12:22]))}
    encoded = [sd.encode_chat(tok, q) for q in HELD_OUT[12:16]]
    if args.costs:
        saved = json.loads(Path(args.costs).read_text())["costs"]
        costs = Costs(**{**saved, "verify": {int(k): v for k, v in saved["verify"].items()}})
    else:
        costs = calibrate(target, sd.FeatureDrafter(next(iter(heads.values()))), encoded[0])
    print(f"costs: c₁ = {costs.c_pass:.3f}, per row {costs.c_row:.4f}, h₀ = {costs.h0:.3f}, t(k)/t(1) = "
          + ", ".join(f"{k}: {x:.2f}" for k, x in costs.verify.items()))
    result = {"costs": vars(costs), "heads": {}}
    for name, head in heads.items():
        entry = {}
        for prompts, seqs in cov_sets.items():
            cov = coverage_by_depth(target, head, seqs, depth=4, ks=(1, 2, 4, 8))
            print(f"\n== {name}: coverage@k per depth on {prompts} ({cov.positions} positions)")
            print(cov.table())
            key = "coverage" if prompts == "HELD_OUT[:10]" else f"coverage {prompts}"
            entry[key] = {"by_depth": cov.by_depth, "path": cov.path, "positions": cov.positions}
        for label, sampling in (("greedy", sd.SamplingConfig(0)), ("T=1", sd.SamplingConfig(1.0))):
            taus = method_taus(target, sd.FeatureDrafter(head), encoded, METHODS, args.tokens, sampling,
                               eos_token_id=eos)
            pred = {m: predicted_speedup(parse_method(m), taus[m], costs, not sampling.greedy)
                    for m in METHODS}
            entry[label] = {"tau": taus, "predicted": pred}
            print(f"{label}: "
                  + "; ".join(f"{m}: τ {taus[m]:.2f}, predicted {pred[m]:.2f}×" for m in METHODS))
        result["heads"][name] = entry
    if args.speed:
        for label, sampling in (("greedy", sd.SamplingConfig(0)), ("T=1", sd.SamplingConfig(1.0))):
            runs = {}
            for name, head in heads.items():
                best = max(METHODS, key=lambda m: result["heads"][name][label]["predicted"][m])
                runs[f"{name} {best}"] = (sd.FeatureDrafter(head), METHODS[best])
            rows = measure_speedups(target, runs, encoded, args.tokens, sampling, eos_token_id=eos)
            plain = rows["plain"].tokens_per_second
            result[f"speed {label}"] = {n: r.tokens_per_second / plain for n, r in rows.items()}
            print(f"measured {label}: "
                  + ", ".join(f"{n}: {s:.2f}×" for n, s in result[f"speed {label}"].items()))
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=1, default=str))
    print(f"\nwritten to {args.json}")


if __name__ == "__main__":
    main()
