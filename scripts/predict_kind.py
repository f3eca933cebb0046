"""Predict the defaults' speedup on a CPU kind this session could not measure, from the cost model the loader
chooses with (`models.method.choose`) and the shipped head's recorded τ (quality.json). A prediction, not a
measurement: say so wherever it is quoted.

    python scripts/predict_kind.py --t 36.0,42.9,48.3,52.9,64.8,62.7,91.7,97.0,123.7,151.9 \
        --ks 1,2,3,4,5,6,8,10,12,16 --c1 0.16 0.08

--t: the target's ms per pass over k rows (the kernel probe of that kind in book/measurement_log.md,
`scripts/kernel_probe.py`);
--c1: one or more prices of a draft pass in target steps; the loop's costs (h₀ 0.05, h_node 0.02, δ 0.05,
δ_node 0.05, c_row 0.005 steps) are this project's AVX512-BF16 calibrations, rounded up.
"""
import argparse
import json

import numpy as np

from specdec_ref.models import feature_draft
from specdec_ref.models import method as mm

p = argparse.ArgumentParser()
p.add_argument("--t", required=True, help="ms per pass, comma-separated, one per k in --ks")
p.add_argument("--ks", required=True, help="the k of each --t, comma-separated, starting at 1")
p.add_argument("--c1", type=float, nargs="+", required=True)
args = p.parse_args()
ks, t = [int(x) for x in args.ks.split(",")], [float(x) for x in args.t.split(",")]
if len(ks) != len(t) or ks[0] != 1:
    raise SystemExit("--t and --ks need one time per k, and k = 1 first")
verify = {k: float(np.interp(k, ks, t)) / t[0] for k in range(1, 18)}  # beyond the last k: kept flat
quality = json.loads((feature_draft.WEIGHTS_DIR / "quality.json").read_text())
for c1 in args.c1:
    costs = mm.Costs(verify, c1, 0.005, 0.05, 0.05, t[0] / 1e3, h_node=0.02, h_node_sampled=0.05)
    for label, sampled in (("greedy", False), ("T=1", True)):
        method, predicted = mm.choose(quality["tau"][label], costs, sampled,
                                      quality.get("draft_passes", {}).get(label),
                                      quality.get("draft_nodes", {}).get(label))
        name = mm.method_name(method)
        print(f"c1 = {c1:.2f}, {label}: {name}, predicted {predicted[name]:.2f}x (a prediction, unmeasured)")
