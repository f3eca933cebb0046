"""The verdicts of chapter 6, "In production": our loop against Hugging Face's (its confidence stop, its
overhead), the greedy and T > 0 tests, prompt lookup, trees against chains, and batching.

Each function returns the sentence the chapter prints or glues for its measurements;
tests/test_verdicts_ch6.py feeds each one measurements on both sides of its threshold and checks that the
sentence changes with them.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from .margin import compare


def confidence_stop_verdict(lengths: Sequence[int], caps: Sequence[int], hf_passes: float | None = None,
                            short: int = 2) -> str:
    """Chapter 6: how long were the drafts under Hugging Face's confidence stop? lengths[i] tokens drafted in
    iteration i, caps[i] the most it could have drafted; hf_passes:
    Hugging Face's own draft passes per target pass."""
    n = len(lengths)
    if n == 0:
        return "No iteration could draft here, so the drafts' lengths were not measured."
    n_short = sum(1 for g in lengths if g <= short)
    n_stopped = sum(1 for g, cap in zip(lengths, caps) if g < cap)
    mean = sum(lengths) / n
    hf = (f"; Hugging Face's own run made {hf_passes:.1f} draft passes per target pass, its mean draft length"
          if hf_passes is not None else "")
    measured = (f"Our loop with the same rule drafted {mean:.1f} tokens per iteration on average (at most "
                f"{max(caps)}); the confidence stop cut {n_stopped} of {n} drafts short, and {n_short} of "
                f"{n} ({n_short / n:.0%}) ended after {short} tokens or fewer{hf}.")
    if n_short > n / 2:
        return measured + f" So here the confidence stop ends most drafts after {short} tokens or fewer."
    return measured + " So here most drafts ran longer than that: the draft was often sure of itself."


def greedy_agreement_verdict(n_same: int, n_runs: int, n_splits: int, n_near_ties: int) -> str:
    """Chapter 6: do the greedy runs reproduce plain decoding? n_splits runs part somewhere,
    n_near_ties of them at a near-tie (a logit gap within the rounding difference of the two ways of
    scoring)."""
    if n_same == n_runs:
        return f"all {n_runs} greedy runs reproduce plain decoding token for token"
    if n_near_ties == n_splits:
        return (f"{n_same} of {n_runs} greedy runs reproduce plain decoding token for token, and the others "
                "part only at near-ties that rounding explains")
    return (f"{n_same} of {n_runs} greedy runs reproduce plain decoding token for token, and "
            f"{n_splits - n_near_ties} part where rounding cannot explain it: suspect a bug")


def distribution_verdict(correct: Mapping[str, float], broken: float, level: float) -> str:
    """Chapter 6: the T > 0 tests. correct: p-values of the tests on correct samplers; broken:
    p-value of the test that should catch the broken sampler. Rejection means p < level."""
    rejected = [name for name, p in correct.items() if p < level]
    if rejected:
        first = (f"at level {level} the tests reject {', '.join(rejected)} (smallest p = "
                 f"{min(correct.values()):.3g})")
    else:
        first = (f"at level {level} none of the {len(correct)} tests finds a difference between the correct "
                 f"samplers and the exact distribution (smallest p = {min(correct.values()):.3g})")
    second = (f"the same test rejects the broken sampler (p = {broken:.3g})" if broken < level else
              f"the same test does not reject the broken sampler in this run (p = {broken:.3g}): more "
              "samples needed")
    return f"{first}, and {second}"


def broken_sampler_caught_verdict(p_value: float, level: float) -> str:
    """Chapter 6: does the goodness-of-fit test reject the broken sampler
    (rejection: p < level)? Completes the sentence "so the test ..."."""
    if p_value < level:
        return f"rejects it at level {level}"
    return (f"does not reject it in this run at level {level} (its power against this sampler is computed "
            "above)")


def lookup_verdict(rewrite: float, free_text: float, margin: float = 0.05, n_free: int = 1) -> str:
    """Chapter 6: prompt lookup's speedup over plain decoding on a rewrite task and on free text (ratios;
    n_free: how many free-text prompts)."""
    paid = (f"On the rewrite task prompt lookup ran at {rewrite:.2f}× plain decoding" +
            {"higher": ": it paid.", "lower": ": it did not pay here.",
             "level": ", level with it."}[compare(rewrite, 1.0, margin)])
    side = compare(free_text, 1.0, margin)
    if side == "level":
        which = "the free-text prompt" if n_free == 1 else f"{n_free} free-text prompts"
        where = "that one prompt" if n_free == 1 else "those prompts"
        rest = (f" On {which} it ran at {free_text:.2f}×, within {margin:.0%} of plain "
                f"decoding: on {where}, where it found little to copy, it cost almost nothing extra.")
    elif side == "lower":
        rest = (f" On free text it ran at {free_text:.2f}×, a cost of {1 - free_text:.0%}: here it is not "
                "free where it finds little to copy (every guess it makes, right or wrong, is a token the "
                "target must score).")
    else:
        rest = (f" On free text it ran at {free_text:.2f}×: even there it found stretches to copy.")
    return paid + rest


def second_candidates_verdict(tree_accepted: float, chain_accepted: float, margin: float = 0.005) -> str:
    """Chapter 6: did a static tree's extra candidates add accepted draft tokens per target pass,
    against the chain of the tree's depth (the draft's first choices alone)? Both are means per target pass;
    `margin` keeps a difference that two decimals would not show from counting as one."""
    both = f"({tree_accepted:.2f} against {chain_accepted:.2f} for the chain of the tree's depth)"
    side = compare(tree_accepted, chain_accepted, margin, relative=False)
    if side == "higher":
        return ("Here the extra candidates helped: the tree accepted more draft tokens per target pass "
                f"{both}.")
    if side == "lower":
        return f"On this prompt they did not: the tree accepted fewer draft tokens per target pass {both}."
    return f"On this prompt they did not: the tree accepted as many draft tokens per target pass {both}."


def roofline_turn_verdict(measured: int | None, roofline: int | None, largest: int,
                          rise: float = 1.25) -> str:
    """Chapter 6: where does a pass start to cost more than `rise`× one token (measured, tokens B·k),
    against where the roofline calls it compute-bound? None: not on the grid (up to `largest` tokens)."""
    seen = (f"The measured curve passes {rise}× one token at B·k = {measured} "
            "tokens" if measured is not None else
            f"The measured curve stays within {rise}× one token up to B·k = {largest} tokens")
    if measured is not None and (roofline is None or measured < roofline):
        where = f"the roofline's {roofline}" if roofline is not None else f"the grid's {largest}"
        return (seen + f", before {where}: on this machine the verify pass of a batch stops being free "
                "sooner than the roofline says. The roofline counts bytes and FLOPs only; one possible "
                "cause, not tested here, is a matrix kernel that is less efficient at small sizes than "
                "either roof assumes (the CPU kernels appendix measures this).")
    if measured is None:
        return seen + ": on this grid a batch's verify pass stays nearly free, as the roofline says."
    return (seen + f", at or after the roofline's {roofline}: the roofline predicts where the verify pass "
            "stops being free.")


def breakeven_verdict(speedups: Mapping[int, float]) -> str:
    """Chapter 6: where does the predicted speedup S(B) fall to 1?
    speedups: {B: S(B)} on a grid of batch sizes."""
    Bs = sorted(speedups)
    best = max(speedups.values())
    if best <= 1:
        return (f"never rises above 1× (at best {best:.2f}×): at this α there is no spare arithmetic to "
                "convert, even for one sequence")
    cross = next((B for B in Bs if speedups[B] <= 1), None)
    if cross is None:
        return f"stays above 1× up to B = {Bs[-1]}, the end of the grid ({speedups[Bs[-1]]:.2f}× there)"
    return f"falls to 1× or below at B = {cross} ({speedups[cross]:.2f}× there)"


def long_context_verdict(short: Mapping[int, float], long: Mapping[int, float], short_ctx: int, long_ctx: int,
                         margin: float = 0.03) -> str:
    """Chapter 6 (MagicDec): {B: S(B)} at a short and a long context length. Does speculation pay at a
    large batch when the context is long, where it stops paying (or pays less) at short context?
    Compared at the largest B both grids share."""
    common = sorted(set(short) & set(long))
    if not common:
        return "The two context lengths share no batch size, so they cannot be compared."
    B = common[-1]
    s, s_long = short[B], long[B]
    at = (f"At B = {B}, the predicted speedup is {s:.2f}× with ℓ = {short_ctx} and {s_long:.2f}× with ℓ = "
          f"{long_ctx}")
    side = compare(s_long, s, margin)
    if side == "higher" and s_long > 1:
        return (at + ": with long contexts every pass is dominated by reading the KV cache, the γ extra "
                "tokens per sequence stay nearly free, and speculation pays again at a batch size where "
                "it pays "
                + ("no longer" if s <= 1 else "less") + " at short context.")
    if side == "lower":
        return at + ": here the longer context makes speculation pay less, not more."
    return at + ": here the context length hardly changes it."


def topk_mass_verdict(beta: float, topk_mass: float, k: int, margin: float = 0.02) -> str:
    """Chapter 6: at T > 0, a sampled chain token survives with probability β = Σ min(p, q);
    a node whose children are the draft's top-k keeps one with probability topk_mass,
    the target's mass on those k tokens."""
    head = (f"at this position a sampled chain token survives with probability β = {beta:.2f}, and a node "
            f"whose children are the draft's top-{k} keeps one with probability {topk_mass:.2f}")
    side = compare(topk_mass, beta, margin, relative=False)
    if side == "lower":
        return head + f": here the top-{k} tree keeps less than a sampled chain would"
    if side == "higher":
        return head + f": here the top-{k} tree still keeps more than a sampled chain would"
    return head + ": here the two are level"


def sampled_children_verdict(sampled: float, beta: float, topk_mass: float, k: int,
                             margin: float = 0.02) -> str:
    """Chapter 6: a node whose k children are drawn from q without replacement keeps one with probability
    `sampled` (measured through `verify_tree`), against β (one sampled child) and the top-k mass."""
    head = (f"drawing the node's {k} children from q without replacement instead, it keeps one with "
            f"probability {sampled:.2f}")
    over_chain = compare(sampled, beta, margin, relative=False)
    over_topk = compare(sampled, topk_mass, margin, relative=False)
    if over_chain == "higher" and over_topk == "higher":
        return head + f": more than one sampled child (β) and more than the top-{k} tokens"
    if over_chain == "higher":
        return head + f": more than one sampled child (β), though not more than the top-{k} tokens"
    if over_topk == "higher":
        return head + f": more than the top-{k} tokens, though not more than one sampled child (β)"
    return head + f": no more than one sampled child (β) or the top-{k} tokens keep here"


def tree_vs_chain_verdict(tree: float, chain: float, tree_label: str = "the "
                                                                       "tree", chain_label: str = "the chain",
                          margin: float = 0.03) -> str:
    """Compare two speedups (or τ values): which is ahead, or a tie within `margin` (relative)."""
    side = compare(tree, chain, margin * max(tree, chain), relative=False)
    if side == "level":
        return f"{tree_label} and {chain_label} are level here ({tree:.2f} vs {chain:.2f})"
    better, worse = (tree_label, chain_label) if side == "higher" else (chain_label, tree_label)
    return f"{better} is ahead of {worse} here ({max(tree, chain):.2f} vs {min(tree, chain):.2f})"


def tree_prediction_verdict(prediction: str | None, tree: float, chain: float, margin: float = 0.03) -> str:
    """Chapter 6's predict-then-run: the reader's guess of which runs faster, "tree" or "chain", against the
    measured speedups over plain decoding (level within `margin`, relative, as `tree_vs_chain_verdict`).
    None (no guess written down): an empty string."""
    if prediction is None:
        return ""
    if prediction not in ("tree", "chain"):
        raise ValueError(f'MY_PREDICTION must be "tree", "chain" or None, got {prediction!r}: write '
                         'MY_PREDICTION = "tree" if you expect the dynamic tree to be faster here')
    side = compare(tree, chain, margin * max(tree, chain), relative=False)
    measured = f"(tree {tree:.2f}×, chain {chain:.2f}× plain decoding)"
    if side == "level":
        return (f"You predicted the {prediction}; they came out level within {margin:.0%} {measured}: "
                "the extra tokens per pass and the extra rows per pass cancelled out here.")
    winner = "tree" if side == "higher" else "chain"
    if winner == prediction:
        return f"You predicted the {prediction}, and it was faster {measured}."
    return (f"You predicted the {prediction}, but the {winner} was faster {measured}: which did you weigh "
            "wrong, the tokens a tree adds per pass or what its extra rows cost on this machine?")


def overhead_verdict(ours_ms: float, hf_ms: float) -> str:
    """Our loop's overhead per target pass against Hugging Face assisted generation's."""
    if ours_ms <= hf_ms:
        return (f"our loop spends {ours_ms:.1f} ms per target pass outside the models, at most Hugging "
                f"Face's {hf_ms:.1f} ms")
    return (f"our loop spends {ours_ms:.1f} ms per target pass outside the models, more than Hugging Face's "
            f"{hf_ms:.1f} ms")


def hf_gamma_verdict(config_passes: float, keyword_passes: float, gamma: int, tol: float = 0.5,
                     same_kernels: bool = True) -> str:
    """Chapter 6: did Hugging Face draft γ tokens per iteration with the settings on the draft's config
    (config_passes: draft passes per target pass, at most γ; within `tol` of γ counts as γ), and did the same
    settings passed to generate() as keywords change anything? Says what the speed comparison can then
    tell apart. same_kernels=False: our loops ran the target through its compiled pass (`models.aot`),
    Hugging Face's through the model itself, so the passes differ too."""
    near = compare(config_passes, gamma, tol, relative=False) == "level"
    moved = compare(keyword_passes, config_passes, tol, relative=False) != "level"
    keywords = (f"passed as keywords they drafted {keyword_passes:.2f}, so that route did not apply them"
                if moved else
                f"passed as keywords they drafted {keyword_passes:.2f}, about as many: on this run the route "
                "made no difference")
    head = (f"With our settings on the draft's config, Hugging Face drafted {config_passes:.2f} tokens per "
            "target pass")
    if near:
        gap = ("so the gap between their speeds lies in what each iteration costs beyond the model passes (a "
               "reading, not a measurement: this chapter does not time Hugging Face's loop by parts; chapter "
               "4's `diagnose` measures ours)" if same_kernels else
               "but our loops ran the target through this machine's compiled pass and Hugging Face's through "
               "the model itself, so the gap between their speeds mixes the two kernels with what each "
               "iteration costs beyond the passes")
        return (f"{head}, close to γ = {gamma}; {keywords}. Both loops then draft γ tokens with the same "
                f"model and accept by the same greedy rule, {gap}")
    why, mix = ("", "") if same_kernels else (
        ", and our loops ran the target through this machine's compiled pass while Hugging Face's ran the "
        "model itself", " and kernels")
    return (f"{head}, not γ = {gamma}; {keywords}. The two loops did not draft alike here{why}, so their "
            f"speeds mix draft length with loop cost{mix}")


def tau_time_verdict(tau_tree: float, tau_chain: float, speed_tree: float, speed_chain: float,
                     margin: float = 0.03) -> str:
    """Chapter 6: do the tree-against-chain comparisons in tokens per target pass (τ) and in time point
    the same way? Speeds: speedups over plain decoding. Ties within `margin` (relative)."""
    by_tau, by_time = compare(tau_tree, tau_chain, margin), compare(speed_tree, speed_chain, margin)
    word = {"higher": "ahead of", "lower": "behind", "level": "level with"}
    if by_tau == by_time:
        return f"Here the two comparisons agree: the tree is {word[by_tau]} the chain in both."
    rank = {"lower": 0, "level": 1, "higher": 2}
    why = ("its extra rows cost more time than its extra tokens saved" if rank[by_time] < rank[by_tau] else
           "its iterations cost less time than the chain's (fewer draft passes), or timing noise is larger "
           "than the difference")
    return (f"Here they disagree: the tree is {word[by_tau]} the chain in tokens per target pass but "
            f"{word[by_time]} it on the clock, so {why}.")
