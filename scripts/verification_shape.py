"""t(1) and t(5)/t(1) of the offline target in this process: run it a few times, minutes apart.

    for i in 1 2 3 4 5 6; do PYTHONPATH=<checkout> python scripts/verification_shape.py; done

The calibration's check on cached costs (`models.method.current_shape`) measures again when t(5)/t(1) moved
by more than 0.05. On a shared host it does: when a guest gets less memory bandwidth, a one-row pass costs
more and the extra rows of a five-row pass hide under the slower weight stream. Each run loads the target,
times interleaved 1-row and 5-row cached passes after a 60-token context (`method.pass_seconds`, 9 rounds)
and prints one JSON line with the time.
"""
import json
import time
import warnings

import torch

warnings.filterwarnings("ignore")
torch.set_num_threads(2)
import specdec_ref as sd  # noqa: E402
from specdec_ref.models.method import pass_seconds  # noqa: E402

target, _ = sd.load_offline_target()
t = pass_seconds(target, [1, 5], 60, repeats=9)
print(json.dumps({"time": time.strftime("%H:%M:%S"), "t1_ms": round(t[1] * 1e3, 2),
                  "t5_over_t1": round(t[5] / t[1], 3)}))
