"""Do 2 MB pages make the target's pass or the head's first pass cheaper? Before and after, in one process.

    PYTHONPATH=<checkout> python scripts/huge_pages.py [--threads 2]

On a Linux guest whose transparent huge pages are "madvise" (never given unasked), a model's weights sit on
4 KB pages: a pass over the target's 270 MB touches 66,000 of them, and the head's first pass of an iteration
(right after the target's) finds its page-table entries evicted too. This times t(1), t(5)/t(1), one draft
pass c and the first pass c_first (`method.pass_seconds`, `method.draft_pass_seconds`) and the plain loop's
step, twice; then asks the kernel to collapse every large writable anonymous mapping into 2 MB pages
(madvise MADV_COLLAPSE, Linux 6.1 or later, synchronous) and times them twice again. One JSON line per
measurement and one for the collapse (mappings collapsed and failed, MB, seconds, AnonHugePages).
"""
import argparse
import ctypes
import json
import time
import warnings

import torch

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=2)
args = p.parse_args()
warnings.filterwarnings("ignore")
torch.set_num_threads(args.threads)
import specdec_ref as sd  # noqa: E402
from specdec_ref.models.method import draft_pass_seconds, loop_step_seconds, pass_seconds  # noqa: E402

MADV_HUGEPAGE, MADV_COLLAPSE, HUGE = 14, 25, 2 << 20
libc = ctypes.CDLL("libc.so.6", use_errno=True)
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def anon_huge_kb() -> int:
    with open("/proc/self/smaps_rollup") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("AnonHugePages"))


def collapse(min_bytes: int = 4 << 20) -> dict:
    done = failed = collapsed = 0
    with open("/proc/self/maps") as f:
        maps = f.read().splitlines()
    for line in maps:
        fields = line.split()
        lo, hi = (int(x, 16) for x in fields[0].split("-"))
        if "w" not in fields[1] or (len(fields) > 5 and fields[5] != "[heap]"):
            continue  # writable anonymous memory only (tensors), not files
        start, end = -(-lo // HUGE) * HUGE, hi // HUGE * HUGE
        if end - start < min_bytes:
            continue
        libc.madvise(start, end - start, MADV_HUGEPAGE)
        if libc.madvise(start, end - start, MADV_COLLAPSE) == 0:
            done, collapsed = done + 1, collapsed + end - start
        else:
            failed += 1
    return {"collapsed mappings": done, "failed": failed, "MB": collapsed >> 20}


target, drafter, tok = sd.load_offline_pair(draft="feature", choose_method=False)
ids = sd.encode_chat(tok, "Explain in a few sentences how a bicycle stays upright.")


def measure(when: str) -> None:
    sd.autoregressive_generate(target, ids, 4)
    t = pass_seconds(target, [1, 5], ids.shape[1] + 8, repeats=9)
    print(json.dumps({"when": when, "t1_ms": round(t[1] * 1e3, 2), "t5/t1": round(t[5] / t[1], 3),
                      "c": round(draft_pass_seconds(target, drafter, ids) / t[1], 4),
                      "c_first": round(draft_pass_seconds(target, drafter, ids, after_target=True) / t[1], 4),
                      "plain_step_ms": round(loop_step_seconds(target, ids, 32) * 1e3, 2),
                      "AnonHugePages_kB": anon_huge_kb()}), flush=True)


measure("before")
measure("before")
start = time.perf_counter()
print(json.dumps({**collapse(), "seconds": round(time.perf_counter() - start, 2),
                  "AnonHugePages_kB": anon_huge_kb()}), flush=True)
measure("after")
measure("after")
