"""Checkers for chapter 1, "Why decoding is slow".

Each `check_*` takes the reader's answer first. With the answer left as None it only says
what to fill in (so the notebook still runs top to bottom); a wrong answer raises
AssertionError with a hint (which way it is off and what to revisit, never the right value);
a right one prints why it is right.
"""
from __future__ import annotations

from ...lab import timing
from .common import answered, direction


def _close(answer: float, truth: float, rel: float) -> bool:
    return abs(answer - truth) <= rel * abs(truth)


def check_step_time(answer_s: float | None, n_bytes: float, bandwidth: float, measured_s: float | None = None,
                    rel: float = 0.05) -> None:
    """Exercise 1: the fastest a decode step can be is (bytes it must read) / (bandwidth), in seconds."""
    if not answered(answer_s, "your predicted step time in seconds"):
        return
    truth = n_bytes / bandwidth
    assert answer_s > 0, f"{answer_s} s is too low: a time must be positive (seconds)"
    assert not _close(answer_s / 1e3, truth, rel), \
        "you seem to have answered in milliseconds; the checker wants seconds"
    assert _close(answer_s, truth, rel), (
        f"{answer_s * 1e3:.1f} ms is {direction(answer_s, truth)}. Hint: every weight byte is read once per "
        "step, so the step takes at least (bytes read) / (bandwidth), eq-roofline-time; are both in the "
        "same units (bytes and bytes per second)?")
    msg = (f"Correct: {n_bytes / 1e9:.2f} GB / {bandwidth / 1e9:.1f} GB/s = {truth * 1e3:.1f} ms per token "
           "at best.")
    if measured_s is not None:
        msg += (f" Measured: {measured_s * 1e3:.1f} ms, so decoding reaches {truth / measured_s:.0%} "
                "of the bandwidth bound.")
    print(msg)


def check_intensity(answer: float | None, k: int, bytes_per_param: float, rel: float = 0.02) -> None:
    """Exercise 2: FLOPs per weight byte of a k-token pass (weights only): 2k / bytes_per_param."""
    if not answered(answer, "the arithmetic intensity in FLOP/byte"):
        return
    truth = 2 * k / bytes_per_param
    assert not _close(answer, k / bytes_per_param, rel), \
        "close: you counted one FLOP per parameter per token, but a multiply-add is 2 FLOPs"
    assert _close(answer, truth, rel), (
        f"{answer:g} FLOP/byte is {direction(answer, truth)}. Hint: count the FLOPs of all {k} tokens "
        "(eq-flops: 2 per parameter per token) and divide by the bytes read (eq-bytes): each parameter is "
        f"{bytes_per_param:g} bytes and is read once for all {k} tokens")
    print(f"Correct: 2 x {k} FLOPs per parameter / {bytes_per_param:g} bytes per parameter = {truth:g} "
          "FLOP/byte.")


def check_knee(answer_k: float | None, peak_flops: float, bandwidth: float, bytes_per_param: float,
               rel: float = 0.1) -> None:
    """Exercise 3: the k where a pass turns compute-bound: 2k / bytes_per_param = peak / bandwidth."""
    if not answered(answer_k, "the number of tokens k at the knee"):
        return
    ridge = timing.ridge_point(peak_flops, bandwidth)
    truth = ridge * bytes_per_param / 2
    assert _close(answer_k, truth, rel), (
        f"k = {answer_k:g} is {direction(answer_k, truth)}. Hint: the knee is where a k-token pass's "
        f"intensity (exercise 2: 2k / {bytes_per_param:g} FLOP/byte) reaches the device's ridge, "
        "peak FLOP/s / bandwidth (eq-knee); solve that for k")
    print(f"Correct: the ridge is at {ridge:.0f} FLOP/byte, reached at k = {ridge:.0f} x {bytes_per_param:g} "
          f"/ 2 = {truth:.0f} tokens per pass. Below that, extra tokens ride along almost free.")


def check_kv_cache_bytes(answer: float | None, model, context_len: int, batch_size: int = 1,
                         rel: float = 0.02) -> None:
    """Exercise 4: bytes of the KV cache = 2 x layers x kv heads x head dim x tokens x batch x bytes per
    value."""
    if not answered(answer, "the KV cache size in bytes"):
        return
    truth = timing.kv_cache_bytes(model, context_len, batch_size)
    assert not _close(answer, truth / 2, rel), "too low: remember both keys and values are cached"
    _, n_heads, n_kv, _ = timing._attention_shape(model)
    assert not (n_kv != n_heads and _close(answer, truth * n_heads / n_kv, rel)), (
        "too high: this model shares each key/value head among several query heads (grouped-query "
        "attention); count num_key_value_heads, not num_attention_heads")
    assert _close(answer, truth, rel), (
        f"{answer / 1e6:.1f} MB is {direction(answer, truth)}. Hint: 2 (K and V) x layers x kv heads x head "
        f"dim x {context_len} tokens x {batch_size} sequences x bytes per value, each read from the model's "
        "config and dtype")
    share = truth / (truth + timing.weight_bytes(model))
    print(f"Correct: {truth / 1e6:.1f} MB, {share:.0%} of the bytes one decode step reads at this length.")
