"""Why the first draft pass of an iteration costs more than the others: caches, or idle threads?

    PYTHONPATH=<checkout> python scripts/cold_draft_pass.py [--threads 2] [--repeats 30] \
        [--stream-mb 8 32 128]

Times one draft pass of the offline feature head (one new row fed, one token proposed, as `method.
draft_pass_seconds` does) after each of: nothing (back to back), another draft pass, a target pass (what an
iteration does), a pause of 1 or 5 ms (sleeping, or spinning in Python), a stream through 400 MB of other
memory (2 threads, or 1), and streams of --stream-mb megabytes (2 threads): where the cost appears as the
stream grows past the last-level cache (32 MB on a Zen 5 CCD) says how much data it is. Cases interleaved in a
shuffled order with a fixed seed; medians in ms, one JSON line. If a plain memory stream costs the pass what
the target's pass does, the cost is what the caches lost (weights, code, the allocator's and the
interpreter's data), not the threads' wake-up.
"""
import argparse
import json
import random
import statistics
import time
import warnings

import torch

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=2)
p.add_argument("--repeats", type=int, default=30)
p.add_argument("--stream-mb", type=int, nargs="*", default=[], help="also after streaming this many MB")
args = p.parse_args()
warnings.filterwarnings("ignore")
torch.set_num_threads(args.threads)
import specdec_ref as sd  # noqa: E402
from specdec_ref.models.method import primed_drafter, timed_draft_pass  # noqa: E402

target, drafter, tok = sd.load_offline_pair()
tokens = sd.encode_chat(tok, "Explain how a rainbow forms, step by step.")[0]  # [T]
T = tokens.shape[0]
other = torch.zeros(100_000_000)  # 400 MB of float32 that no model uses


def spin(seconds: float) -> None:
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        pass


def stream(threads: int, mb: int = 400) -> None:
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    other[:mb * 2**18].add_(1.0)  # 2**18 float32 to a megabyte
    torch.set_num_threads(before)


with torch.inference_mode():
    lm, hidden = primed_drafter(target, drafter, tokens, with_target=True)

    def draft_pass() -> float:
        return timed_draft_pass(drafter, tokens, hidden)  # the newest pair forgotten and fed again

    def target_pass() -> None:
        lm.rollback(T - 1)
        lm.logits(tokens, keep=1)

    before = {"back to back": lambda: None, "after a draft pass": draft_pass,
              "after a target pass": target_pass, "after sleeping 1 ms": lambda: time.sleep(0.001),
              "after sleeping 5 ms": lambda: time.sleep(0.005), "after spinning 5 ms": lambda: spin(0.005),
              "after 400 MB streamed, 2 threads": lambda: stream(2),
              "after 400 MB streamed, 1 thread": lambda: stream(1),
              **{f"after {mb} MB streamed, 2 threads": (lambda mb=mb: stream(2, mb))
                 for mb in args.stream_mb}}
    times = {case: [] for case in before}
    order = list(before) * (args.repeats + 2)
    random.Random(0).shuffle(order)
    for case in order:
        before[case]()
        times[case].append(draft_pass())
print(json.dumps({"threads": args.threads, "dtype": str(target.dtype), "head": type(drafter.head).__name__,
                  "draft_pass_ms": {c: round(statistics.median(v[2:]) * 1e3, 3) for c, v in times.items()}}))
