"""Compiled packages given by path, for the scripts that time them side by side
(`scripts/compare_packages.py`, `scripts/eager_or_compiled.py`, `scripts/profile_package.py`): one loaded with
its input checks on first, so a package built for other inputs is refused rather than read past them, and one
of an older `aot.FORMAT` called as today's is.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import torch

from ..models import aot


def older_runner(runner: Callable, fmt: int) -> Callable:
    """A package of an older `aot.FORMAT` called as today's is (`aot.KVStep`'s inputs and outputs): up to 6 it
    took the write position and the whole mask, and returned the hidden states (stored here); up to 5 its
    masks were as wide as its KV buffers (padded with "never"). For scripts that time an older package beside
    today's (`scripts/compare_packages.py`, `scripts/eager_or_compiled.py`)."""
    def run(ids, positions, block, columns, hidden, *kv):
        end, q = columns.shape[0], ids.shape[1]
        mask = torch.nn.functional.pad(block, (end - block.shape[3], 0))  # [1, 1, q, end]
        if fmt <= 5:
            mask = torch.nn.functional.pad(mask, (0, kv[0].shape[2] - end), value=torch.finfo(mask.dtype).min)
        logits, h, best, sums = runner(ids, positions, columns[end - q], mask, *kv)
        hidden[end - q:end] = h
        return logits, best, sums
    return run


def checked_package(model, path: str | Path, fmt: int | None = None) -> Callable:
    """A package given by path, for scripts that time packages side by side. It is loaded once with its input
    checks on (AOTI_RUNTIME_CHECK_INPUTS, which each loaded copy reads on its first pass) for one pass over 8
    tokens, so a package whose inputs have other shapes, dtypes or strides (another format, another model's
    layout) is refused instead of read past its inputs; then again with them off, for the timing, since the
    checks also refuse the one-row passes every loop makes (export compiles the rows for 2 and up, see
    `aot.MIN_BLOCKS`). fmt: the package's `aot.FORMAT`, if older than today's (`older_runner`)."""
    def first_pass(runner) -> None:  # the copy reads the variable now, once
        lm = aot.CompiledCachedModel(model, older_runner(runner, fmt) if fmt else runner)
        with torch.inference_mode():
            lm.logits(torch.arange(8, device=lm.device) % model.config.vocab_size, keep=3)

    before = os.environ.get("AOTI_RUNTIME_CHECK_INPUTS")
    try:
        os.environ["AOTI_RUNTIME_CHECK_INPUTS"] = "1"
        first_pass(aot.load_package(path))
        os.environ["AOTI_RUNTIME_CHECK_INPUTS"] = "0"
        runner = aot.load_package(path)
        first_pass(runner)
    finally:
        if before is None:
            os.environ.pop("AOTI_RUNTIME_CHECK_INPUTS", None)
        else:
            os.environ["AOTI_RUNTIME_CHECK_INPUTS"] = before
    return older_runner(runner, fmt) if fmt else runner
