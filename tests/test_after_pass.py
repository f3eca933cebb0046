"""`lab.after_pass`: the same work timed right after a pass and again at once, round by round."""
import time

import pytest
import torch

from specdec_ref.lab.after_pass import after_pass


def test_it_times_the_work_after_the_pass_and_again_apart():
    """A 'pass' that leaves the next call of the work slow (as a swept cache does) shows in the first timing
    only; the pass itself is never timed."""
    state = {"cold": False, "passes": 0}

    def run_pass():
        state["passes"] += 1
        state["cold"] = True
        time.sleep(0.004)  # a long pass: must not leak into either timing

    def work():
        time.sleep(0.003 if state["cold"] else 0.0005)
        state["cold"] = False

    first, again = after_pass(run_pass, work, "cpu", repeats=6, warmup=2)
    assert state["passes"] == 8 and len(first.times) == len(again.times) == 6
    assert 0.0028 < first.median < 0.0065  # the slow call, and not the pass's 4 ms on top of it (>= 7 ms)
    assert 0.0004 < again.median < 0.0025
    assert first.median - again.median > 0.0018  # 2.5 ms apart, less what sleeping overshoots
    # power: work that costs the same either way gives two timings alike
    flat = after_pass(run_pass, lambda: time.sleep(0.001), "cpu", repeats=6, warmup=1)
    assert abs(flat[0].median - flat[1].median) < 0.0012


def test_bad_counts_are_refused():
    with pytest.raises(ValueError, match="repeats >= 1"):
        after_pass(lambda: None, lambda: None, "cpu", repeats=0)
    with pytest.raises(ValueError, match="warmup >= 0"):
        after_pass(lambda: None, lambda: None, torch.device("cpu"), warmup=-1)
