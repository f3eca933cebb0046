"""The GPU timing sanity check: its comparison logic on made-up numbers, and its no-CUDA path."""
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from specdec_ref.lab import gpu_check

ROOT = Path(__file__).resolve().parent.parent


def test_clocks_within_ten_percent_agree():
    r = gpu_check.compare_timings([0.0105, 0.0104, 0.0200], [0.0100, 0.0101, 0.0099])  # medians 10.5 vs 10.0 ms
    assert r.agree and r.relative_gap == pytest.approx(0.05)
    assert str(r).startswith("PASS")


def test_clocks_more_than_ten_percent_apart_disagree():
    r = gpu_check.compare_timings([0.0120, 0.0121], [0.0100, 0.0100])  # a timer that counts launch overhead
    assert not r.agree and str(r).startswith("FAIL")
    assert not gpu_check.compare_timings([0.0080], [0.0100]).agree  # too fast: work left unfinished


def test_compare_timings_rejects_empty_or_nonpositive_input():
    with pytest.raises(ValueError, match="at least one"):
        gpu_check.compare_timings([], [0.01])
    with pytest.raises(ValueError, match="positive"):
        gpu_check.compare_timings([0.01], [0.0])


@pytest.mark.skipif(torch.cuda.is_available(), reason="tests the path for machines without CUDA")
def test_without_cuda_the_module_says_so_and_exits_0():
    run = subprocess.run([sys.executable, "-m", "specdec_ref.lab.gpu_check"], capture_output=True, text=True)
    assert run.returncode == 0 and "no CUDA" in run.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="tests the path for machines without CUDA")
def test_without_cuda_the_script_says_so_and_exits_0():
    run = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh")], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable})
    assert run.returncode == 0, run.stderr
    assert "no CUDA" in run.stdout
