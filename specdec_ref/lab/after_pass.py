"""What the loop's small steps cost right after a target pass, against the same steps run again at once.

A target pass streams every weight of the model through the processor. On a CPU those weights pass through the
same caches that hold everything else the process touches (Python's objects, torch's dispatcher and kernels,
the draft's weights), and even a 135M model's weights are several times what the caches hold. So the
bookkeeping the loop does between passes finds its code and data evicted and fetches them from memory:
measured per step, it costs several times what a microbenchmark of the same lines says. On a GPU the weights
stream through the GPU's own memory and the host's caches keep their contents.

`after_pass` times some work right after a pass, then the same work again straight away, round after round.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from ..device import seconds_since, start_timer
from .timing import Timing


def after_pass(run_pass: Callable[[], object], work: Callable[[], object], device: torch.device | str,
               repeats: int = 40, warmup: int = 3) -> tuple[Timing, Timing]:
    """(seconds of `work()` right after `run_pass()`, seconds of `work()` run again straight after), one of
    each per round: `warmup` untimed rounds, then `repeats` timed ones. Each timing synchronises the device,
    so on a GPU the pass has finished before `work` starts and its clock stops when `work`'s kernels have."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}")
    first, again = [], []
    for r in range(warmup + repeats):
        run_pass()
        t0 = start_timer(device)  # synchronises: the pass is over
        work()
        cold = seconds_since(t0, device)
        t0 = start_timer(device)
        work()
        warm = seconds_since(t0, device)
        if r >= warmup:
            first.append(cold)
            again.append(warm)
    return Timing(first), Timing(again)
