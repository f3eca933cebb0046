"""The verdicts of chapter 1, "Why decoding is slow": what the timed passes say about the kernels, the
roofline and depth, and what one speculative iteration must repay.

Each function returns the sentence the chapter prints or glues for its measurements;
tests/test_verdicts_ch1.py feeds each one measurements on both sides of its threshold and checks that the
sentence changes with them.
"""
from __future__ import annotations

from collections.abc import Mapping

from .margin import compare


def kernel_verdict(before: Mapping[int, float], after: Mapping[int, float], k: int = 8,
                   goal: float = 1.25) -> str:
    """Chapter 1: did prepacking make scoring k tokens nearly as cheap as one?
    before/after: t(k)/t(1) by k."""
    b, a = before[k], after[k]
    within = max(kk for kk in after if after[kk] <= goal) if any(v <= goal for v in after.values()) else None
    change = (f"prepacking cut the cost of scoring {k} tokens from {b:.2f}× to {a:.2f}× one token"
              if a < b else f"prepacking did not help here: scoring {k} tokens costs {a:.2f}× one token, "
                            f"against {b:.2f}× with F.linear")
    if a <= goal:
        return f"On this machine {change}: within {goal}×, as the memory-bound picture says."
    reach = (f"it stays within {goal}× up to k = {within}" if within and within > 1
             else f"no k > 1 stays within {goal}×")
    return (f"On this machine {change}, but {reach}: beyond that the matrix kernel runs out of arithmetic "
            "before the weights run out of bandwidth (a compute-bound small-batch kernel).")


def one_pass_verdict(one_pass: float, sequential: float, k: int = 8, flat: float = 1.25) -> str:
    """Chapter 1: one pass over k tokens against k one-token passes,
    both in units of t(1). Cheaper? Nearly free?"""
    if one_pass >= sequential:
        return (f"Here one pass over {k} tokens costs {one_pass:.2f}× one token, no less than {k} separate "
                f"passes ({sequential:.2f}×): on this device scoring them together gains nothing.")
    cheaper = "Far cheaper" if one_pass <= sequential / 2 else "Cheaper"
    free = f"and within {flat}× one token: nearly free" if one_pass <= flat else "but not free"
    return (f"{cheaper} than {k} separate passes, then ({one_pass:.2f}× against {sequential:.2f}× one "
            f"token), {free}.")


def adds_up_verdict(sequential: float, k: int = 8, tol: float = 0.2) -> str:
    """Chapter 1: do k sequential one-token passes cost k × t(1)? sequential: their time in units of t(1)."""
    sits = compare(sequential, k, tol)
    if sits == "level":
        return (f"the crosses sit on the dashed line: {k} sequential passes cost {sequential:.1f}× one, they "
                "add up")
    side = "below" if sits == "lower" else "above"
    return (f"the crosses sit {side} the dashed line: {k} sequential passes cost {sequential:.1f}× one, not "
            f"{k}×, because each pass's cost depends on what ran just before it (caches, clock speed, other "
            "work)")


def knee_verdict(cost_ratio: Mapping[int, float], knee: float, flat: float = 1.25) -> str:
    """Chapter 1: does t(k)/t(1) stay within `flat` up to the roofline's knee k*, or rise long before it?"""
    ks = sorted(cost_ratio)
    first_over = next((k for k in ks if cost_ratio[k] > flat), None)
    if first_over is None:
        reach = "past the predicted knee" if ks[-1] >= knee else "the largest k measured"
        return (f"The measured cost stays within {flat}× one token up to k = {ks[-1]}, {reach}: as flat as "
                "the roofline allows.")
    last_flat = max(k for k in ks if k < first_over)
    if first_over < knee / 2:
        return (f"The measured cost rises long before the predicted knee of k ≈ {knee:.0f}: at k = "
                f"{first_over} a pass already costs {cost_ratio[first_over]:.2f}× one token. The roofline is "
                "a bound, not a forecast; the next sections show where the time goes.")
    if first_over > 2 * knee:
        return (f"The measured cost stays within {flat}× one token up to k = {last_flat}, well past the "
                f"predicted knee of k ≈ {knee:.0f}: the square matmul we timed understates what this "
                "device's kernels reach.")
    return (f"The measured cost stays within {flat}× one token up to k = {last_flat}, close to the predicted "
            f"knee of k ≈ {knee:.0f}: here the roofline is a fair forecast.")


def roofline_verdict(intensity: float, ridge: float, pct_of_roof: float) -> str:
    """Chapter 1: where a one-token pass sits against the ridge point, and how much of the roof it reaches."""
    if intensity < ridge / 2:
        where = "well under the ridge, on the slanted, memory-bound part of the roof"
    elif intensity < ridge:
        where = "just under the ridge, at the end of the memory-bound part of the roof"
    else:
        where = "at or past the ridge: on this device even a one-token pass is bound by arithmetic"
    return (f"Decoding sits at an intensity of {intensity:.2f} FLOP/byte against a ridge at {ridge:.1f}: "
            f"{where}, where it reaches {pct_of_roof:.0f}% of what the roof allows.")


def climb_verdict(achieved_gain: float, roof_gain: float, k_max: int, pct_of_peak: float) -> str:
    """Chapter 1: from k = 1 to k_max, does achieved FLOP/s grow as fast as the roof says it could?
    Gains are ratios."""
    if achieved_gain < 0.8 * roof_gain:
        pace = f"but more slowly than the roof ({achieved_gain:.1f}× against {roof_gain:.1f}×)"
    elif achieved_gain > 1.25 * roof_gain:
        pace = (f"faster than the roof ({achieved_gain:.1f}× against {roof_gain:.1f}×), closing part of the "
                "gap a one-token pass leaves")
    else:
        pace = "about as fast as the roof"
    return (f"From k = 1 to k = {k_max} the measured passes climb {pace}, and the largest reaches "
            f"{pct_of_peak:.0f}% of the measured matmul peak.")


def kernel_share_verdict(product: float, whole: float, k: int = 8) -> str:
    """Chapter 1: is the rise of t(k)/t(1) in the matrix products
    (one product's ratio) or in the rest of the pass?"""
    rise_product, rise_whole = product - 1, whole - 1
    numbers = (f"a lone product with {k} rows costs {product:.2f}× one with a single row, the whole pass "
               f"{whole:.2f}×")
    if rise_whole <= 0.1:
        return f"Here {numbers}: neither rises much, so there is little to explain."
    side = compare(rise_product, rise_whole, 0.3)
    if side == "higher":
        return (f"Here {numbers}: the lone product rises even more than the whole pass, so the "
                "matrix-product kernel timed here handles a few rows worse than the kernels the model's own "
                "layers use.")
    if side == "level":
        return f"Here {numbers}: the two are close, so the rise lives in the matrix-product kernels."
    if rise_product <= 0.3 * rise_whole:
        return (f"Here {numbers}: the lone product stays nearly flat, so the rest of the pass accounts for "
                "most of the rise.")
    return f"Here {numbers}: the products explain part of the rise, the rest of the pass the remainder."


def depth_verdict(deep_s: float, wide_s: float, extra_ops: int, margin: float = 0.1) -> str:
    """Chapter 1: does a deep, narrow model's step cost more than a shallow,
    wide one's with the same weights?"""
    ratio = deep_s / wide_s
    side = compare(ratio, 1.0, margin)
    if side == "higher":
        per_op_us = (deep_s - wide_s) / extra_ops * 1e6
        return (f"the deep model's step costs {ratio:.1f}× the shallow one's, about {per_op_us:.0f} µs per "
                "extra operation: depth costs wall time even when the parameters are the same")
    if side == "lower":
        return (f"the deep model's step costs {ratio:.2f}× the shallow one's: on this device the wider "
                "matrices cost more than the extra operations, so depth does not show as a cost here")
    return (f"the two steps cost about the same ({ratio:.2f}×): on this device the cost per operation is too "
            "small to show at this size")


def break_even_verdict(round_cost: float, gamma: int) -> str:
    """Chapter 1: drafting γ tokens and verifying them costs round_cost plain steps;
    can an iteration repay it?"""
    if round_cost >= gamma + 1:
        return (f"That is at least the γ + 1 = {gamma + 1} tokens an iteration yields at best, so with γ = "
                f"{gamma} speculation cannot pay on this device, however good the draft.")
    return (f"So an iteration must keep more than {round_cost:.2f} tokens on average (it keeps between 1 and "
            f"{gamma + 1}) before it beats plain decoding.")
