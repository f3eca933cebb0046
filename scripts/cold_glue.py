"""Why the loop's own work resists cutting: the same few lines of it, right after a target pass and again
straight after.

    PYTHONPATH=<checkout> python scripts/cold_glue.py [--threads 2] [--repeats 60]

A target pass streams all of the target's weights (269 MB in bfloat16) through the caches, which on a 2-core
CPU hold a few tens of MB: whatever the loop touches next (Python's objects, torch's dispatcher, the head's
weights) comes back from memory. This times six lines of the kind the loop runs between passes (two shape
checks, an attribute chain, `torch.arange` and `torch.tensor`, as a head pass's wrapper does) right after a
target pass of one token, then the same six lines again at once (`lab.after_pass`, as the appendix on CPU
kernels does); medians over --repeats passes. The target runs as the loops run it (its compiled pass where
this machine has one).
"""
import argparse

import torch

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=2)
p.add_argument("--repeats", type=int, default=60)
args = p.parse_args()
torch.set_num_threads(args.threads)
import specdec_ref as sd  # noqa: E402
from specdec_ref.cache import cached_model  # noqa: E402
from specdec_ref.lab.after_pass import after_pass  # noqa: E402
from specdec_ref.lab.timing import time_fn  # noqa: E402

target, drafter, _ = sd.load_offline_pair(draft="feature")
head = drafter.head
START = 150  # cached positions before each pass
lm = cached_model(target, cache="auto", name="target", max_len=START + 8)  # as the loops make it
ids = torch.randint(0, target.config.vocab_size, (START + 1,), generator=torch.Generator().manual_seed(0))
lm.logits(ids[:START], keep=1)
features = torch.zeros(1, 1, target.config.hidden_size, dtype=target.dtype)
tokens = torch.tensor([[5]])


def one_pass() -> None:  # one token after START cached ones
    lm.rollback(START)
    lm.logits(ids, keep=1)


def glue() -> tuple:  # six lines of a head pass's wrapper (`models.aot_head.CompiledHead.forward`)
    q = tokens.shape[1]
    if q == 0 or features.shape[:2] != tokens.shape:
        raise ValueError("unreachable")
    dtype = head.fc.weight.dtype
    positions = torch.arange(START, START + q)[None]
    start = torch.tensor(START)
    return dtype, positions, start


after, again = after_pass(one_pass, glue, "cpu", repeats=args.repeats)
passes = time_fn(one_pass, "cpu", repeats=9)
print(f"{sd.models.kernels.kernel_path(target)}; a target pass {passes.median * 1e3:.2f} ms; "
      f"the same six lines: {after.median * 1e6:.1f} us right after it, "
      f"{again.median * 1e6:.1f} us straight after that")
