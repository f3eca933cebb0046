"""The device: which one to use, how to wait for it, and how to time work on it honestly.

The algorithm needs only `synchronize` (to stop a clock after queued GPU work has finished);
chapter 1's measurements build on `time_fn`.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch


def default_device() -> torch.device:
    """cuda, then mps, then cpu."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def synchronize(device: torch.device | str) -> None:
    """Wait until all queued work on `device` has finished (a no-op on the CPU).

    The device is required: a default would silently skip the wait on a GPU and time unfinished work.
    """
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def start_timer(device: torch.device | str) -> float:
    """perf_counter() once the device has finished its queued work; pair it with seconds_since."""
    synchronize(device)
    return time.perf_counter()


def seconds_since(t0: float, device: torch.device | str) -> float:
    """Seconds from start_timer's t0 until the device has finished everything queued since."""
    synchronize(device)
    return time.perf_counter() - t0


def _half_iqr(values: Sequence[float]) -> float:
    """Half the interquartile range (0 with fewer than 2 values): a spread that ignores outliers."""
    if len(values) < 2:
        return 0.0
    q = statistics.quantiles(values, n=4, method="inclusive")
    return (q[2] - q[0]) / 2


@dataclass
class Samples:
    """Repeated measurements, summarised by their median and spread (half the interquartile range)."""
    values: list[float]  # one per timed repeat

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def spread(self) -> float:
        """Half the interquartile range, in the values' unit (0 with fewer than 2 repeats)."""
        return _half_iqr(self.values)


@dataclass
class Timing(Samples):
    """Seconds, one per repeat."""

    @property
    def times(self) -> list[float]:
        return self.values


@dataclass
class Rate(Samples):
    """Work per second, one value per timed repeat (bytes/s for bandwidth, FLOP/s for matmuls)."""
    unit: str = "FLOP/s"  # "B/s" or "FLOP/s"

    def __str__(self) -> str:
        g = 1e9
        return f"{self.median / g:.1f} ± {self.spread / g:.1f} G{self.unit}"


def time_fn(fn: Callable[[], object], device: torch.device | str,
            warmup: int = 1, repeats: int = 5, setup: Callable[[], object] | None = None) -> Timing:
    """Run fn warmup times untimed, then time `repeats` calls, synchronising around each.

    `setup`, if given, runs untimed before every call (e.g. to reset a KV cache).
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}")
    for _ in range(warmup):
        if setup is not None:
            setup()
        fn()
    times = []
    for _ in range(repeats):
        if setup is not None:
            setup()
        t0 = start_timer(device)
        fn()
        times.append(seconds_since(t0, device))
    return Timing(times)
