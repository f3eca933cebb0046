"""t(1) and t(k)/t(1) of the offline target in this process: run it a few times, minutes apart, or in bursts.

    for i in 1 2 3 4 5 6; do PYTHONPATH=<checkout> python scripts/verification_shape.py; done
    PYTHONPATH=<checkout> python scripts/verification_shape.py --bursts 6 --ks 1,2,3,4,5,6,8 --repeats 11

The calibration's check on cached costs (`models.method.current_shape`) measures again when t(5)/t(1) moved
by more than 0.05. On a shared host it does: when a guest gets less memory bandwidth, a one-row pass costs
more and the extra rows of a five-row pass hide under the slower weight stream. Each run loads the target as
the loops run it, in the dtype the loaders pick (before the twelfth session this script loaded it in float32,
for which no package is built, so its figures in the measurement log's earlier entries are of the eager
float32 target), times interleaved cached passes of k rows after a 60-token context (`method.pass_seconds`;
by default 1 and 5 rows, 9 rounds) and prints one JSON line with the time; --bursts N does that N times in one
process, back to back (about a second each), to see how fast the shape moves.
"""
import argparse
import json
import time
import warnings

import torch

p = argparse.ArgumentParser()
p.add_argument("--bursts", type=int, default=1)
p.add_argument("--ks", default="1,5", help="rows per pass, 1 first")
p.add_argument("--repeats", type=int, default=9)
args = p.parse_args()
warnings.filterwarnings("ignore")
torch.set_num_threads(2)
from specdec_ref.models.loading import default_dtype, load_offline_target  # noqa: E402
from specdec_ref.models.method import pass_seconds  # noqa: E402

ks = [int(k) for k in args.ks.split(",")]
if ks[0] != 1:
    p.error(f"--ks lists the rows per pass, 1 first (every ratio is to t(1)), got {args.ks!r}")
target, _ = load_offline_target("cpu", default_dtype(torch.device("cpu")))  # its compiled pass, if built
for _ in range(args.bursts):
    t = pass_seconds(target, ks, 60, repeats=args.repeats)
    line = {"time": time.strftime("%H:%M:%S"), "t1_ms": round(t[1] * 1e3, 2)}
    line.update({f"t{k}_over_t1": round(t[k] / t[1], 3) for k in ks[1:]})
    print(json.dumps(line), flush=True)
