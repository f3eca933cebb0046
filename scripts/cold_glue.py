"""Why the loop's own work resists cutting: the same few lines of it, right after a target pass and again
straight after.

    PYTHONPATH=<checkout> python scripts/cold_glue.py [--threads 2] [--repeats 60]

A target pass streams all of the target's weights (269 MB in bfloat16) through the caches, which on a 2-core
CPU hold a few tens of MB: whatever the loop touches next (Python's objects, torch's dispatcher, the head's
weights) comes back from memory. This times six lines of the kind the loop runs between passes (two shape
checks, an attribute chain, `torch.arange` and `torch.tensor`, as a head pass's wrapper does) right after a
target pass of one token, then the same six lines again at once; medians over --repeats passes. The target
runs as the loops run it (its compiled pass where this machine has one).
"""
import argparse
import statistics
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=2)
p.add_argument("--repeats", type=int, default=60)
args = p.parse_args()
torch.set_num_threads(args.threads)
import specdec_ref as sd  # noqa: E402
from specdec_ref.cache import cached_model  # noqa: E402

target, drafter, _ = sd.load_offline_pair(draft="feature")
head = drafter.head
START = 150  # cached positions before each pass
lm = cached_model(target, cache="auto", name="target", max_len=START + 8)  # as the loops make it
ids = torch.randint(0, target.config.vocab_size, (START + 1,), generator=torch.Generator().manual_seed(0))
lm.logits(ids[:START], keep=1)
features = torch.zeros(1, 1, target.config.hidden_size, dtype=target.dtype)
tokens = torch.tensor([[5]])


def glue() -> float:  # seconds for six lines of a head pass's wrapper
    t0 = time.perf_counter()
    q = tokens.shape[1]
    if q == 0 or features.shape[:2] != tokens.shape:
        raise ValueError("unreachable")
    dtype = head.fc.weight.dtype
    positions = torch.arange(START, START + q)[None]
    start = torch.tensor(START)
    seconds = time.perf_counter() - t0
    del dtype, positions, start
    return seconds


after_pass, again, passes = [], [], []
for _ in range(args.repeats + 3):
    lm.rollback(START)
    t0 = time.perf_counter()
    lm.logits(ids, keep=1)  # one token after START cached ones
    passes.append(time.perf_counter() - t0)
    after_pass.append(glue())
    again.append(glue())
after_pass, again, passes = after_pass[3:], again[3:], passes[3:]  # warm-up rounds out
print(f"{sd.models.kernels.kernel_path(target)}; a target pass {statistics.median(passes) * 1e3:.2f} ms; "
      f"the same six lines: {statistics.median(after_pass) * 1e6:.1f} us right after it, "
      f"{statistics.median(again) * 1e6:.1f} us straight after that")
