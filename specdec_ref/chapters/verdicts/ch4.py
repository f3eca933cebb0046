"""The verdicts of chapter 4, "How much faster?": the cost of verification, the precisions, the speedup
formulas against the clock and what they ask of γ and α, the acceptance model, and the adaptive draft lengths.

Each function returns the sentence the chapter prints or glues for its measurements;
tests/test_verdicts_ch4.py feeds each one measurements on both sides of its threshold and checks that the
sentence changes with them.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from .margin import compare


def adaptive_verdict(best_fixed: float, adaptive: Mapping[str, float], margin: float = 0.03) -> str:
    """Chapter 4: did any adaptive draft length beat the best fixed γ on this run?
    Speedups over plain decoding."""
    name, best = max(adaptive.items(), key=lambda kv: kv[1])
    side = compare(best, best_fixed, margin)
    if side == "higher":
        return f"here the {name} beat the best fixed γ, {best:.2f}× against {best_fixed:.2f}×"
    if side == "lower":
        return (f"here no adaptive rule beat the best fixed γ: the best, the {name}, gave {best:.2f}× "
                f"against {best_fixed:.2f}×")
    return f"here the {name} and the best fixed γ are level, {best:.2f}× against {best_fixed:.2f}×"


def sustained_knee(ratios: Sequence[float], flat: float = 1.25) -> int | None:
    """The first k from which every t(k)/t(1) stays above `flat` (ratios[k - 1]); None if there is none.

    A single point above `flat` followed by points below it is a bump, not a knee."""
    k = None
    for i, r in enumerate(ratios, start=1):
        k = (k or i) if r > flat else None
    return k


def _lead(curves: Mapping[str, Sequence[float]]) -> str:
    """'X steps in a, Y in b and Z in c' for the last point of each curve."""
    parts = [f"{v[-1]:.2f} one-token steps in {label}" if i == 0 else f"{v[-1]:.2f} in {label}"
             for i, (label, v) in enumerate(curves.items())]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def verify_cost_verdict(curves: Mapping[str, Sequence[float]], device: str, *, skipped: Sequence[str] = (),
                        unpacked: str = "float32, F.linear", packed: str = "float32", flat: float = 1.25,
                        margin: float = 0.05) -> str:
    """Chapter 4: what scoring k tokens costs on this device, t(k)/t(1) by label,
    curves[label][k - 1] = t(k)/t(1).

    Says whether the passes stay within `flat`× of one token (memory-bound) or from which k they do not,
    whether prepacking mattered (the `unpacked` curve against the `packed` one, CPU only), and,
    on an accelerator, that only the target as loaded was timed.
    `skipped`: labels whose copy was too big to make.
    """
    kept = {label: v for label, v in curves.items() if label != unpacked}
    k_max = max(len(v) for v in kept.values())
    where = {"cpu": "this CPU", "cuda": "this GPU"}.get(device, f"this {device} device")
    out = [f"Scoring {k_max} tokens costs {_lead(kept)} on {where}."]
    steep = {label: k for label, v in kept.items() if (k := sustained_knee(v, flat)) is not None}
    bumps = {label: next(k for k, r in enumerate(v, start=1) if r > flat) for label, v in kept.items()
             if label not in steep and any(r > flat for r in v)}
    if not steep:
        stays = (f"{'Every curve ends' if len(kept) > 1 else 'It ends'} within {flat}× of one token at "
                 f"k = {k_max}" if bumps else
                 f"{'Every curve stays' if len(kept) > 1 else 'It stays'} within {flat}× of one token up "
                 f"to k = {k_max}")
        out.append(f"{stays}: here the verification pass is nearly as cheap as a one-token step, as a "
                   "memory-bound pass should be.")
        if bumps:
            where_k = " and ".join(f"at k = {k} in {label}" for label, k in bumps.items())
            out.append(f"The cost rose above {flat}× {where_k} and fell back: a bump (timing noise, or the "
                       "kernel's blocking), not a knee.")
    else:
        where_k = " and ".join(f"at k = {k} in {label}" for label, k in steep.items())
        out.append(f"The cost passes {flat}× one token {where_k}: from there on every extra token adds real "
                   "time, and the textbook's free verification pass does not hold"
                   + (" in that precision." if len(kept) > 1 and len(steep) == 1 else "."))
    if unpacked in curves and packed in curves:
        u, p = curves[unpacked][-1], curves[packed][-1]
        side = compare(u, p, margin)
        if side == "higher":
            out.append("With plain `F.linear`, which lays the weights out again on every call, the same "
                       f"{packed} pass costs {u:.2f} steps instead of {p:.2f}: the kernel, not the physics, "
                       "made that difference.")
        elif side == "lower":
            out.append(f"With plain `F.linear` the same {packed} pass costs {u:.2f} steps, less than the "
                       f"{p:.2f} of the prepacked weights: here prepacking did not pay.")
        else:
            out.append(f"With plain `F.linear` the same {packed} pass costs {u:.2f} steps, level with the "
                       f"prepacked weights' {p:.2f}: here the kernel made no difference.")
    if device != "cpu":
        out.append("Only the target as loaded was timed: on an accelerator no float32 copy is made (it would "
                   "take twice the memory of a 16-bit model for one more curve), and the `F.linear` "
                   "comparison, a CPU kernel matter, is skipped.")
    if skipped:
        out.append(f"Skipped, too big to copy on this machine: {', '.join(skipped)}.")
    return " ".join(out)


def precision_verdict(step_ms: Mapping[str, float], curves: Mapping[str, Sequence[float]],
                      native_bf16: bool | None, margin: float = 0.05) -> str:
    """Chapter 4: which precision is faster here, for one token and for the longest pass timed.

    step_ms: t(1) in milliseconds by dtype name; curves: t(k)/t(1) by dtype name (k = 1, 2, ...),
    so a pass over k tokens takes step_ms * curves[k - 1]. native_bf16: whether the CPU has bfloat16
    instructions (None on an accelerator, or when unknown).
    """
    if not ("float32" in step_ms and "bfloat16" in step_ms):  # one precision timed: nothing to compare
        return " ".join(f"One step in {label} took {ms:.1f} ms." for label, ms in step_ms.items()
                        if "F.linear" not in label)

    def faster(f32: float, bf16: float) -> str:
        return {"lower": "bfloat16", "higher": "float32", "level": "neither"}[compare(bf16, f32, margin)]

    k = min(len(curves["float32"]), len(curves["bfloat16"]))
    one = (step_ms["float32"], step_ms["bfloat16"])
    many = (one[0] * curves["float32"][k - 1], one[1] * curves["bfloat16"][k - 1])
    out = [f"One step took {one[1]:.1f} ms in bfloat16 against {one[0]:.1f} ms in float32, and a pass over "
           f"{k} tokens {many[1]:.1f} ms against {many[0]:.1f} ms:"]
    w1, wk = faster(*one), faster(*many)
    if w1 == wk == "neither":
        out.append("the two precisions are level on this machine.")
    elif w1 == wk:
        out.append(f"{w1} is the faster precision on this machine, for one token and for {k}.")
    else:
        say = lambda w: "neither is faster" if w == "neither" else f"{w} is faster"  # noqa: E731
        out.append(f"for one token {say(w1)}, for {k} tokens {say(wk)}.")
    if native_bf16:
        out.append("This CPU has native bfloat16 instructions, so bfloat16 products run directly on weights "
                   "half the size.")
    elif native_bf16 is False:
        out.append("This CPU has no native bfloat16 instructions: its bfloat16 products convert the weights "
                   "to float32 as they go.")
    return " ".join(out)


def _gammas(gammas: Sequence[int]) -> str:
    return ", ".join(str(g) for g in gammas)


def prediction_verdict(err_tau: float, err_generalized: float, err_textbook: float, fitted: Sequence[int],
                       held_out: Sequence[int], tolerance: float = 0.10, margin: float = 0.02) -> str:
    """Chapter 4: how far each prediction lies from the measured speedup at the held-out γ only
    (largest relative errors).

    err_tau: the cost model with the measured τ as numerator (no acceptance model); err_generalized: the
    same costs with the i.i.d. law's E[n + 1] from α; err_textbook: Theorem 3.8. The overhead h₀ + γh₁ was
    fitted on the γ in `fitted`, so the errors must come from `held_out` alone: at a fitted γ, a prediction
    from τ matches the clock by construction.
    """
    if not held_out or set(held_out) & set(fitted):
        raise ValueError(f"the held-out γ must be non-empty and disjoint from the fitted ones, got held out "
                         f"{list(held_out)}, fitted {list(fitted)}: use speed.split_gammas")
    out = (f"at the held-out γ = {_gammas(held_out)} (the overhead h₀ + γh₁ was fitted on γ = "
           f"{_gammas(fitted)} only), the cost model with the measured τ is off by up to {err_tau:.0%}")
    within = "stays within" if err_tau <= tolerance else "misses"
    out += f" and {within} a {tolerance:.0%} tolerance"
    side = compare(err_generalized, err_tau, margin, relative=False)
    if side == "higher":
        out += (f"; predicting τ from α by the i.i.d. law adds error (up to {err_generalized:.0%}), so there "
                "the acceptance model, not the costs, is the weaker part")
    elif side == "lower":
        out += (f"; from α the error is smaller (up to {err_generalized:.0%}): the acceptance model's error "
                "partly cancels the costs' here")
    else:
        out += f"; from α it is about the same (up to {err_generalized:.0%})"
    side = compare(err_generalized, err_textbook, margin, relative=False)
    if side == "lower":
        tail = "measuring the costs brought the prediction closer to the clock"
    elif side == "higher":
        tail = "here measuring the costs did not bring the prediction closer to the clock"
    else:
        tail = "here measuring the costs made about no difference"
    return f"{out}; the textbook formula is off by up to {err_textbook:.0%}, so {tail}"


def knee_verdict(ratios: Sequence[float], device: str, label: str, flat: float = 1.25) -> str:
    """Chapter 4: did the target as loaded show a knee within the k timed? ratios[k - 1] = t(k)/t(1).

    The chapter expects a CPU's knee at a few tokens (little arithmetic per byte read); the sentence says
    whether this run showed one, so the prose cannot claim a knee the curve does not have.
    """
    if not ratios:
        raise ValueError(f"no t(k)/t(1) for {label!r}: time at least k = 1 and 2")
    k = sustained_knee(ratios, flat)
    cpu = device == "cpu"
    if k is None:
        stays = "stayed" if all(r <= flat for r in ratios) else "ended"
        return (f"On this run the target as loaded ({label}) {stays} within {flat}× of one token up to "
                f"k = {len(ratios)}: " + ("the knee that expectation places at a few tokens on a CPU lies "
                                          "beyond the passes timed here, " if cpu else "")
                + "so here the extra tokens of a verification pass came nearly free.")
    return (f"On this run the target as loaded ({label}) passed {flat}× of one token from k = {k} on"
            + (", as expected of a CPU" if cpu else "") + ": past that point the extra tokens of a "
            "verification pass cost real time.")


def prediction_gap_verdict(gammas: Sequence[int], textbook: Sequence[float], generalized: Sequence[float],
                           margin: float = 0.03) -> str:
    """Chapter 4: does the textbook prediction run away from the generalised one as γ grows?

    The gap is textbook / generalised - 1 (it does not depend on α: the two share their numerator).
    """
    gaps = [t / g - 1 for t, g in zip(textbook, generalized)]
    first, last = gaps[0], gaps[-1]
    if all(compare(x, 0.0, margin, relative=False) == "level" for x in gaps):
        return (f"here the two predictions stay within {margin:.0%} of each other at every γ: the extra "
                "tokens and the loop cost little on this machine")
    if compare(last, first, margin, relative=False) == "higher":
        return ("here they are not free: the gap between the two predictions widens with γ, from "
                f"{first:.0%} at γ = {gammas[0]} to {last:.0%} at γ = {gammas[-1]}")
    return (f"here the gap between the two predictions does not widen with γ: {first:+.0%} at γ = "
            f"{gammas[0]}, {last:+.0%} at γ = {gammas[-1]}")


def best_gamma_shift_verdict(alpha: float, c: float, slope: float, gamma_max: int = 16) -> str:
    """Chapter 4: how a verify cost rising as t(k)/t(1) = 1 + slope (k - 1) moves
    the best γ of the textbook."""
    from ...lab.speedup import best_gamma, linear_verify_costs
    g0, s0 = best_gamma(alpha, c, gamma_max=gamma_max)
    g1, s1 = best_gamma(alpha, c, linear_verify_costs(slope, gamma_max + 1), gamma_max=gamma_max)
    head = (f"with α = {alpha:g} and c = {c:g} the textbook's best γ is {g0} ({s0:.2f}×); a slope of "
            f"{slope:.2f}, this machine's,")
    side = compare(g1, g0, 0, relative=False)
    if side == "lower":
        return f"{head} pulls it down to γ = {g1} ({s1:.2f}×)"
    if side == "higher":
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
    side = compare(p1, p2, z * se, relative=False)
    if side == "level":
        return (f"The difference, {p1 - p2:+.2f}, is within {z:g} standard errors ({se:.2f}): on this run "
                "the positions look alike, as the i.i.d. model assumes.")
    if side == "higher":
        return (f"The difference, {p1 - p2:+.2f}, is beyond {z:g} standard errors ({se:.2f}): the positions "
                "are not alike, and the first is the easier one. One explanation, not tested here: the "
                "draft's first guess follows the target's own last token, while every further guess builds "
                "on guesses, so its errors may compound.")
    return (f"The difference, {p1 - p2:+.2f}, is beyond {z:g} standard errors ({se:.2f}): the positions are "
            "not alike, and the later ones, once reached, are the easier ones. One explanation, not tested "
            "here: acceptances may cluster, on a predictable stretch (a list, a stock phrase) the draft "
            "staying right, so that reaching position i is itself evidence that position i is easy.")


def geometric_fit_verdict(accepted: Sequence[int], gamma: int, alpha: float, z: float = 2.0) -> str:
    """Chapter 4: does the capped geometric law with one α fit the accepted lengths of
    iterations that drafted γ?

    Tests the tail, P(n = γ) against α^γ, and the mean tokens per iteration, E[n + 1] against
    (1 - α^(γ+1)) / (1 - α), each against z standard errors.
    """
    n = len(accepted)
    if n == 0:
        return f"No iteration drafted all {gamma} tokens, so there is no histogram to compare."
    tail, q = sum(a == gamma for a in accepted) / n, alpha ** gamma
    se_tail = max(q * (1 - q) / n, 1e-12) ** 0.5
    side = compare(tail, q, z * se_tail, relative=False)
    if side == "level":
        out = (f"The capped geometric law fits the histogram's tail: all {gamma} draft tokens were accepted "
               f"in {tail:.0%} of iterations, against α^γ = {q:.0%}, within {z:g} standard errors")
    else:
        word = "understates" if side == "higher" else "overstates"
        out = (f"The capped geometric law {word} the histogram's tail: all {gamma} draft tokens were "
               f"accepted in {tail:.0%} of iterations, against α^γ = {q:.0%}")
    mean = sum(a + 1 for a in accepted) / n
    want = gamma + 1.0 if alpha == 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)
    sd = (sum((a + 1 - mean) ** 2 for a in accepted) / max(n - 1, 1)) ** 0.5
    side = compare(mean, want, z * max(sd / n ** 0.5, 1e-12), relative=False)
    if side == "level":
        return (f"{out}; and a single α predicts the tokens per iteration within noise ({mean:.2f} measured, "
                f"{want:.2f} predicted).")
    word = "understates" if side == "higher" else "overstates"
    return (f"{out}; and a single α {word} the tokens per iteration ({mean:.2f} measured, {want:.2f} "
            "predicted).")


def two_x_verdict(alpha: float, alpha_needed: float | None, c: float, goal: float = 2.0,
                  label: str = "greedy") -> str:
    """Chapter 4: does this pair's α reach the α that `goal`× needs at its c (textbook formula)?

    alpha_needed: the smallest α whose best textbook speedup reaches goal (speed.alpha_for_speedup),
    None if none.
    """
    if alpha_needed is None:
        return (f"At this pair's c = {c:.3f} no α below 1 gives {goal:g}×, even by the textbook formula: the "
                "draft costs too much for any acceptance to make up for it.")
    verdict = "clears it" if alpha >= alpha_needed else "falls short of it"
    return (f"At this pair's c = {c:.3f}, {goal:g}× would need α ≥ {alpha_needed:.2f} by the textbook "
            f"formula; this pair's α = {alpha:.2f} ({label}) {verdict}.")


def pass_price_verdict(in_loop: Mapping[int, float], calibrated: Mapping[int, float],
                       margin: float = 0.05) -> str:
    """Chapter 4: did the loop pay for its verification passes what the calibration priced them at?

    in_loop[γ]: the median pass of γ + 1 rows inside the measured runs over plain decoding's one-row pass, the
    same runs (`lab.pass_clock`); calibrated[γ]: t(γ + 1)/t(1) from the calibration's passes back to back.
    The sentence names the γ where the two lie furthest apart."""
    common = sorted(g for g in set(in_loop) & set(calibrated) if in_loop[g] == in_loop[g])  # NaN: not timed
    if not common:
        raise ValueError("pass_price_verdict needs prices for at least one γ on both sides, got "
                         f"{sorted(in_loop)} and {sorted(calibrated)}")
    g = max(common, key=lambda k: abs(in_loop[k] / calibrated[k] - 1))
    side = compare(in_loop[g], calibrated[g], margin)
    prices = (f"{in_loop[g]:.2f} one-row passes in the loop against {calibrated[g]:.2f} in the calibration, "
              f"at γ = {g}")
    if side == "level":
        return (f"inside these runs the loop paid for every verification pass within {margin:.0%} of the "
                f"calibrated price (furthest apart: {prices})")
    more = "more" if side == "higher" else "less"
    return (f"inside these runs the loop paid {more} for a verification pass than the calibration priced it "
            f"({prices}), and every prediction above inherits that difference")
