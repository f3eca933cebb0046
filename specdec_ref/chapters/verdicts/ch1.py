"""The verdicts of chapter 1, "Why decoding is slow", and of its CPU kernels appendix: what the timed passes
say about the kernels, the roofline and depth, and what one speculative iteration must repay.

Each function returns the sentence the chapter prints or glues for its measurements;
tests/test_verdicts_ch1.py feeds each one measurements on both sides of its threshold and checks that the
sentence changes with them.
"""
from __future__ import annotations

from collections.abc import Mapping

from .margin import compare


def kernel_verdict(before: Mapping[int, float], after: Mapping[int, float], k: int = 8,
                   goal: float = 1.25, *, knee: float | None = None) -> str:
    """Appendix: did the loaders' CPU path (weights prepacked for oneDNN, projections fused, key heads read
    once) make scoring k tokens nearly as cheap as one, against Hugging Face's own layers?
    before/after: t(k)/t(1) by k; knee: the roofline's k* on this device, if measured (it says whether a
    rise past `goal` comes where the roofline expects the pass to turn compute-bound)."""
    b, a = before[k], after[k]
    within = max(kk for kk in after if after[kk] <= goal) if any(v <= goal for v in after.values()) else None
    change = (f"the loaders' CPU path cut the cost of scoring {k} tokens from {b:.2f}× to {a:.2f}× one token"
              if a < b else f"the loaders' CPU path did not help here: scoring {k} tokens costs {a:.2f}× one "
                            f"token, against {b:.2f}× with Hugging Face's layers")
    if a <= goal:
        return f"On this machine {change}: within {goal}×, as the memory-bound picture says."
    reach = (f"it stays within {goal}× up to k = {within}" if within and within > 1
             else f"no k > 1 stays within {goal}×")
    first_over = min(kk for kk in after if after[kk] > goal)
    if knee is None:
        why = "this measurement alone does not say whether arithmetic or the kernel runs short first"
    elif first_over < knee / 2:
        why = (f"that is long before the roofline's knee at k ≈ {knee:.0f}, so the device's measured "
               "arithmetic does not explain the rise: the kernel falls short of the roofline for so few rows")
    else:
        why = (f"that is near or past the roofline's knee at k ≈ {knee:.0f}, where the measured arithmetic "
               "runs short, as the roofline expects")
    return f"On this machine {change}, but {reach}: {why}."


def no_repack_note(here: str, device_type: str) -> str:
    """Appendix: why the prepacking comparison did not run (a fact about the loaders, not a measurement)."""
    if device_type == "cpu":
        return (f"On {here} oneDNN's prepacked linear is not available in this build of PyTorch, so the "
                "loaders left the weights as they were and there is no second kernel to compare.")
    return (f"On {here} nothing is repacked: the loaders prepack only on a CPU, so there is no second kernel "
            "to compare here. The lone-product timing above is this device's test of its kernels.")


def packing_logits_verdict(max_diff: float, max_logit: float, rel: float = 1e-4,
                           kernel: str = "the packed kernel") -> str:
    """Appendix: do two kernels (the prepacked and the plain model, or two attentions) give the same logits
    up to float rounding? max_diff: the largest absolute difference; max_logit: the largest absolute logit
    (the scale); kernel: how the sentence names the second one."""
    if max_logit <= 0:
        raise ValueError(f"max_logit must be > 0 (the logits' scale), got {max_logit}")
    size = (f"the largest logit difference between the two is {max_diff:.1e}, against logits up to "
            f"{max_logit:.1f}")
    if max_diff <= rel * max_logit:
        return f"On the same tokens {size}: the same logits up to float rounding."
    return (f"On the same tokens {size}, more than {rel:g} of their scale: more than float rounding, so "
            f"{kernel} computes something else here.")


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


def stream_share_verdict(pct: float) -> str:
    """Chapter 1: what it says that a decode step streams its weights at pct% of the copy benchmark's rate."""
    if pct <= 100:
        return ("Whatever separates the two goes to things other than streaming weights at full speed: "
                "per-operation overhead in Python and the framework, attention over the cache, "
                "normalisations, and matrix kernels that read their weights more slowly than a plain copy "
                "does.")
    return ("The step streams faster than the copy benchmark copies: a copy is counted as one read and one "
            "write of its bytes (the STREAM convention), but a CPU that fetches each line before writing it "
            "moves a third more than that, while a pass mostly reads. So the benchmark understates what this "
            "memory can stream, and the step is closer to its limit than the share says.")


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


def gpu_room_verdict(knees: Mapping[str, float], k_verify: int) -> str:
    """Chapter 1: do the spec sheets' knees (tokens per pass, by device) leave room for a verification pass
    of k_verify = γ + 1 tokens?"""
    if not knees:
        raise ValueError("knees is empty: pass {device: knee} for at least one spec sheet")
    low = min(knees, key=knees.get)
    short = [name for name, k in knees.items() if k < k_verify]
    if not short:
        return (f"Every spec sheet in the table puts the knee above a verification pass of γ + 1 = "
                f"{k_verify} tokens, the lowest ({low}) at {knees[low]:.0f}: "
                f"{knees[low] / k_verify:.0f}× the tokens that pass scores, room to spare.")
    return (f"On {', '.join(short)} the spec sheet puts the knee below γ + 1 = {k_verify} tokens "
            f"({knees[low]:.0f} on {low}): there a verification pass of {k_verify} tokens is already "
            "compute-bound.")


def decode_gap_verdict(intensity: float, ridge: float, device: str) -> str:
    """Chapter 1: where a decode step (intensity in FLOP/byte) sits against a device's ridge point."""
    if intensity <= 0 or ridge <= 0:
        raise ValueError(f"intensity and ridge must be > 0 (FLOP/byte), got {intensity} and {ridge}")
    if intensity < ridge:
        region = "far inside" if ridge >= 10 * intensity else "inside"
        return (f"At {intensity:.1f} FLOP per byte it sits {ridge / intensity:.0f}× below the {device}'s "
                f"ridge of {ridge:.0f}: {region} the memory-bound region.")
    return (f"At {intensity:.1f} FLOP per byte it sits at or past the {device}'s ridge of {ridge:.0f}: "
            "compute-bound.")


def gpu_depth_verdict(budget_us: float, per_op_us: float | None, sheet: str = "H100 SXM") -> str:
    """Appendix: can a deep draft's operations hide behind its weight traffic on a GPU?
    budget_us: the weights' streaming time on the spec sheet divided by the operations; per_op_us: the cost
    of one operation measured on a GPU, or None where this page did not run on one; sheet: whose bandwidth."""
    budget = (f"at the {sheet}'s spec-sheet bandwidth, the deep model's operations stay hidden behind its "
              f"weight traffic only if each costs under {budget_us:.2g} µs")
    if per_op_us is None:
        return (f"An expectation, not measured on this page: {budget}. Whether a GPU's cost per "
                "operation, its kernel launch included, stays under that is what this page measures when it "
                "runs on one.")
    if per_op_us > budget_us:
        return (f"Measured here: {budget}, and one costs {per_op_us:.1f} µs on this GPU, so the deep model "
                "is bound by its operations, neither by memory nor by arithmetic.")
    return (f"Measured here: {budget}, and one costs {per_op_us:.2f} µs on this GPU, so depth hides behind "
            "the weight traffic here.")


def knee_prediction_verdict(predicted: float, measured: int, largest: int) -> str:
    """Chapter 1: the reader's prediction of the largest k that costs at most 1.25× one token, against the
    measured one (`largest`: the largest k measured, where a flat curve stops telling)."""
    if not predicted > 0:
        raise ValueError(f"MY_PREDICTION must be a number of tokens > 0, got {predicted!r}")
    yours = f"You predicted k = {predicted:g}; the measured cost stayed within 1.25× one token"
    if measured >= largest and predicted >= largest:
        return (f"{yours} up to the largest k measured, {largest}: this grid cannot prove your "
                "prediction wrong.")
    if predicted > 2 * measured:
        return (f"{yours} only up to k = {measured}: the pass stopped being nearly free sooner than you "
                "expected.")
    if predicted < measured / 2:
        return f"{yours} up to k = {measured}: more tokens rode along nearly free than you expected."
    return f"{yours} up to k = {measured}: within a factor of 2 of your prediction."


def batch_knee_verdict(knee_1: Mapping[int, int], knee_b: Mapping[int, int], batch: int,
                       margin: float = 0.15) -> str:
    """Chapter 1, exercise 5: how much does a batch lower the knee in k (tokens per sequence), at a short and
    a long context? knee_1, knee_b: {context length: knee} for one sequence and for `batch` sequences."""
    short, long = min(knee_1), max(knee_1)
    if short == long or set(knee_1) != set(knee_b):
        raise ValueError("knee_1 and knee_b need the same two context lengths (a short and a long one), "
                         f"got {sorted(knee_1)} and {sorted(knee_b)}")
    fall = {n: knee_1[n] / knee_b[n] for n in (short, long)}
    floor = {n: " (at the ridge already with one token per sequence)" if knee_b[n] <= 1 else ""
             for n in (short, long)}
    numbers = (f"With {short} tokens of context a batch of {batch} lowers the knee from {knee_1[short]} to "
               f"{knee_b[short]} tokens per sequence{floor[short]}, {fall[short]:.1f}× lower; with {long}, "
               f"from {knee_1[long]} to {knee_b[long]}{floor[long]}, {fall[long]:.1f}× lower")
    side = compare(fall[long], fall[short], margin)
    if side == "lower":
        return (numbers + ": at the long context each sequence's own KV cache, which the batch does not "
                "share, keeps the batched pass memory-bound for more tokens per sequence.")
    if side == "level":
        return (numbers + f": even at {long} tokens the caches are too small next to the weights to change "
                "what batching takes away.")
    return numbers + ": at the long context the batch takes away even more of the headroom."


def compiled_verdict(eager: Mapping[int, float], compiled: Mapping[int, float], k: int = 8) -> str:
    """Appendix: what the ahead-of-time compiled pass (`models.aot`) does to the cost of a pass.
    eager, compiled: seconds of one pass over k new tokens, by k (both with k = 1 and `k`)."""
    one, many = compiled[1] / eager[1], compiled[k] / eager[1]
    ratio_c, ratio_e = compiled[k] / compiled[1], eager[k] / eager[1]
    if compiled[1] >= eager[1]:
        return (f"The compiled pass is no faster here: one token costs {one:.2f}× the eager pass's time, "
                "so the eager kernel stays the better path on this machine (SPECDEC_AOT=0 makes it the "
                "default).")
    lead = f"Compiled ahead of time, the pass scores one token in {one:.2f} of the eager pass's time"
    if compiled[k] < eager[1]:
        tokens = (f", and {k} tokens in {many:.2f} of the eager pass's one: fewer seconds for {k} tokens "
                  "than the eager kernel spends on a single one")
    else:
        tokens = f", and {k} tokens in {compiled[k] / eager[k]:.2f} of the eager pass's {k}"
    shape = {"higher": (f"Its own ratio t({k})/t(1) is steeper ({ratio_c:.2f} against {ratio_e:.2f}): the "
                        "one-row pass got cheaper and the extra rows did not, so a kernel is judged by its "
                        "seconds against the best t(1), not by its ratio."),
             "level": (f"Its own ratio t({k})/t(1) is about the eager one's ({ratio_c:.2f} against "
                       f"{ratio_e:.2f}): every k got cheaper alike."),
             "lower": (f"Its own ratio t({k})/t(1) is flatter too ({ratio_c:.2f} against {ratio_e:.2f}): the "
                       "extra rows got cheaper still.")}[compare(ratio_c, ratio_e, 0.05)]
    return f"{lead}{tokens}. {shape}"


def no_compiled_note(device_type: str, path: str | None = None, switched_off: bool = False,
                     exists: bool = False) -> str:
    """Appendix: why the compiled pass was not measured (a fact about this machine, not a measurement).
    exists: the package file is there, but the loader did not attach it (it measured slower than eager)."""
    if device_type != "cpu":
        return ("Compiled passes are built for CPUs; on a GPU the loops' cache='compiled' captures CUDA "
                "graphs instead (chapter 5 measures what launches cost), so there is nothing to compare "
                "here.")
    if switched_off:
        return ("Compiled passes are switched off in this run (SPECDEC_AOT=0, as in CI, which never waits "
                "for a compile), so only the eager pass was measured; unset it to measure a package this "
                "machine has.")
    if exists:
        return (f"This machine has a compiled pass for this dtype and thread count ({path}), but the loader "
                "left it off: on its first load it decoded no faster than the eager model here "
                "(`aot_use.first_load`; SPECDEC_AOT=1 attaches it anyway), so the loops run eager.")
    where = f" (it would be {path})" if path else ""
    return (f"This machine has no compiled pass for this dtype and thread count{where}: "
            "`python -m specdec_ref compile` builds one in a few minutes, once, and this section then "
            "measures it against the eager pass.")


def grouped_verdict(copied: Mapping[int, float], grouped: Mapping[int, float], k: int = 4,
                    margin: float = 0.02) -> str:
    """Appendix: what reading each key/value head once (`kernels.grouped_attention`) does to a pass over k
    rows. copied, grouped: t(k)/t(1) by k, with Hugging Face's copied heads and with the grouped read."""
    c, g = copied[k], grouped[k]
    side = compare(g, c, margin)
    if side == "lower":
        return (f"Reading each key head once cut the cost of scoring {k} tokens from {c:.2f}× to {g:.2f}× "
                "one token: the copies of the cache were a real part of what the extra rows cost here.")
    if side == "level":
        return (f"Reading each key head once made no difference beyond {margin:.0%} here ({c:.2f}× against "
                f"{g:.2f}× one token for {k} tokens): attention is a small part of this pass.")
    return (f"Reading each key head once made scoring {k} tokens dearer here ({g:.2f}× against {c:.2f}× one "
            "token with the copies): this build's attention kernel handles grouped heads worse than copies.")


def no_grouped_note(device_type: str, grouped_heads: bool) -> str:
    """Appendix: why the grouped-attention comparison did not run (a fact about the model and loaders)."""
    if device_type != "cpu":
        return ("The loaders give grouped attention to CPU models only, so on this device the target keeps "
                "Hugging Face's attention and there is nothing to compare.")
    if not grouped_heads:
        return ("This target has as many key/value heads as query heads, so there are no copies to avoid "
                "and nothing to compare.")
    return ("This target's attention is not Hugging Face's SDPA (or the loaders were told not to prepack "
            "it), so it keeps its own attention and there is nothing to compare.")


def fused_verdict(separate: Mapping[int, float], fused: Mapping[int, float], k: int = 4,
                  margin: float = 0.02) -> str:
    """Appendix: what one product for q, k, v (and one for gate, up) does to a pass
    (`kernels.fuse_projections`). separate, fused: seconds of a pass over each number of new tokens, each
    projection its own product and fused; one token and k tokens are read as absolute times, since fusing
    cuts a fixed cost per call."""
    def words(n: int) -> str:
        s, f, rows = separate[n], fused[n], "one token" if n == 1 else f"{n} tokens"
        side = compare(f, s, margin)
        if side == "level":
            return f"{rows}: about the same ({s * 1e3:.1f} and {f * 1e3:.1f} ms)"
        change = "faster" if side == "lower" else "slower"
        return f"{rows}: {abs(1 - f / s):.0%} {change} ({s * 1e3:.1f} → {f * 1e3:.1f} ms)"
    one, many = compare(fused[1], separate[1], margin), compare(fused[k], separate[k], margin)
    if one == many == "lower":
        tail = ("fewer calls, each with its fixed cost, made every pass cheaper; plain decoding gains "
                "as much as verification, so the speculative speedup, a ratio of the two, does not grow "
                "with it.")
    elif "higher" in (one, many):
        tail = ("here the wider products cost more than the calls they save, and `SPECDEC_FUSE=0` is the "
                "faster path.")
    else:
        tail = "here the calls saved are too few to show beside the rest of the pass."
    return f"Fusing the projections, a pass over {words(1)}; over {words(k)}: {tail}"


def no_fused_note(device_type: str, compiled: bool) -> str:
    """Appendix: why the fused-projection comparison did not run."""
    if device_type != "cpu":
        return ("The loaders fuse projections on CPU models only (one oneDNN product), so on this device "
                "each projection stays its own product and there is nothing to compare.")
    if compiled:
        return ("This target runs through its compiled pass, whose products were fixed when it was built, so "
                "switching the eager model's fusion would change nothing that is timed here.")
    return ("This target has no fused projections (SPECDEC_FUSE=0, SPECDEC_PREPACK=0, or no oneDNN "
            "prepacking in this build), so there is nothing to compare.")


def int4_verdict(loaded: Mapping[int, float], four_bit: Mapping[int, float], k: int = 4,
                 margin: float = 0.03) -> str:
    """Appendix: the target on the GGUF's own 4-bit weights (`models.int4`) against its bfloat16 weights.
    loaded, four_bit: seconds of a pass over each number of new tokens; read as absolute times at one token
    and at k, and as the ratio t(k)/t(1) each way."""
    one, many = compare(four_bit[1], loaded[1], margin), compare(four_bit[k], loaded[k], margin)
    ratio_loaded, ratio_four = loaded[k] / loaded[1], four_bit[k] / four_bit[1]
    times = (f"one token {loaded[1] * 1e3:.1f} → {four_bit[1] * 1e3:.1f} ms, {k} tokens "
             f"{loaded[k] * 1e3:.1f} → {four_bit[k] * 1e3:.1f} ms; t({k})/t(1) {ratio_loaded:.2f} → "
             f"{ratio_four:.2f}")
    if one == "lower":
        head = (f"Half a byte per weight instead of two made one token's pass "
                f"{1 - four_bit[1] / loaded[1]:.0%} faster ({times}).")
        if compare(ratio_four, ratio_loaded, margin) == "higher":
            return (f"{head} The extra tokens gained less than the first: this kernel's work grows with the "
                    "rows, so plain decoding speeds up more than verification, and the speculative speedup, "
                    "a ratio of the two, shrinks.")
        return f"{head} Verification gained as much, so the speculative speedup keeps its size."
    if one == "higher" or many == "higher":
        return (f"Here the 4-bit kernel is the slower one ({times}): unpacking the weights costs more than "
                "the bytes it saves on this CPU.")
    return f"Here the two are about the same ({times}): the weights' bytes are not what a pass waits for."


def int4_logits_verdict(err_four_bit: float, err_loaded: float, max_logit: float) -> str:
    """Appendix: is the 4-bit copy the same model? err_four_bit, err_loaded: the largest logit difference of
    each bfloat16 way from the float32 model's; max_logit: the logits' scale."""
    if max_logit <= 0:
        raise ValueError(f"max_logit must be > 0 (the logits' scale), got {max_logit}")
    size = (f"The float32 model's logits (up to {max_logit:.1f}) differ by at most {err_loaded:.2f} from the "
            f"bfloat16 weights' and {err_four_bit:.2f} from the 4-bit weights'")
    if err_four_bit <= 2 * err_loaded + 1e-3 * max_logit:
        return f"{size}: both are the same model to bfloat16's rounding."
    return f"{size}: more than bfloat16's rounding, so the 4-bit copy computes something else here."


def no_int4_note(device_type: str, native_bf16: bool, available: bool) -> str:
    """Appendix: why the 4-bit comparison did not run (a fact about the device and this torch)."""
    if device_type != "cpu":
        return ("The 4-bit copies are for a CPU (torch's CPU int4 kernel), so on this device there is "
                "nothing to compare.")
    if not available:
        return "This torch has no CPU int4 kernel, so there is nothing to compare."
    if native_bf16:
        return ("The 4-bit copies ride on the prepacked layers, and this target has none (SPECDEC_PREPACK=0 "
                "or no oneDNN in this build), so there is nothing to compare.")
    return ("This CPU does not multiply bfloat16 natively, and the CPU int4 kernel is fast for bfloat16 "
            "only (its float32 path took 4-6 times as long as the float32 weights), so there is nothing to "
            "compare.")


def after_pass_verdict(after_s: float, again_s: float, n_steps: int, pass_s: float,
                       margin: float = 0.5) -> str:
    """The CPU kernels appendix: do the loop's small steps cost more right after a target pass than run again
    at once? after_s and again_s: seconds of the same `n_steps` steps; pass_s: one target pass."""
    ratio = after_s / again_s
    share = after_s / pass_s
    if compare(ratio, 1.0, margin) == "higher":
        return (f"right after a target pass the same {n_steps} small steps took {after_s * 1e6:.0f} µs, "
                f"{ratio:.1f}× the {again_s * 1e6:.0f} µs they took straight after: the pass pushed what "
                "they touch out of the caches, so each step of the loop's bookkeeping between passes costs "
                f"several times what a microbenchmark of it says (these {n_steps} alone: {share:.1%} of a "
                "pass)")
    return (f"right after a target pass the same {n_steps} small steps took {after_s * 1e6:.0f} µs against "
            f"{again_s * 1e6:.0f} µs straight after ({ratio:.2f}×): on this device the pass leaves what "
            "they touch in the caches (a GPU streams the weights through its own memory), so the loop's "
            "bookkeeping costs what a microbenchmark of it says")
