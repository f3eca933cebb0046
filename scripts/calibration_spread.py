"""How much the calibrated costs, and the default methods chosen from them, move from one calibration to the
next: today's calibration (ordered t(k) prices fitted by pool-adjacent-violators, every method timed in two
interleaved rounds) against the one before 2026-12-03 (a running maximum over t(k), one round), alternating
in one process on the offline pair.

    python scripts/calibration_spread.py [--threads 2] [--runs 4]

Each run is one uncached `models.method.calibrate` on the loader's calibration prompt, and the greedy and
sampled choices made from it with the head's recorded τ (`quality.json`). Prints one row per run, then per
variant its seconds per calibration and the choices it made.
"""
import argparse
import collections
import json
import os
import time

import numpy as np
import torch

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=2)
p.add_argument("--runs", type=int, default=4)
args = p.parse_args()
torch.set_num_threads(args.threads)
os.environ["SPECDEC_CALIBRATE"] = "0"  # the loader keeps its own default; this script calibrates
import specdec_ref as sd  # noqa: E402
from specdec_ref.models import feature_draft  # noqa: E402
from specdec_ref.models import method as mm  # noqa: E402
from specdec_ref.models.choice import CALIBRATION_PROMPT  # noqa: E402

target, draft, tok = sd.load_offline_pair(draft="feature")
ids = sd.encode_chat(tok, CALIBRATION_PROMPT)
tau = json.loads((feature_draft.WEIGHTS_DIR / "quality.json").read_text())["tau"]
today = (mm.monotone, mm.ROUNDS)
variants = {"today (ordered t(k), 2 rounds)": today,
            "before (running max, 1 round)": (lambda v: np.maximum.accumulate(v).tolist(), 1)}
seconds, chosen = collections.defaultdict(list), collections.defaultdict(collections.Counter)
print(f"{target.dtype}, {args.threads} threads, {args.runs} runs per variant, alternating")
print("| run | variant | s | t(2) | t(4) | t(5) | c₁ | h₀ | h_node | δ | greedy | T=1 |\n"
      "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
for run in range(args.runs):
    for name, (fit, rounds) in variants.items():
        mm.monotone, mm.ROUNDS = fit, rounds
        t0 = time.perf_counter()
        c = mm.calibrate(target, draft, ids)
        seconds[name].append(time.perf_counter() - t0)
        # among the methods the loader's choice weighs (`choosable`: the chains and trees drafted in one call)
        g, _ = mm.choose(mm.choosable(tau["greedy"], draft), c, sampled=False)
        s, _ = mm.choose(mm.choosable(tau["T=1"], draft, sampled=True), c, sampled=True)
        chosen[name][f"{mm.method_name(g)} / {mm.method_name(s)}"] += 1
        prices = " | ".join(f"{c.verify_cost(k):.3f}" for k in (2, 4, 5))
        print(f"| {run} | {name} | {seconds[name][-1]:.1f} | {prices} | {c.c_pass:.3f} | {c.h0:.3f} | "
              f"{c.h_node:.3f} | {c.h_sampled:.3f} | {mm.method_name(g)} | {mm.method_name(s)} |", flush=True)
mm.monotone, mm.ROUNDS = today
print()
for name in variants:
    print(f"{name}: {np.median(seconds[name]):.1f} s per calibration (median); choices (greedy / T=1): "
          + ", ".join(f"{k} ×{n}" for k, n in chosen[name].most_common()))
