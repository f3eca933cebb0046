"""The verdicts of chapter 3, "Exact, not approximate": what the statistical tests of the samplers and the
floating-point near-ties say.

Each function returns the sentence the chapter prints or glues for its measurements;
tests/test_verdicts_ch3.py feeds each one measurements on both sides of its threshold and checks that the
sentence changes with them.
"""
from __future__ import annotations

from collections.abc import Mapping


def fit_verdict(p_value: float, n: int, significance: float) -> str:
    """Chapter 3: does a chi-square test of the emitted tokens against the target's distribution reject?"""
    if p_value >= significance:
        return (f"The emitted tokens fit the target's distribution: chi-square p-value {p_value:.3f} on {n} "
                f"draws, above the rejection threshold of {significance:g}.")
    return (f"The test rejects: p-value {p_value:.2g} on {n} draws, below the threshold of {significance:g}. "
            f"A correct sampler does this about once in {1 / significance:.0f} runs; rerun with another "
            "SEED, and if it rejects again, the sampler is wrong.")


def configs_verdict(p_values: Mapping[str, float], n: int, significance: float) -> str:
    """Chapter 3: how many configurations of a goodness-of-fit test reject, with the smallest p-value."""
    rejected = [name for name, p in p_values.items() if p < significance]
    smallest = min(p_values.values())
    if not rejected:
        return (f"None of the {len(p_values)} configurations is rejected: the smallest p-value is "
                f"{smallest:.3f}, with {n} samples each.")
    return (f"{len(rejected)} of the {len(p_values)} configurations are rejected ({', '.join(rejected)}; "
            f"smallest p-value {smallest:.2g}, {n} samples each).")


def false_rejection_note(significance: float) -> str:
    """Chapter 3: how often a correct sampler is rejected at this significance level, in words."""
    if not 0 < significance < 1:
        raise ValueError(f"significance must be in (0, 1), got {significance!r}: use e.g. stats.SIGNIFICANCE")
    return (f"about one test in {round(1 / significance):,} should reject a correct sampler at significance "
            f"level {significance:g}")


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


def late_bug_verdict(p_long: float, p_short: float, significance: float, gamma_long: int,
                     gamma_short: int) -> str:
    """Chapter 3: is a bug that acts only from the third draft token on caught at a long γ,
    missed at a short one?"""
    if p_long >= significance:
        return (f"At this sample size the late bug is not rejected even at γ = {gamma_long} (p = "
                f"{p_long:.3f}): more samples are needed to see it.")
    if p_short >= significance:
        return (f"The late bug is rejected at γ = {gamma_long} (p = {p_long:.2g}) and passes at γ = "
                f"{gamma_short} (p = {p_short:.3f}), where it never runs: a test with too few draft tokens "
                "per iteration passes a sampler that is wrong.")
    return (f"The late bug is rejected at γ = {gamma_long} (p = {p_long:.2g}) and, by chance, at γ = "
            f"{gamma_short} too (p = {p_short:.2g}), where it never runs: a correct sampler is rejected "
            f"about once in {1 / significance:.0f} runs.")


def correct_sampler_summary(p_values: Mapping[str, float], significance: float) -> str:
    """Chapter 3: how many tests of our sampler pass at the significance level."""
    failed = [name for name, p in p_values.items() if p < significance]
    if not failed:
        return f"all {len(p_values)} tests of our sampler pass at significance level {significance:g}"
    return (f"{len(p_values) - len(failed)} of {len(p_values)} tests of our sampler pass at significance "
            f"level {significance:g} (rejected: {', '.join(failed)}; rerun with another seed before "
            "suspecting the sampler)")


def broken_sampler_summary(p_values: Mapping[str, float], significance: float) -> str:
    """Chapter 3: how many broken samplers the tests reject, naming any that slipped through."""
    missed = [name for name, p in p_values.items() if p >= significance]
    if not missed:
        return f"the same tests reject all {len(p_values)} broken samplers"
    return (f"the same tests reject {len(p_values) - len(missed)} of {len(p_values)} broken samplers (not "
            f"rejected at this sample size: {', '.join(missed)})")


def gallery_verdict(broken_p: Mapping[str, float], ours_p: Mapping[str, float], significance: float) -> str:
    """Chapter 3: does the gallery show both halves of a test's worth, the bugs it catches and the correct
    sampler it passes?"""
    missed = [name for name, p in broken_p.items() if p >= significance]
    failed = [name for name, p in ours_p.items() if p < significance]
    caught = (f"all {len(broken_p)} broken samplers" if not missed else
              f"{len(broken_p) - len(missed)} of the {len(broken_p)} broken samplers (not rejected at this "
              f"sample size: {', '.join(missed)})")
    passed = (f"all {len(ours_p)} tests of our sampler pass" if not failed else
              f"{len(failed)} of the {len(ours_p)} tests of our sampler reject it ({', '.join(failed)})")
    odds = f"a correct sampler fails each test about once in {round(1 / significance):,} runs"
    lead = f"The sequence-level test on the toy pair rejects {caught}"
    level = f"at significance level {significance:g}"
    if not failed and not missed:
        return (f"{lead}, and {passed}, {level}. So these tests state both what they cost and what they "
                f"catch: {odds}, and each bug above moves the output far enough to be seen at the sample "
                "size it ran on.")
    if not failed:
        return (f"{lead}, and {passed}, {level}: {odds}, and a bug it missed needs more samples before the "
                "test can be said to catch it.")
    return f"{lead}, but {passed} {level}: {odds}, so rerun with another SEED before suspecting the sampler."


def near_tie_verdict(dtype: str, n_below: int, flips: int) -> str:
    """Chapter 3: are any top-2 logit gaps smaller than the rounding difference between pass shapes?"""
    if n_below == 0 and flips == 0:
        return (f"In {dtype}, every top-2 gap here is larger than the rounding difference, so no position "
                "was close enough to flip.")
    return (f"In {dtype}, {n_below} position(s) have a top-2 gap below the rounding difference and the "
            f"argmax flipped {flips} time(s): at such positions greedy speculative and greedy plain decoding "
            "can part.")


def greedy_divergence_verdict(dtype: str, n_tokens: int, k_div: int | None, plain: str = "", spec: str = "",
                              gap: float = 0.0, rounding: float = 0.0) -> str:
    """Chapter 3: where do plain and speculative greedy texts part in a low-precision dtype,
    and is it a near-tie?"""
    if k_div is None:
        return f"In {dtype}, the two greedy texts are identical here ({n_tokens} tokens)."
    tie = (f"less than the largest rounding difference measured above ({rounding:.3g}): a near-tie"
           if gap < rounding else "more than the largest rounding difference measured above "
           f"({rounding:.3g}), so this position rounds differently from the sequence we measured")
    return (f"In {dtype}, the two texts agree on {k_div} token(s), then plain decoding writes `{plain!r}` "
            f"where speculative decoding writes `{spec!r}`. Scored in one pass over the common prefix, the "
            f"two candidates' logits are {gap:.3g} apart, {tie}. Both texts are legitimate greedy outputs of "
            "the same model; they differ only in how the arithmetic was grouped.")


def block_gain_phrase(taus: Mapping[int, Mapping[str, float]]) -> str:
    """Chapter 3's summary: "up to 4.5% more tokens", "no more tokens" or "at least 0.4% fewer tokens" than
    token by token, from the best γ's gain (taus as `block_verdict` takes them). On a finite sample of
    chains block verification can come out behind at every γ; the phrase then says so."""
    if not taus:
        raise ValueError("no chain lengths measured: give block_and_token_taus at least one γ")
    best = max(t["block"] / t["token"] - 1 for t in taus.values())
    if best > 1e-9:  # block_verdict's threshold: any gain at all is "more"
        return f"up to {100 * best:.1f}% more tokens"
    if best >= -1e-9:
        return "no more tokens"
    return f"at least {100 * -best:.1f}% fewer tokens"  # every γ behind: even the best one


def block_verdict(taus: Mapping[int, Mapping[str, float]]) -> str:
    """Chapter 3: on the same drafted chains, how many more tokens block verification keeps than token by
    token (taus: γ -> {"token": τ, "block": τ}, as `lab.compare.block_and_token_taus` returns), and whether
    the gain grows with γ."""
    if not taus:
        raise ValueError("no chain lengths measured: give block_and_token_taus at least one γ")
    gain = {g: t["block"] / t["token"] - 1 for g, t in sorted(taus.items())}
    best, first = max(gain, key=gain.get), min(gain)
    if gain[best] <= 1e-9:
        return ("Judged as a block, these chains kept no more tokens than judged token by token, at every "
                f"length tried (γ = {', '.join(map(str, gain))}).")
    text = (f"Judged as a block, the same chains keep more: τ goes from {taus[best]['token']:.3f} to "
            f"{taus[best]['block']:.3f} tokens per target pass at γ = {best} (+{100 * gain[best]:.1f}%)")
    if best != first:
        text += f", and by {100 * gain[first]:+.1f}% at γ = {first}"
    gs = list(gain)
    if len(gs) > 1 and all(gain[a] <= gain[b] for a, b in zip(gs, gs[1:])):
        return text + ". The gain grows with γ: the longer the chain, the more spare mass it can carry down."
    return text + "." + (" The gain does not grow steadily with γ here." if len(gs) > 1 else "")
