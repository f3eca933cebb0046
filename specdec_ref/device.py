"""The device: which one to use, and how to wait for it before reading a clock.

The loop times a whole generation with `start_timer` / `seconds_since`, which synchronise first, so queued
GPU work is never left out. Repeated measurements (`time_fn`, medians and spreads) are lab equipment and
live in `lab/timing.py`. `chip_name` and `package_version` name what a cached measurement or a compiled
package was made on, and `cache_dir` is where this machine keeps them.
"""
from __future__ import annotations

import hashlib
import os
import platform
import time
from pathlib import Path

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


def cache_dir() -> Path:
    """Where this machine keeps what it made once: dequantised weights, compiled packages, calibrations
    ($SPECDEC_CACHE, else ~/.cache/specdec_ref)."""
    return Path(os.environ.get("SPECDEC_CACHE", Path.home() / ".cache" / "specdec_ref"))


def chip_name(device: torch.device | str = "cpu", with_flags: bool = False) -> str:
    """The processor behind `device`: the GPU's name, or the CPU's model name from /proc/cpuinfo, with its
    instruction-set flags if `with_flags` (two CPUs of one name can differ in what a compiled kernel may
    use)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    chip = platform.processor() or platform.machine()
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            lines = f.readlines()
        names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
        flags = [line.strip() for line in lines if line.startswith("flags")]
        chip = (names[0] if names else chip) + (" | " + flags[0] if with_flags and flags else "")
    return chip


def package_version() -> str:
    """specdec_ref's installed version, or "source" when it runs from a checkout that is not installed."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("specdec_ref")
    except PackageNotFoundError:
        return "source"


def build_key(device: torch.device | str, *parts: str) -> str:
    """The name of something built for this machine and install (a compiled package): its processor with its
    flags, torch's threads, torch's version and this package's, then `parts` (a format, what it was built
    for), hashed. Threads belong to it because Inductor writes its kernels for the thread count it compiles
    at."""
    parts = (chip_name(device, with_flags=True), str(torch.get_num_threads()), torch.__version__,
             package_version(), *parts)
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]
