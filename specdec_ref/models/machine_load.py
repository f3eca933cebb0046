"""How much of the machine a measurement had: the cores this process may use, and the other processes' load.

A calibration (`models.method`) that shared its cores with another job prices everything wrong, so it
measures the load while it runs and says so instead of caching what it found (`contention`).
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


SHARED = 0.25  # cores' worth of other processes' work beyond the free cores that marks a shared machine


def contention(costs) -> str | None:  # costs: a models.method.Costs
    """Why these costs cannot stand for the quiet machine, in words; None when nothing says so.

    Two signs of a calibration that shared its cores with another job: this process's threads and the other
    processes' load (`LoadMeter`) add up to more than the cores (oversubscribed, as when a 2-thread run
    starts beside a 1-thread job on 2 cores: threads wait for each other at every operation), and a
    verification that costs more than k separate one-row passes, which no kernel does (a k-row pass reads
    the weights once).
    """
    return oversubscribed(costs) or impossible_verification(costs)


def oversubscribed(costs) -> str | None:
    """This process's threads and the other processes' load added up to more than the cores."""
    if costs.threads and costs.other_load == costs.other_load \
            and costs.threads + costs.other_load > costs.cores + SHARED:
        return (f"other processes used {costs.other_load:.1f} of the {costs.cores} cores while its "
                f"{costs.threads} threads ran: they shared cores")
    return None


def impossible_verification(costs) -> str | None:
    """A k-row target pass priced above k one-row passes: timing noise."""
    worst = max(costs.verify, key=lambda k: costs.verify[k] / k)
    if costs.verify[worst] > 1.1 * worst:
        return (f"it priced a {worst}-row target pass at {costs.verify[worst]:.2f} one-row passes, more than "
                f"{worst} separate passes cost: timing noise")
    return None
