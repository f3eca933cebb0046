"""How much of the machine a measurement had: the cores this process may use, and the other processes' load.

A calibration (`models.method`) that shared its cores with another job prices everything wrong, so it
measures the load while it runs and says so instead of caching what it found.
"""
from __future__ import annotations

import os
import time


def n_cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def busy_seconds() -> float | None:
    """CPU seconds the whole machine has been busy since boot, from /proc/stat (None where there is none)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    user, nice, system, idle, iowait, irq, softirq = (fields + [0] * 7)[:7]
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


class LoadMeter:
    """How much CPU other processes use while this one measures: the machine's busy time (/proc/stat) less
    this process's own, over the wall time."""

    def __init__(self):
        self.busy, self.own, self.wall = busy_seconds(), time.process_time(), time.perf_counter()

    def other_cores(self) -> float:  # cores' worth of CPU that other processes used; nan where unknown
        busy = busy_seconds()
        if busy is None or self.busy is None:
            return float("nan")
        others = (busy - self.busy) - (time.process_time() - self.own)
        return max(others, 0.0) / max(time.perf_counter() - self.wall, 1e-9)
