"""Does our timer tell the truth on a GPU? `time_fn`'s synchronised wall clock against CUDA events.

    python -m specdec_ref.lab.gpu_check        # one summary line; exit 0 without CUDA (nothing to check)

`time_fn` brackets each call with `synchronize` and reads the host clock; CUDA events are stamped by
the GPU itself. For a kernel that runs for milliseconds the two must agree: a large gap means the
timer measures launch overhead or unfinished work, and every number in chapter 1 would be off.
"""
from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass

import torch

from ..device import time_fn

TOLERANCE = 0.10  # the two medians may differ by at most 10% of the events' median


@dataclass
class TimingAgreement:
    synced_s: float  # median seconds per call, time_fn (host clock, synchronised)
    events_s: float  # median seconds per call, CUDA events
    tolerance: float  # allowed relative difference

    @property
    def relative_gap(self) -> float:
        """|synced - events| / events."""
        return abs(self.synced_s - self.events_s) / self.events_s

    @property
    def agree(self) -> bool:
        return self.relative_gap <= self.tolerance

    def __str__(self) -> str:
        verdict = "PASS" if self.agree else "FAIL"
        return (f"{verdict}: time_fn {self.synced_s * 1e3:.3f} ms vs CUDA events {self.events_s * 1e3:.3f} ms "
                f"per call ({self.relative_gap:.1%} apart, tolerance {self.tolerance:.0%})")


def compare_timings(synced: list[float], events: list[float], tolerance: float = TOLERANCE) -> TimingAgreement:
    """Compare the medians of two lists of per-call seconds (no GPU needed: the logic alone)."""
    if not synced or not events:
        raise ValueError("need at least one timing from each clock")
    if min(events) <= 0 or min(synced) <= 0:
        raise ValueError(f"timings must be positive seconds, got synced={synced}, events={events}")
    return TimingAgreement(statistics.median(synced), statistics.median(events), tolerance)


def event_times(fn, repeats: int = 10, warmup: int = 2) -> list[float]:
    """Seconds per call of fn as the GPU's own CUDA events measure it."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)  # elapsed_time is in milliseconds
    return times


@torch.inference_mode()
def matmul_timing_check(n: int = 8192, repeats: int = 10, device: torch.device | str = "cuda",
                        tolerance: float = TOLERANCE) -> TimingAgreement:
    """Time an n x n float32 matmul (milliseconds long on any GPU) with both clocks, interleaved."""
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, generator=g)  # [n, n]
    b = torch.randn(n, n, device=device, generator=g)  # [n, n]
    fn = lambda: a @ b  # noqa: E731  [n, n] x [n, n] -> [n, n]
    synced, events = [], []
    for _ in range(repeats):  # interleaved, so that clock boosts and throttling hit both alike
        synced += time_fn(fn, device, warmup=1, repeats=1).times
        events += event_times(fn, repeats=1, warmup=1)
    return compare_timings(synced, events, tolerance)


def main() -> int:
    if not torch.cuda.is_available():
        print("timing: SKIP (no CUDA device: nothing to compare)")
        return 0
    result = matmul_timing_check()
    print(f"timing: {result}")
    return 0 if result.agree else 1


if __name__ == "__main__":
    sys.exit(main())
