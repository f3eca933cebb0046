"""How fast the target's pass prices move on this machine: t(1), t(4)/t(1) and t(9)/t(1), measured again and
again for a while, each time from three interleaved rounds (`models.method.pass_seconds`, as a calibration
measures them), after 60 tokens of context.

    PYTHONPATH=<checkout> python scripts/pass_drift.py [--threads 2] [--seconds 150] [--every 1.0]

One line per measurement, then the range of each column. On a quiet machine the columns barely move; on a
shared one they show how stale a calibration a minute old can be (`lab.pass_clock`).
"""
import argparse
import os
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=2)
p.add_argument("--seconds", type=float, default=150.0)
p.add_argument("--every", type=float, default=1.0, help="seconds of rest between measurements")
args = p.parse_args()
torch.set_num_threads(args.threads)
os.environ.setdefault("SPECDEC_CALIBRATE", "0")  # no method is chosen here
import specdec_ref as sd  # noqa: E402
from specdec_ref.models.method import pass_seconds  # noqa: E402

target, _, _ = sd.load_offline_pair(draft="feature")
rows, t0 = [], time.time()
while time.time() - t0 < args.seconds:
    t = pass_seconds(target, [1, 4, 9], 60, repeats=3)
    rows.append((t[1] * 1e3, t[4] / t[1], t[9] / t[1]))
    print(f"{time.time() - t0:6.1f} s  t(1) {rows[-1][0]:5.2f} ms  t(4)/t(1) {rows[-1][1]:.3f}  "
          f"t(9)/t(1) {rows[-1][2]:.3f}", flush=True)
    time.sleep(args.every)
for name, column in zip(("t(1) ms", "t(4)/t(1)", "t(9)/t(1)"), zip(*rows)):
    print(f"{name}: {min(column):.2f} to {max(column):.2f} over {len(column)} measurements")
