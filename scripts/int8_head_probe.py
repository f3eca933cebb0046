"""What weight-only int8 would save on the feature head's passes: its linear layers timed alone, hot and cold.

    PYTHONPATH=<checkout> python scripts/int8_head_probe.py [--threads 2] [--rows 1 3]

The head's first pass of every iteration follows the target's, whose weights push the head's out of the
caches: it costs about three times the passes that follow (`diagnose`'s c_first against c). That pass streams
the head's weights from memory, so their bytes set its price. This times the shipped head's linear layers
(fc, the decoder layer's seven, and the reduced output layer) for 1 and 3 rows: in bfloat16 through oneDNN's
prepacked kernel (what the eager head runs on a CPU), and as int8 weights with one bfloat16 scale per output
row through `torch._weight_int8pack_mm` (half the bytes). "cold" runs each pass after writing 64 MB, which
evicts the caches as the target's pass does; "hot" runs them back to back. Prints one JSON line of median
milliseconds and the int8 weights' error relative to the bfloat16 ones.
"""
import argparse
import json
import statistics
import time
import warnings

import torch

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=2)
p.add_argument("--rows", type=int, nargs="+", default=[1, 3])
p.add_argument("--repeats", type=int, default=40)
args = p.parse_args()
warnings.filterwarnings("ignore")
torch.set_num_threads(args.threads)
import specdec_ref as sd  # noqa: E402
from specdec_ref.models import kernels  # noqa: E402

target, draft, _ = sd.load_offline_pair(draft="feature", choose_method=False)
head = getattr(draft.head, "inner", draft.head)
weights = {name: m.weight.detach() for name, m in head.named_modules()  # fc and the decoder layer's seven
           if (isinstance(m, torch.nn.Linear) or hasattr(m, "packed")) and m is not head.head}
weights["reduced output layer"] = head.head.sub_weight.detach()  # its K rows of the target's embedding
packed = {n: torch.ops.mkldnn._reorder_linear_weight(w, 8) for n, w in weights.items()}
int8 = {}
for n, w in weights.items():
    scale = w.float().abs().amax(1).clamp(min=1e-8) / 127  # [out]
    int8[n] = ((w.float() / scale[:, None]).round().clamp(-127, 127).to(torch.int8), scale.to(w.dtype))
error = max(float(((q.float() * s.float()[:, None]) - w.float()).norm() / w.float().norm())
            for (q, s), w in zip(int8.values(), weights.values()))
flush = torch.empty(16 * 1024 * 1024, dtype=torch.float32)  # 64 MB, twice this CPU's L3


def passes(kind: str, x: dict) -> None:
    for n in weights:
        if kind == "bfloat16, prepacked":
            kernels.packed_linear(x[n], packed[n], None)
        else:
            torch._weight_int8pack_mm(x[n], *int8[n])


def median_ms(kind: str, rows: int, cold: bool) -> float:
    x = {n: torch.randn(rows, w.shape[1], dtype=w.dtype) for n, w in weights.items()}
    times = []
    for _ in range(args.repeats + 3):
        if cold:
            flush.add_(1.0)
        t0 = time.perf_counter()
        passes(kind, x)
        times.append(time.perf_counter() - t0)
    return statistics.median(times[3:]) * 1e3


with torch.inference_mode():
    result = {f"{kind}, {rows} row(s), {'cold' if cold else 'hot'}": median_ms(kind, rows, cold)
              for rows in args.rows for kind in ("bfloat16, prepacked", "int8 weight-only")
              for cold in (False, True)}
print(json.dumps({"threads": args.threads, "layers": len(weights),
                  "megabytes_bf16": sum(w.numel() * w.element_size() for w in weights.values()) / 1e6,
                  "int8_relative_error": error, "ms": result}))
