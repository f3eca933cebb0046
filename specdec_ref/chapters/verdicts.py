"""The sentences that judge a measurement, as small functions of the numbers, so that the prose follows a live run.

Every function here returns the sentence a chapter prints (or glues) for its measurements; the tests feed
each one measurements on both sides of its threshold and check that the sentence changes with them.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence


def kernel_verdict(before: Mapping[int, float], after: Mapping[int, float], k: int = 8, goal: float = 1.25) -> str:
    """Chapter 1: did prepacking make scoring k tokens nearly as cheap as one? before/after: t(k)/t(1) by k."""
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
    """Chapter 1: one pass over k tokens against k one-token passes, both in units of t(1). Cheaper? Nearly free?"""
    if one_pass >= sequential:
        return (f"Here one pass over {k} tokens costs {one_pass:.2f}× one token, no less than {k} separate passes "
                f"({sequential:.2f}×): on this device scoring them together gains nothing.")
    cheaper = "Far cheaper" if one_pass <= sequential / 2 else "Cheaper"
    free = f"and within {flat}× one token: nearly free" if one_pass <= flat else "but not free"
    return f"{cheaper} than {k} separate passes, then ({one_pass:.2f}× against {sequential:.2f}× one token), {free}."


def adds_up_verdict(sequential: float, k: int = 8, tol: float = 0.2) -> str:
    """Chapter 1: do k sequential one-token passes cost k × t(1)? sequential: their time in units of t(1)."""
    if abs(sequential - k) <= tol * k:
        return f"the crosses sit on the dashed line: {k} sequential passes cost {sequential:.1f}× one, they add up"
    side = "below" if sequential < k else "above"
    return (f"the crosses sit {side} the dashed line: {k} sequential passes cost {sequential:.1f}× one, not {k}×, "
            "because each pass's cost depends on what ran just before it (caches, clock speed, other work)")


def knee_verdict(cost_ratio: Mapping[int, float], knee: float, flat: float = 1.25) -> str:
    """Chapter 1: does t(k)/t(1) stay within `flat` up to the roofline's knee k*, or rise long before it?"""
    ks = sorted(cost_ratio)
    first_over = next((k for k in ks if cost_ratio[k] > flat), None)
    if first_over is None:
        reach = "past the predicted knee" if ks[-1] >= knee else "the largest k measured"
        return (f"The measured cost stays within {flat}× one token up to k = {ks[-1]}, {reach}: as flat as the "
                "roofline allows.")
    last_flat = max(k for k in ks if k < first_over)
    if first_over < knee / 2:
        return (f"The measured cost rises long before the predicted knee of k ≈ {knee:.0f}: at k = {first_over} a "
                f"pass already costs {cost_ratio[first_over]:.2f}× one token. The roofline is a bound, not a "
                "forecast; the next sections show where the time goes.")
    if first_over > 2 * knee:
        return (f"The measured cost stays within {flat}× one token up to k = {last_flat}, well past the predicted "
                f"knee of k ≈ {knee:.0f}: the square matmul we timed understates what this device's kernels reach.")
    return (f"The measured cost stays within {flat}× one token up to k = {last_flat}, close to the predicted knee "
            f"of k ≈ {knee:.0f}: here the roofline is a fair forecast.")


def roofline_verdict(intensity: float, ridge: float, pct_of_roof: float) -> str:
    """Chapter 1: where a one-token pass sits against the ridge point, and how much of the roof it reaches."""
    if intensity < ridge / 2:
        where = "well under the ridge, on the slanted, memory-bound part of the roof"
    elif intensity < ridge:
        where = "just under the ridge, at the end of the memory-bound part of the roof"
    else:
        where = "at or past the ridge: on this device even a one-token pass is bound by arithmetic"
    return (f"Decoding sits at an intensity of {intensity:.2f} FLOP/byte against a ridge at {ridge:.1f}: {where}, "
            f"where it reaches {pct_of_roof:.0f}% of what the roof allows.")


def climb_verdict(achieved_gain: float, roof_gain: float, k_max: int, pct_of_peak: float) -> str:
    """Chapter 1: from k = 1 to k_max, does achieved FLOP/s grow as fast as the roof says it could? Gains are ratios."""
    if achieved_gain < 0.8 * roof_gain:
        pace = f"but more slowly than the roof ({achieved_gain:.1f}× against {roof_gain:.1f}×)"
    elif achieved_gain > 1.25 * roof_gain:
        pace = (f"faster than the roof ({achieved_gain:.1f}× against {roof_gain:.1f}×), closing part of the gap "
                "a one-token pass leaves")
    else:
        pace = "about as fast as the roof"
    return (f"From k = 1 to k = {k_max} the measured passes climb {pace}, and the largest reaches "
            f"{pct_of_peak:.0f}% of the measured matmul peak.")


def kernel_share_verdict(product: float, whole: float, k: int = 8) -> str:
    """Chapter 1: is the rise of t(k)/t(1) in the matrix products (one product's ratio) or in the rest of the pass?"""
    rise_product, rise_whole = product - 1, whole - 1
    numbers = f"a lone product with {k} rows costs {product:.2f}× one with a single row, the whole pass {whole:.2f}×"
    if rise_whole <= 0.1:
        return f"Here {numbers}: neither rises much, so there is little to explain."
    if rise_product > 1.3 * rise_whole:
        return (f"Here {numbers}: the lone product rises even more than the whole pass, so the matrix-product "
                "kernel timed here handles a few rows worse than the kernels the model's own layers use.")
    if rise_product >= 0.7 * rise_whole:
        return f"Here {numbers}: the two are close, so the rise lives in the matrix-product kernels."
    if rise_product <= 0.3 * rise_whole:
        return (f"Here {numbers}: the lone product stays nearly flat, so the rest of the pass accounts for most "
                "of the rise.")
    return f"Here {numbers}: the products explain part of the rise, the rest of the pass the remainder."


def depth_verdict(deep_s: float, wide_s: float, extra_ops: int, margin: float = 0.1) -> str:
    """Chapter 1: does a deep, narrow model's step cost more than a shallow, wide one's with the same weights?"""
    ratio = deep_s / wide_s
    if ratio > 1 + margin:
        per_op_us = (deep_s - wide_s) / extra_ops * 1e6
        return (f"the deep model's step costs {ratio:.1f}× the shallow one's, about {per_op_us:.0f} µs per extra "
                "operation: depth costs wall time even when the parameters are the same")
    if ratio < 1 - margin:
        return (f"the deep model's step costs {ratio:.2f}× the shallow one's: on this device the wider matrices cost "
                "more than the extra operations, so depth does not show as a cost here")
    return (f"the two steps cost about the same ({ratio:.2f}×): on this device the cost per operation is too small "
            "to show at this size")


def break_even_verdict(round_cost: float, gamma: int) -> str:
    """Chapter 1: drafting γ tokens and verifying them costs round_cost plain steps; can an iteration repay it?"""
    if round_cost >= gamma + 1:
        return (f"That is at least the γ + 1 = {gamma + 1} tokens an iteration yields at best, so with γ = {gamma} "
                "speculation cannot pay on this device, however good the draft.")
    return (f"So an iteration must keep more than {round_cost:.2f} tokens on average (it keeps between 1 and "
            f"{gamma + 1}) before it beats plain decoding.")


def greedy_match_verdict(same: bool, spec_calls: int, plain_calls: int) -> str:
    """Chapter 2: did greedy speculative decoding write greedy decoding's tokens, and with how many target passes?"""
    if same:
        return (f"The speculative run wrote the same tokens as greedy decoding with the target alone, using "
                f"{spec_calls} target passes instead of {plain_calls}.")
    return (f"The speculative run did not write the same tokens as greedy decoding with the target alone (it used "
            f"{spec_calls} target passes instead of {plain_calls}): a floating-point near-tie, the subject of chapter "
            "3's last section, is the usual cause.")


def fit_verdict(p_value: float, n: int, significance: float) -> str:
    """Chapter 3: does a chi-square test of the emitted tokens against the target's distribution reject?"""
    if p_value >= significance:
        return (f"The emitted tokens fit the target's distribution: chi-square p-value {p_value:.3f} on {n} draws, "
                f"above the rejection threshold of {significance:g}.")
    return (f"The test rejects: p-value {p_value:.2g} on {n} draws, below the threshold of {significance:g}. A correct "
            f"sampler does this about once in {1 / significance:.0f} runs; rerun with another SEED, and if it rejects "
            "again, the sampler is wrong.")


def configs_verdict(p_values: Mapping[str, float], n: int, significance: float) -> str:
    """Chapter 3: how many configurations of a goodness-of-fit test reject, with the smallest p-value."""
    rejected = [name for name, p in p_values.items() if p < significance]
    smallest = min(p_values.values())
    if not rejected:
        return (f"None of the {len(p_values)} configurations is rejected: the smallest p-value is {smallest:.3f}, "
                f"with {n} samples each.")
    return (f"{len(rejected)} of the {len(p_values)} configurations are rejected ({', '.join(rejected)}; smallest "
            f"p-value {smallest:.2g}, {n} samples each).")


def two_sample_verdict(p_value: float, n: int, significance: float) -> str:
    """Chapter 3: does the two-sample test tell speculative samples from the target's own samples?"""
    if p_value >= significance:
        return f"With {n} speculative samples, the two-sample test finds no difference (p = {p_value:.3f})."
    return (f"With {n} speculative samples, the two-sample test finds a difference (p = {p_value:.2g}, below "
            f"{significance:g}).")


def shift_verdict(p_value: float, n: int, significance: float) -> str:
    """Chapter 3: does the one-position test see the shift a broken sampler makes?"""
    if p_value < significance:
        return f"with {n} draws the test rejects it (p = {p_value:.2g})"
    return f"too small a shift for {n} draws to show (p = {p_value:.2g})"


def late_bug_verdict(p_long: float, p_short: float, significance: float, gamma_long: int, gamma_short: int) -> str:
    """Chapter 3: is a bug that acts only from the third draft token on caught at a long γ, missed at a short one?"""
    if p_long >= significance:
        return (f"At this sample size the late bug is not rejected even at γ = {gamma_long} (p = {p_long:.3f}): more "
                "samples are needed to see it.")
    if p_short >= significance:
        return (f"The late bug is rejected at γ = {gamma_long} (p = {p_long:.2g}) and passes at γ = {gamma_short} "
                f"(p = {p_short:.3f}), where it never runs: a test with too few draft tokens per iteration passes a "
                "sampler that is wrong.")
    return (f"The late bug is rejected at γ = {gamma_long} (p = {p_long:.2g}) and, by chance, at γ = {gamma_short} "
            f"too (p = {p_short:.2g}), where it never runs: a correct sampler is rejected about once in "
            f"{1 / significance:.0f} runs.")


def correct_sampler_summary(p_values: Mapping[str, float], significance: float) -> str:
    """Chapter 3: how many tests of our sampler pass at the significance level."""
    failed = [name for name, p in p_values.items() if p < significance]
    if not failed:
        return f"all {len(p_values)} tests of our sampler pass at significance level {significance:g}"
    return (f"{len(p_values) - len(failed)} of {len(p_values)} tests of our sampler pass at significance level "
            f"{significance:g} (rejected: {', '.join(failed)}; rerun with another seed before suspecting the sampler)")


def broken_sampler_summary(p_values: Mapping[str, float], significance: float) -> str:
    """Chapter 3: how many broken samplers the tests reject, naming any that slipped through."""
    missed = [name for name, p in p_values.items() if p >= significance]
    if not missed:
        return f"the same tests reject all {len(p_values)} broken samplers"
    return (f"the same tests reject {len(p_values) - len(missed)} of {len(p_values)} broken samplers (not rejected "
            f"at this sample size: {', '.join(missed)})")


def near_tie_verdict(dtype: str, n_below: int, flips: int) -> str:
    """Chapter 3: are any top-2 logit gaps smaller than the rounding difference between pass shapes?"""
    if n_below == 0 and flips == 0:
        return (f"In {dtype}, every top-2 gap here is larger than the rounding difference, so no position was close "
                "enough to flip.")
    return (f"In {dtype}, {n_below} position(s) have a top-2 gap below the rounding difference and the argmax "
            f"flipped {flips} time(s): at such positions greedy speculative and greedy plain decoding can part.")


def greedy_divergence_verdict(dtype: str, n_tokens: int, k_div: int | None, plain: str = "", spec: str = "",
                              gap: float = 0.0, rounding: float = 0.0) -> str:
    """Chapter 3: where do plain and speculative greedy texts part in a low-precision dtype, and is it a near-tie?"""
    if k_div is None:
        return f"In {dtype}, the two greedy texts are identical here ({n_tokens} tokens)."
    tie = (f"less than the largest rounding difference measured above ({rounding:.3g}): a near-tie"
           if gap < rounding else f"more than the largest rounding difference measured above ({rounding:.3g}), so "
           "this position rounds differently from the sequence we measured")
    return (f"In {dtype}, the two texts agree on {k_div} token(s), then plain decoding writes `{plain!r}` where "
            f"speculative decoding writes `{spec!r}`. Scored in one pass over the common prefix, the two candidates' "
            f"logits are {gap:.3g} apart, {tie}. Both texts are legitimate greedy outputs of the same model; they "
            "differ only in how the arithmetic was grouped.")


def tree_vs_chain_verdict(tree: float, chain: float, tree_label: str = "the tree", chain_label: str = "the chain",
                          margin: float = 0.03) -> str:
    """Compare two speedups (or τ values): which is ahead, or a tie within `margin` (relative)."""
    if abs(tree - chain) <= margin * max(tree, chain):
        return f"{tree_label} and {chain_label} are level here ({tree:.2f} vs {chain:.2f})"
    better, worse = (tree_label, chain_label) if tree > chain else (chain_label, tree_label)
    return f"{better} is ahead of {worse} here ({max(tree, chain):.2f} vs {min(tree, chain):.2f})"


def overhead_verdict(ours_ms: float, hf_ms: float) -> str:
    """Our loop's overhead per target pass against Hugging Face assisted generation's."""
    if ours_ms <= hf_ms:
        return f"our loop spends {ours_ms:.1f} ms per target pass outside the models, at most Hugging Face's {hf_ms:.1f} ms"
    return (f"our loop spends {ours_ms:.1f} ms per target pass outside the models, more than Hugging Face's "
            f"{hf_ms:.1f} ms")


def adaptive_verdict(best_fixed: float, adaptive: Mapping[str, float], margin: float = 0.03) -> str:
    """Chapter 4: did any adaptive draft length beat the best fixed γ on this run? Speedups over plain decoding."""
    name, best = max(adaptive.items(), key=lambda kv: kv[1])
    if best > best_fixed * (1 + margin):
        return f"here the {name} beat the best fixed γ, {best:.2f}× against {best_fixed:.2f}×"
    if best < best_fixed * (1 - margin):
        return f"here no adaptive rule beat the best fixed γ: the best, the {name}, gave {best:.2f}× against {best_fixed:.2f}×"
    return f"here the {name} and the best fixed γ are level, {best:.2f}× against {best_fixed:.2f}×"


# --- Chapter 4, "How much faster?" -----------------------------------------------------------------------------


def _lead(curves: Mapping[str, Sequence[float]]) -> str:
    """'X steps in a, Y in b and Z in c' for the last point of each curve."""
    parts = [f"{v[-1]:.2f} one-token steps in {label}" if i == 0 else f"{v[-1]:.2f} in {label}"
             for i, (label, v) in enumerate(curves.items())]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def verify_cost_verdict(curves: Mapping[str, Sequence[float]], device: str, *, skipped: Sequence[str] = (),
                        unpacked: str = "float32, F.linear", packed: str = "float32", flat: float = 1.25,
                        margin: float = 0.05) -> str:
    """Chapter 4: what scoring k tokens costs on this device, t(k)/t(1) by label, curves[label][k - 1] = t(k)/t(1).

    Says whether the passes stay within `flat`× of one token (memory-bound) or from which k they do not, whether
    prepacking mattered (the `unpacked` curve against the `packed` one, CPU only), and, on an accelerator, that
    only the target as loaded was timed. `skipped`: labels whose copy was too big to make.
    """
    kept = {label: v for label, v in curves.items() if label != unpacked}
    k_max = max(len(v) for v in kept.values())
    where = {"cpu": "this CPU", "cuda": "this GPU"}.get(device, f"this {device} device")
    out = [f"Scoring {k_max} tokens costs {_lead(kept)} on {where}."]
    steep = {label: next(k for k, r in enumerate(v, start=1) if r > flat) for label, v in kept.items()
             if any(r > flat for r in v)}
    if not steep:
        out.append(f"{'Every curve stays' if len(kept) > 1 else 'It stays'} within {flat}× of one token up to "
                   f"k = {k_max}: here the verification pass "
                   "is nearly as cheap as a one-token step, as a memory-bound pass should be.")
    else:
        where_k = " and ".join(f"at k = {k} in {label}" for label, k in steep.items())
        out.append(f"The cost passes {flat}× one token {where_k}: from there on every extra token adds real time, "
                   "and the textbook's free verification pass does not hold"
                   + (" in that precision." if len(kept) > 1 and len(steep) == 1 else "."))
    if unpacked in curves and packed in curves:
        u, p = curves[unpacked][-1], curves[packed][-1]
        if u > p * (1 + margin):
            out.append(f"With plain `F.linear`, which lays the weights out again on every call, the same {packed} "
                       f"pass costs {u:.2f} steps instead of {p:.2f}: the kernel, not the physics, made that "
                       "difference.")
        elif u < p * (1 - margin):
            out.append(f"With plain `F.linear` the same {packed} pass costs {u:.2f} steps, less than the "
                       f"{p:.2f} of the prepacked weights: here prepacking did not pay.")
        else:
            out.append(f"With plain `F.linear` the same {packed} pass costs {u:.2f} steps, level with the "
                       f"prepacked weights' {p:.2f}: here the kernel made no difference.")
    if device != "cpu":
        out.append("Only the target as loaded was timed: on an accelerator no float32 copy is made (it would "
                   "take twice the memory of a 16-bit model for one more curve), and the `F.linear` comparison, "
                   "a CPU kernel matter, is skipped.")
    if skipped:
        out.append(f"Skipped, too big to copy on this machine: {', '.join(skipped)}.")
    return " ".join(out)


def precision_verdict(step_ms: Mapping[str, float], curves: Mapping[str, Sequence[float]], native_bf16: bool | None,
                      margin: float = 0.05) -> str:
    """Chapter 4: which precision is faster here, for one token and for the longest pass timed.

    step_ms: t(1) in milliseconds by dtype name; curves: t(k)/t(1) by dtype name (k = 1, 2, ...), so a pass over
    k tokens takes step_ms * curves[k - 1]. native_bf16: whether the CPU has bfloat16 instructions (None on an
    accelerator, or when unknown).
    """
    if not ("float32" in step_ms and "bfloat16" in step_ms):  # one precision timed: nothing to compare
        return " ".join(f"One step in {label} took {ms:.1f} ms." for label, ms in step_ms.items()
                        if "F.linear" not in label)

    def faster(f32: float, bf16: float) -> str:
        return ("bfloat16" if bf16 < f32 * (1 - margin) else "float32" if bf16 > f32 * (1 + margin) else "neither")

    k = min(len(curves["float32"]), len(curves["bfloat16"]))
    one = (step_ms["float32"], step_ms["bfloat16"])
    many = (one[0] * curves["float32"][k - 1], one[1] * curves["bfloat16"][k - 1])
    out = [f"One step took {one[1]:.1f} ms in bfloat16 against {one[0]:.1f} ms in float32, and a pass over {k} "
           f"tokens {many[1]:.1f} ms against {many[0]:.1f} ms:"]
    w1, wk = faster(*one), faster(*many)
    if w1 == wk == "neither":
        out.append("the two precisions are level on this machine.")
    elif w1 == wk:
        out.append(f"{w1} is the faster precision on this machine, for one token and for {k}.")
    else:
        say = lambda w: "neither is faster" if w == "neither" else f"{w} is faster"  # noqa: E731
        out.append(f"for one token {say(w1)}, for {k} tokens {say(wk)}.")
    if native_bf16:
        out.append("This CPU has native bfloat16 instructions, so bfloat16 products run directly on weights half "
                   "the size.")
    elif native_bf16 is False:
        out.append("This CPU has no native bfloat16 instructions: its bfloat16 products convert the weights to "
                   "float32 as they go.")
    return " ".join(out)


def prediction_verdict(err_generalized: float, err_textbook: float, calibration_gamma: int,
                       tolerance: float = 0.10, margin: float = 0.02) -> str:
    """Chapter 4: how far each formula's prediction lies from the measured speedup (largest relative errors).

    The sentence always says that the overhead h was fitted at one γ and reused for all, because a tolerance
    met with h fitted at every γ would be a tautology.
    """
    out = (f"the textbook formula is off by up to {err_textbook:.0%} and the generalised one by up to "
           f"{err_generalized:.0%}")
    if err_generalized < err_textbook - margin:
        out += ", so measuring the costs brought the prediction closer to the clock"
    elif err_generalized > err_textbook + margin:
        out += ", so here measuring the costs did not bring the prediction closer to the clock"
    else:
        out += ", so here the two are about as close to the clock"
    within = "stays within" if err_generalized <= tolerance else "misses"
    return (f"{out}; the generalised formula {within} a {tolerance:.0%} tolerance, with the overhead h fitted once, "
            f"at γ = {calibration_gamma}, and reused for every γ")


def prediction_gap_verdict(gammas: Sequence[int], textbook: Sequence[float], generalized: Sequence[float],
                           margin: float = 0.03) -> str:
    """Chapter 4: does the textbook prediction run away from the generalised one as γ grows?

    The gap is textbook / generalised - 1 (it does not depend on α: the two share their numerator).
    """
    gaps = [t / g - 1 for t, g in zip(textbook, generalized)]
    first, last = gaps[0], gaps[-1]
    if max(abs(x) for x in gaps) <= margin:
        return (f"here the two predictions stay within {margin:.0%} of each other at every γ: the extra tokens "
                "and the loop cost little on this machine")
    if last > first + margin:
        return (f"here they are not free: the gap between the two predictions widens with γ, from {first:.0%} at "
                f"γ = {gammas[0]} to {last:.0%} at γ = {gammas[-1]}")
    return (f"here the gap between the two predictions does not widen with γ: {first:+.0%} at γ = {gammas[0]}, "
            f"{last:+.0%} at γ = {gammas[-1]}")


def best_gamma_shift_verdict(alpha: float, c: float, slope: float, gamma_max: int = 16) -> str:
    """Chapter 4: how a verify cost rising as t(k)/t(1) = 1 + slope (k - 1) moves the best γ of the textbook."""
    from ..lab.speedup import best_gamma, linear_verify_costs
    g0, s0 = best_gamma(alpha, c, gamma_max=gamma_max)
    g1, s1 = best_gamma(alpha, c, linear_verify_costs(slope, gamma_max + 1), gamma_max=gamma_max)
    head = (f"with α = {alpha:g} and c = {c:g} the textbook's best γ is {g0} ({s0:.2f}×); a slope of {slope:.2f}, "
            "this machine's,")
    if g1 < g0:
        return f"{head} pulls it down to γ = {g1} ({s1:.2f}×)"
    if g1 > g0:
        return f"{head} moves it up to γ = {g1} ({s1:.2f}×)"
    return f"{head} leaves it at γ = {g1} ({s1:.2f}×)"


def position_verdict(accepted: Sequence[int], examined: Sequence[int], z: float = 2.0) -> str:
    """Chapter 4: is draft position 1 accepted as often as the later positions, given they were reached?

    accepted[i], examined[i]: counts at position i + 1 (`diagnose.position_acceptance`). A difference beyond
    z binomial standard errors says the positions are not alike, so the i.i.d. model does not hold.
    """
    n1, n2 = examined[0], sum(examined[1:])
    if n1 == 0 or n2 == 0:
        return "Too few iterations reached position 2 to compare the positions."
    p1, p2 = accepted[0] / n1, sum(accepted[1:]) / n2
    se = (p1 * (1 - p1) / n1 + p2 * (1 - p2) / n2) ** 0.5
    if abs(p1 - p2) <= z * se:
        return (f"The difference, {p1 - p2:+.2f}, is within {z:g} standard errors ({se:.2f}): on this run the "
                "positions look alike, as the i.i.d. model assumes.")
    if p1 > p2:
        return (f"The difference, {p1 - p2:+.2f}, is beyond {z:g} standard errors ({se:.2f}): the positions are not "
                "alike, and the first is the easier one. The draft's first guess follows the target's own last "
                "token; every further guess builds on guesses, so its errors compound.")
    return (f"The difference, {p1 - p2:+.2f}, is beyond {z:g} standard errors ({se:.2f}): the positions are not "
            "alike, and the later ones, once reached, are the easier ones. Acceptances cluster: on a predictable "
            "stretch (a list, a stock phrase) the draft tends to stay right, so reaching position i is itself "
            "evidence that position i is easy.")


def geometric_fit_verdict(accepted: Sequence[int], gamma: int, alpha: float, z: float = 2.0) -> str:
    """Chapter 4: does the capped geometric law with one α fit the accepted lengths of iterations that drafted γ?

    Tests the tail, P(n = γ) against α^γ, and the mean tokens per iteration, E[n + 1] against
    (1 - α^(γ+1)) / (1 - α), each against z standard errors.
    """
    n = len(accepted)
    if n == 0:
        return f"No iteration drafted all {gamma} tokens, so there is no histogram to compare."
    tail, q = sum(a == gamma for a in accepted) / n, alpha ** gamma
    se_tail = max(q * (1 - q) / n, 1e-12) ** 0.5
    if abs(tail - q) <= z * se_tail:
        out = (f"The capped geometric law fits the histogram's tail: all {gamma} draft tokens were accepted in "
               f"{tail:.0%} of iterations, against α^γ = {q:.0%}, within {z:g} standard errors")
    else:
        word = "understates" if tail > q else "overstates"
        out = (f"The capped geometric law {word} the histogram's tail: all {gamma} draft tokens were accepted in "
               f"{tail:.0%} of iterations, against α^γ = {q:.0%}")
    mean = sum(a + 1 for a in accepted) / n
    want = gamma + 1.0 if alpha == 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)
    sd = (sum((a + 1 - mean) ** 2 for a in accepted) / max(n - 1, 1)) ** 0.5
    if abs(mean - want) <= z * max(sd / n ** 0.5, 1e-12):
        return (f"{out}; and a single α predicts the tokens per iteration within noise ({mean:.2f} measured, "
                f"{want:.2f} predicted).")
    word = "understates" if mean > want else "overstates"
    return f"{out}; and a single α {word} the tokens per iteration ({mean:.2f} measured, {want:.2f} predicted)."


def two_x_verdict(alpha: float, alpha_needed: float | None, c: float, goal: float = 2.0,
                  label: str = "greedy") -> str:
    """Chapter 4: does this pair's α reach the α that `goal`× needs at its c (textbook formula)?

    alpha_needed: the smallest α whose best textbook speedup reaches goal (speed.alpha_for_speedup), None if none.
    """
    if alpha_needed is None:
        return (f"At this pair's c = {c:.3f} no α below 1 gives {goal:g}×, even by the textbook formula: the draft "
                "costs too much for any acceptance to make up for it.")
    verdict = "clears it" if alpha >= alpha_needed else "falls short of it"
    return (f"At this pair's c = {c:.3f}, {goal:g}× would need α ≥ {alpha_needed:.2f} by the textbook formula; "
            f"this pair's α = {alpha:.2f} ({label}) {verdict}.")


# --- Chapter 5, "Choosing a draft" --------------------------------------------------------------------------------

def _listed(items: Sequence[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def draft_limit_verdict(name: str, alpha: float, c: float) -> str:
    """Chapter 5: what holds a draft back. Even a free draft gives at most 1/(1 − α), even a perfect one at most 1/c;
    the lower of the two ceilings names the limit (agreement if 1 − α > c, else cost)."""
    if 1 - alpha > c:
        return f"the {name} is held back by its agreement (1 − α = {1 - alpha:.2f} exceeds c = {c:.3f})"
    return f"the {name} is held back by its cost (c = {c:.3f} exceeds 1 − α = {1 - alpha:.2f})"


def int8_draft_verdict(alpha: float, c: float) -> str:
    """Chapter 5: what the int8 copy's step saves against the float32 target here, and whether α stayed below 1."""
    cost = (f"its step costs {c:.2f} of a float32 target step on this machine" if c < 1 else
            f"its step costs {c:.2f}× a float32 target step on this machine: int8 saves no time here")
    agree = (f"dynamic quantisation, which also rounds the activations, keeps α at {alpha:.3f}, below 1" if alpha < 1
             else "its α reached 1: rounding the activations changed no greedy choice on these prompts")
    return f"{cost}; {agree}"


def self_draft_verdict(measured: float, margin: float = 0.03) -> str:
    """Chapter 5: the target drafting for itself (α = 1 and c = 1 in principle): no gain, or timing noise?"""
    if measured <= 1 + margin:
        return f"measured {measured:.2f}×: no gain, as α = c predicts"
    return (f"measured {measured:.2f}×, above 1, which α = c does not allow: read it as the timing noise of a short "
            "run")


def measured_vs_predicted_verdict(pairs: Mapping[str, tuple[float, float]], margin: float = 0.03) -> str:
    """Chapter 5: does each draft's measured speedup sit below, level with (within `margin`, relative) or above the
    predicted one? pairs: draft name -> (predicted, measured)."""
    below = [n for n, (p, m) in pairs.items() if m < p * (1 - margin)]
    above = [n for n, (p, m) in pairs.items() if m > p * (1 + margin)]
    level = [n for n in pairs if n not in below and n not in above]
    if len(below) == len(pairs):
        return "The measured speedup sits below the predicted one for every draft."
    if len(above) == len(pairs):
        return "The measured speedup sits above the predicted one for every draft."
    parts = [f"below the prediction for {_listed(below)}" if below else "",
             f"within {margin:.0%} of it for {_listed(level)}" if level else "",
             f"above it for {_listed(above)}" if above else ""]
    return "The measured speedup sits " + "; ".join(p for p in parts if p) + "."


def loop_alpha_verdict(pairs: Mapping[str, tuple[float, float]], margin: float = 0.02) -> str:
    """Chapter 5: the loop's α (`Stats.alpha`, every draft position) against the teacher-forced α at position 1.

    pairs: draft name -> (teacher-forced α, in-loop α); a NaN in-loop α (nothing drafted in the loop) is skipped.
    """
    pairs = {n: (t, l) for n, (t, l) in pairs.items() if l == l}
    if not pairs:
        return "No draft proposed anything in the timed runs, so there is no α in the loop to compare."
    below = [n for n, (t, l) in pairs.items() if l < t - margin]
    above = [n for n, (t, l) in pairs.items() if l > t + margin]
    level = [n for n in pairs if n not in below and n not in above]
    parts = [f"below the teacher-forced value for {_listed(below)}" if below else "",
             f"within {margin} of it for {_listed(level)}" if level else "",
             f"above it for {_listed(above)}" if above else ""]
    return "In the loop, α came out " + "; ".join(p for p in parts if p) + "."


def task_winner_verdict(fastest: Mapping[str, str]) -> str:
    """Chapter 5: did one draft win every task, or did the winner change with the task? fastest: task -> draft."""
    by_draft: dict[str, list[str]] = {}
    for task, draft in fastest.items():
        by_draft.setdefault(draft, []).append(task)
    if len(by_draft) == 1:
        draft, tasks = next(iter(by_draft.items()))
        return f"Here one draft won every task: {draft} was the fastest on all {len(tasks)}."
    return ("No single draft wins everywhere: the fastest draft was "
            + "; ".join(f"{d} on {_listed(ts)}" for d, ts in by_draft.items()) + ".")


def lookup_task_verdict(lookup_speed: Mapping[str, float], margin: float = 0.03) -> str:
    """Chapter 5: on which tasks prompt lookup sped decoding up (speedup over plain > 1 + margin), on which not."""
    gain = [t for t, s in lookup_speed.items() if s > 1 + margin]
    rest = [t for t in lookup_speed if t not in gain]

    def fmt(tasks):
        return _listed([f"{t} ({lookup_speed[t]:.2f}×)" for t in tasks])

    if not rest:
        return f"prompt lookup sped decoding up on every task: {fmt(gain)}"
    if not gain:
        return f"prompt lookup sped decoding up on no task here: {fmt(rest)}"
    return f"prompt lookup sped decoding up on {fmt(gain)}, but not on {fmt(rest)}"


def lm_copy_verdict(speed_rewrite: float, alpha_rewrite: float, alpha_open: float, margin: float = 0.03) -> str:
    """Chapter 5: did the distilled LM, trained on answers that seldom copy their prompt, agree with the target more
    on the rewrite task (whose answer copies its prompt) than on open questions? speed_rewrite: its measured speedup
    on the rewrite; alpha_rewrite, alpha_open: its teacher-forced α₁ on the two tasks (`margin`: absolute)."""
    head = f"The distilled LM gave {speed_rewrite:.2f}× on the rewrite"
    alphas = f"(α₁ {alpha_rewrite:.2f} against {alpha_open:.2f})"
    if alpha_rewrite > alpha_open + margin:
        return (f"{head}, and agreed with the target more often there than on open questions {alphas}: training on "
                "answers that seldom copy their prompt did not keep it from agreeing where the answer copies.")
    if alpha_rewrite < alpha_open - margin:
        return (f"{head}, and agreed with the target less often there than on open questions {alphas}: it was "
                "trained on answers that seldom copy their prompt, and did not learn to copy.")
    return (f"{head}, and agreed with the target about as often there as on open questions {alphas}: it was trained "
            "on answers that seldom copy their prompt, so the copying gained it nothing.")


def depth_vs_width_verdict(cpu_ratio: float, gpu_ratio: float, gpu_measured: bool, margin: float = 0.05) -> str:
    """Chapter 5: did sixteen times the layers (same weights) cost more step time, on this CPU and on a GPU?
    Ratios are deep step / shallow step; gpu_measured says whether the GPU figure was measured or predicted."""
    how = "measured" if gpu_measured else "predicted"
    deeper_cpu, deeper_gpu = cpu_ratio > 1 + margin, gpu_ratio > 1 + margin
    if deeper_cpu and deeper_gpu:
        more = ", more there" if gpu_ratio > cpu_ratio else ""
        return (f"Depth costs more than width on this CPU ({cpu_ratio:.1f}×) and on a GPU ({gpu_ratio:.1f}×, {how}"
                f"{more}): prefer shallow and wide drafts.")
    if deeper_gpu:
        return (f"Depth cost about as much as width on this CPU ({cpu_ratio:.2f}×) but more on a GPU "
                f"({gpu_ratio:.1f}×, {how}): on a GPU, prefer shallow and wide drafts.")
    if deeper_cpu:
        return (f"Depth costs more than width on this CPU ({cpu_ratio:.1f}×) but not on a GPU ({gpu_ratio:.2f}×, "
                f"{how}): there the weights, not the launches, set the step time.")
    return (f"Here depth cost no more than width ({cpu_ratio:.2f}× on this CPU, {gpu_ratio:.2f}× on a GPU, {how}): "
            "the layer count does not set these models' step time.")


def training_verdict(first: float, last: float, margin: float = 0.01) -> str:
    """Chapter 5: did validation agreement rise over training? -> 'rose from a to b', 'fell ...' or 'stayed ...'."""
    if last > first + margin:
        return f"rose from {first:.2f} to {last:.2f}"
    if last < first - margin:
        return f"fell from {first:.2f} to {last:.2f}"
    return f"stayed near {first:.2f} (ending at {last:.2f})"


def loss_verdict(kl_alpha: float, tv_alpha: float, steps: int, tol: float = 0.03) -> str:
    """Chapter 5: which distillation loss trained to the higher held-out α at T = 1, or a tie within `tol`."""
    if abs(kl_alpha - tv_alpha) < tol:
        return (f"At this scale the two losses end within {tol} of each other ({kl_alpha:.3f} and {tv_alpha:.3f}): "
                "the point here is the mechanics.")
    better = "KL" if kl_alpha > tv_alpha else "TV"
    return (f"Here {better} trained to the higher α at T = 1 in {steps} steps ({kl_alpha:.3f} with KL, "
            f"{tv_alpha:.3f} with TV).")


# --- Chapter 6, "In production" ---------------------------------------------------------------------------------

def confidence_stop_verdict(lengths: Sequence[int], caps: Sequence[int], hf_passes: float | None = None,
                            short: int = 2) -> str:
    """Chapter 6: how long were the drafts under Hugging Face's confidence stop? lengths[i] tokens drafted in
    iteration i, caps[i] the most it could have drafted; hf_passes: Hugging Face's own draft passes per target pass."""
    n = len(lengths)
    if n == 0:
        return "No iteration could draft here, so the drafts' lengths were not measured."
    n_short = sum(1 for g in lengths if g <= short)
    n_stopped = sum(1 for g, cap in zip(lengths, caps) if g < cap)
    mean = sum(lengths) / n
    hf = (f"; Hugging Face's own run made {hf_passes:.1f} draft passes per target pass, its mean draft length"
          if hf_passes is not None else "")
    measured = (f"Our loop with the same rule drafted {mean:.1f} tokens per iteration on average (at most "
                f"{max(caps)}); the confidence stop cut {n_stopped} of {n} drafts short, and {n_short} of {n} "
                f"({n_short / n:.0%}) ended after {short} tokens or fewer{hf}.")
    if n_short > n / 2:
        return measured + f" So here the confidence stop ends most drafts after {short} tokens or fewer."
    return measured + " So here most drafts ran longer than that: the draft was often sure of itself."


def greedy_agreement_verdict(n_same: int, n_runs: int, n_splits: int, n_near_ties: int) -> str:
    """Chapter 6: do the greedy runs reproduce plain decoding? n_splits runs part somewhere, n_near_ties of them at
    a near-tie (a logit gap within the rounding difference of the two ways of scoring)."""
    if n_same == n_runs:
        return f"all {n_runs} greedy runs reproduce plain decoding token for token"
    if n_near_ties == n_splits:
        return (f"{n_same} of {n_runs} greedy runs reproduce plain decoding token for token, and the others part only "
                "at near-ties that rounding explains")
    return (f"{n_same} of {n_runs} greedy runs reproduce plain decoding token for token, and {n_splits - n_near_ties} "
            "part where rounding cannot explain it: suspect a bug")


def distribution_verdict(correct: Mapping[str, float], broken: float, level: float) -> str:
    """Chapter 6: the T > 0 tests. correct: p-values of the tests on correct samplers; broken: p-value of the test
    that should catch the broken sampler. Rejection means p < level."""
    rejected = [name for name, p in correct.items() if p < level]
    if rejected:
        first = f"at level {level} the tests reject {', '.join(rejected)} (smallest p = {min(correct.values()):.3g})"
    else:
        first = (f"at level {level} none of the {len(correct)} tests finds a difference between the correct samplers "
                 f"and the exact distribution (smallest p = {min(correct.values()):.3g})")
    second = (f"the same test rejects the broken sampler (p = {broken:.3g})" if broken < level else
              f"the same test does not reject the broken sampler in this run (p = {broken:.3g}): more samples needed")
    return f"{first}, and {second}"


def broken_sampler_caught_verdict(p_value: float, level: float) -> str:
    """Chapter 6: does the goodness-of-fit test reject the broken sampler (rejection: p < level)? Completes the
    sentence "so the test ..."."""
    if p_value < level:
        return f"rejects it at level {level}"
    return f"does not reject it in this run at level {level} (its power against this sampler is computed above)"


def lookup_verdict(rewrite: float, free_text: float, margin: float = 0.05) -> str:
    """Chapter 6: prompt lookup's speedup over plain decoding on a rewrite task and on free text (ratios)."""
    paid = (f"On the rewrite task prompt lookup ran at {rewrite:.2f}× plain decoding" +
            (": it paid." if rewrite > 1 + margin else ": it did not pay here." if rewrite < 1 - margin else
             ", level with it."))
    if abs(free_text - 1) <= margin:
        rest = (f" On free text it ran at {free_text:.2f}×, within {margin:.0%} of plain decoding: where it finds "
                "little to copy it costs almost nothing extra, a safe default for editing workloads.")
    elif free_text < 1:
        rest = (f" On free text it ran at {free_text:.2f}×, a cost of {1 - free_text:.0%}: here it is not free where "
                "it finds little to copy (every guess it makes, right or wrong, is a token the target must score).")
    else:
        rest = (f" On free text it ran at {free_text:.2f}×: even there it found stretches to copy.")
    return paid + rest


def second_candidates_verdict(tree_accepted: float, chain_accepted: float, margin: float = 0.005) -> str:
    """Chapter 6: did a static tree's extra candidates add accepted draft tokens per target pass, against the chain
    of the tree's depth (the draft's first choices alone)? Both are means per target pass; `margin` keeps a
    difference that two decimals would not show from counting as one."""
    both = f"({tree_accepted:.2f} against {chain_accepted:.2f} for the chain of the tree's depth)"
    if tree_accepted > chain_accepted + margin:
        return f"Here the extra candidates helped: the tree accepted more draft tokens per target pass {both}."
    if tree_accepted < chain_accepted - margin:
        return f"On this prompt they did not: the tree accepted fewer draft tokens per target pass {both}."
    return f"On this prompt they did not: the tree accepted as many draft tokens per target pass {both}."


def roofline_turn_verdict(measured: int | None, roofline: int | None, largest: int, rise: float = 1.25) -> str:
    """Chapter 6: where does a pass start to cost more than `rise`× one token (measured, tokens B·k), against where
    the roofline calls it compute-bound? None: not on the grid (up to `largest` tokens)."""
    seen = (f"The measured curve passes {rise}× one token at B·k = {measured} tokens" if measured is not None else
            f"The measured curve stays within {rise}× one token up to B·k = {largest} tokens")
    if measured is not None and (roofline is None or measured < roofline):
        where = f"the roofline's {roofline}" if roofline is not None else f"the grid's {largest}"
        return (seen + f", before {where}: as chapter 1 found, small matrix products on this machine reach neither "
                "roof, so the verify pass of a batch stops being free sooner than the roofline says.")
    if measured is None:
        return seen + ": on this grid a batch's verify pass stays nearly free, as the roofline says."
    return (seen + f", at or after the roofline's {roofline}: the roofline predicts where the verify pass stops "
            "being free.")


def breakeven_verdict(speedups: Mapping[int, float]) -> str:
    """Chapter 6: where does the predicted speedup S(B) fall to 1? speedups: {B: S(B)} on a grid of batch sizes."""
    Bs = sorted(speedups)
    best = max(speedups.values())
    if best <= 1:
        return (f"never rises above 1× (at best {best:.2f}×): at this α there is no spare arithmetic to convert, "
                "even for one sequence")
    cross = next((B for B in Bs if speedups[B] <= 1), None)
    if cross is None:
        return f"stays above 1× up to B = {Bs[-1]}, the end of the grid ({speedups[Bs[-1]]:.2f}× there)"
    return f"falls to 1× or below at B = {cross} ({speedups[cross]:.2f}× there)"


def long_context_verdict(short: Mapping[int, float], long: Mapping[int, float], short_ctx: int, long_ctx: int,
                         margin: float = 0.03) -> str:
    """Chapter 6 (MagicDec): {B: S(B)} at a short and a long context length. Does speculation pay at a large batch
    when the context is long, where it stops paying (or pays less) at short context? Compared at the largest B
    both grids share."""
    common = sorted(set(short) & set(long))
    if not common:
        return "The two context lengths share no batch size, so they cannot be compared."
    B = common[-1]
    s, l = short[B], long[B]
    at = f"At B = {B}, the predicted speedup is {s:.2f}× with ℓ = {short_ctx} and {l:.2f}× with ℓ = {long_ctx}"
    if l > s * (1 + margin) and l > 1:
        return (at + ": with long contexts every pass is dominated by reading the KV cache, the γ extra tokens per "
                "sequence stay nearly free, and speculation pays again at a batch size where it pays "
                + ("no longer" if s <= 1 else "less") + " at short context.")
    if l < s * (1 - margin):
        return at + ": here the longer context makes speculation pay less, not more."
    return at + ": here the context length hardly changes it."


def topk_mass_verdict(beta: float, topk_mass: float, k: int, margin: float = 0.02) -> str:
    """Chapter 6: at T > 0, a sampled chain token survives with probability β = Σ min(p, q); a node whose children are
    the draft's top-k keeps one with probability topk_mass, the target's mass on those k tokens."""
    head = (f"at this position a sampled chain token survives with probability β = {beta:.2f}, and a node whose "
            f"children are the draft's top-{k} keeps one with probability {topk_mass:.2f}")
    if topk_mass < beta - margin:
        return head + f": here the top-{k} tree keeps less than a sampled chain would"
    if topk_mass > beta + margin:
        return head + f": here the top-{k} tree still keeps more than a sampled chain would"
    return head + ": here the two are level"


def coverage_depth_verdict(by_depth: Sequence[Mapping[int, float]], wide: int, positions: int,
                           margin: float = 0.02) -> str:
    """Chapter 5: how the feature head's top-1 coverage moves from depth 1 to its deepest depth, and how much more
    its top-`wide` guesses hold there. by_depth[d - 1][k]: coverage@k at depth d (`lab.coverage`), measured at
    `positions` answer positions (few positions: a noisy table, and the sentence says how many)."""
    first, last, deep = by_depth[0][1], by_depth[-1][1], len(by_depth)
    if last < first - margin:
        trend = f"falls from {first:.2f} at depth 1 to {last:.2f} at depth {deep}"
    elif last > first + margin:
        trend = f"rises from {first:.2f} at depth 1 to {last:.2f} at depth {deep}"
    else:
        trend = f"holds near {first:.2f} from depth 1 to depth {deep} ({last:.2f} there)"
    wide_last = by_depth[-1][wide]
    if last <= 0:
        room = f"its top-{wide} guesses hold it {wide_last:.0%} of the time there"
    elif wide_last > last + margin:
        room = (f"its top-{wide} guesses hold the target's token {wide_last / last:.1f} times as often there "
                f"({wide_last:.2f}): the room a tree's extra children have")
    else:
        room = f"its top-{wide} guesses add little there ({wide_last:.2f}): a tree's extra children would rarely help"
    return f"Over {positions} answer positions, the feature draft's top-1 coverage {trend}, and {room}."

