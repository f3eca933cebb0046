"""The verdicts of chapter 5, "Choosing a draft": what holds each draft back, how the measured speedups and α
compare with the predicted ones, which draft wins which task, depth against width, what training did, and the
feature draft's coverage by depth.

Each function returns the sentence the chapter prints or glues for its measurements;
tests/test_verdicts_ch5.py feeds each one measurements on both sides of its threshold and checks that the
sentence changes with them.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from .margin import compare


def _listed(items: Sequence[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def draft_limit_verdict(name: str, alpha1: float, c: float) -> str:
    """Chapter 5: what holds a draft back. Even a free draft gives at most 1/(1 − α),
    even a perfect one at most 1/c; the lower of the two ceilings names the limit (agreement if 1 − α > c,
    else cost). alpha1: the teacher-forced α₁, which the chapter puts in for α."""
    if 1 - alpha1 > c:
        return f"the {name} is held back by its agreement (1 − α₁ = {1 - alpha1:.2f} exceeds c = {c:.3f})"
    return f"the {name} is held back by its cost (c = {c:.3f} exceeds 1 − α₁ = {1 - alpha1:.2f})"


def int8_draft_verdict(alpha1: float, c: float) -> str:
    """Chapter 5: what the int8 copy's step saves against the float32 target here,
    and whether its teacher-forced α₁ stayed below 1."""
    cost = (f"its step costs {c:.2f} of a float32 target step on this machine" if c < 1 else
            f"its step costs {c:.2f}× a float32 target step on this machine: int8 saves no time here")
    agree = (f"dynamic quantisation, which also rounds the activations, keeps α₁ at {alpha1:.3f}, below "
             "1" if alpha1 < 1
             else "its α₁ reached 1: rounding the activations changed no greedy choice on these prompts")
    return f"{cost}; {agree}"


def self_draft_verdict(measured: float, margin: float = 0.03) -> str:
    """Chapter 5: the target drafting for itself (α = 1 and c = 1 in principle): no gain, or timing noise?"""
    if compare(measured, 1.0, margin) != "higher":
        return f"measured {measured:.2f}×: no gain, as α = c predicts"
    return (f"measured {measured:.2f}×, above 1, which α = c does not allow: read it as the timing noise of "
            "a short run")


def measured_vs_predicted_verdict(pairs: Mapping[str, tuple[float, float]], margin: float = 0.03) -> str:
    """Chapter 5: does each draft's measured speedup sit below, level with (within `margin`,
    relative) or above the predicted one? pairs: draft name -> (predicted, measured)."""
    side = {n: compare(m, p, margin) for n, (p, m) in pairs.items()}
    below, above, level = ([n for n, s in side.items() if s == want] for want in ("lower", "higher", "level"))
    if len(below) == len(pairs):
        return "The measured speedup sits below the predicted one for every draft."
    if len(above) == len(pairs):
        return "The measured speedup sits above the predicted one for every draft."
    parts = [f"below the prediction for {_listed(below)}" if below else "",
             f"within {margin:.0%} of it for {_listed(level)}" if level else "",
             f"above it for {_listed(above)}" if above else ""]
    return "The measured speedup sits " + "; ".join(p for p in parts if p) + "."


def loop_alpha_verdict(pairs: Mapping[str, tuple[float, float]], margin: float = 0.02) -> str:
    """Chapter 5: the loop's α (`Stats.alpha`, every draft position) against the teacher-forced α₁
    (the first draft position).

    pairs: draft name -> (teacher-forced α, in-loop α); a NaN in-loop α
    (nothing drafted in the loop) is skipped.
    """
    pairs = {n: (t, in_loop) for n, (t, in_loop) in pairs.items() if in_loop == in_loop}
    if not pairs:
        return "No draft proposed anything in the timed runs, so there is no α in the loop to compare."
    side = {n: compare(in_loop, t, margin, relative=False) for n, (t, in_loop) in pairs.items()}
    below, above, level = ([n for n, s in side.items() if s == want] for want in ("lower", "higher", "level"))
    parts = [f"below the teacher-forced value for {_listed(below)}" if below else "",
             f"within {margin} of it for {_listed(level)}" if level else "",
             f"above it for {_listed(above)}" if above else ""]
    return "In the loop, α came out " + "; ".join(p for p in parts if p) + "."


def task_winner_verdict(fastest: Mapping[str, str]) -> str:
    """Chapter 5: did one draft win every task, or did the winner change with the task?
    fastest: task -> draft."""
    by_draft: dict[str, list[str]] = {}
    for task, draft in fastest.items():
        by_draft.setdefault(draft, []).append(task)
    if len(by_draft) == 1:
        draft, tasks = next(iter(by_draft.items()))
        return f"Here one draft won every task: {draft} was the fastest on all {len(tasks)}."
    return ("No single draft wins everywhere: the fastest draft was "
            + "; ".join(f"{d} on {_listed(ts)}" for d, ts in by_draft.items()) + ".")


def lookup_task_verdict(lookup_speed: Mapping[str, float], margin: float = 0.03) -> str:
    """Chapter 5: on which tasks prompt lookup sped decoding up (speedup over plain > 1 + margin),
    on which not."""
    gain = [t for t, s in lookup_speed.items() if compare(s, 1.0, margin) == "higher"]
    rest = [t for t in lookup_speed if t not in gain]

    def fmt(tasks):
        return _listed([f"{t} ({lookup_speed[t]:.2f}×)" for t in tasks])

    if not rest:
        return f"prompt lookup sped decoding up on every task: {fmt(gain)}"
    if not gain:
        return f"prompt lookup sped decoding up on no task here: {fmt(rest)}"
    return f"prompt lookup sped decoding up on {fmt(gain)}, but not on {fmt(rest)}"


def lm_copy_verdict(speed_rewrite: float, alpha_rewrite: float, alpha_open: float,
                    margin: float = 0.03) -> str:
    """Chapter 5: did the distilled LM, trained on answers that seldom copy their prompt,
    agree with the target more on the rewrite task (whose answer copies its prompt) than on open questions?
    speed_rewrite: its measured speedup on the rewrite; alpha_rewrite, alpha_open: its teacher-forced α₁ on
    the two tasks (`margin`: absolute)."""
    head = f"The distilled LM gave {speed_rewrite:.2f}× on the rewrite"
    alphas = f"(α₁ {alpha_rewrite:.2f} against {alpha_open:.2f})"
    side = compare(alpha_rewrite, alpha_open, margin, relative=False)
    if side == "higher":
        return (f"{head}, and agreed with the target more often there than on open questions {alphas}: "
                "training on answers that seldom copy their prompt did not keep it from agreeing where the "
                "answer copies.")
    if side == "lower":
        return (f"{head}, and agreed with the target less often there than on open questions {alphas}: it "
                "was trained on answers that seldom copy their prompt, and did not learn to copy.")
    return (f"{head}, and agreed with the target about as often there as on open questions {alphas}: it was "
            "trained on answers that seldom copy their prompt, so the copying gained it nothing.")


def depth_vs_width_verdict(cpu_ratio: float, gpu_ratio: float, gpu_measured: bool,
                           margin: float = 0.05) -> str:
    """Chapter 5: did sixteen times the layers (same weights) cost more step time, on this CPU and on a GPU?
    Ratios are deep step / shallow step; gpu_measured says whether the GPU figure was measured or
    predicted."""
    how = "measured" if gpu_measured else "predicted"
    deeper_cpu, deeper_gpu = (compare(r, 1.0, margin) == "higher" for r in (cpu_ratio, gpu_ratio))
    if deeper_cpu and deeper_gpu:
        more = ", more there" if gpu_ratio > cpu_ratio else ""
        return (f"Depth costs more than width on this CPU ({cpu_ratio:.1f}×) and on a GPU ({gpu_ratio:.1f}×, "
                f"{how}{more}): prefer shallow and wide drafts.")
    if deeper_gpu:
        return (f"Depth cost about as much as width on this CPU ({cpu_ratio:.2f}×) but more on a GPU "
                f"({gpu_ratio:.1f}×, {how}): on a GPU, prefer shallow and wide drafts.")
    if deeper_cpu:
        return (f"Depth costs more than width on this CPU ({cpu_ratio:.1f}×) but not on a GPU "
                f"({gpu_ratio:.2f}×, {how}): there the weights, not the launches, set the step time.")
    return (f"Here depth cost no more than width ({cpu_ratio:.2f}× on this CPU, {gpu_ratio:.2f}× on a GPU, "
            f"{how}): the layer count does not set these models' step time.")


def training_verdict(first: float, last: float, margin: float = 0.01) -> str:
    """Chapter 5: did validation agreement rise over training? -> 'rose from a to b',
    'fell ...' or 'stayed ...'."""
    side = compare(last, first, margin, relative=False)
    if side == "higher":
        return f"rose from {first:.2f} to {last:.2f}"
    if side == "lower":
        return f"fell from {first:.2f} to {last:.2f}"
    return f"stayed near {first:.2f} (ending at {last:.2f})"


def loss_verdict(kl_alpha: float, tv_alpha: float, steps: int, tol: float = 0.03) -> str:
    """Chapter 5: which distillation loss trained to the higher held-out α₁ at T = 1,
    or a tie within `tol`."""
    side = compare(kl_alpha, tv_alpha, tol, relative=False)
    if side == "level":
        return (f"At this scale the two losses end within {tol} of each other ({kl_alpha:.3f} and "
                f"{tv_alpha:.3f}): the point here is the mechanics.")
    better = "KL" if side == "higher" else "TV"
    return (f"Here {better} trained to the higher α₁ at T = 1 in {steps} steps ({kl_alpha:.3f} with KL, "
            f"{tv_alpha:.3f} with TV).")


def coverage_depth_verdict(by_depth: Sequence[Mapping[int, float]], wide: int, positions: int,
                           margin: float = 0.02) -> str:
    """Chapter 5: how the feature head's top-1 coverage moves from depth 1 to its deepest depth,
    and how much more its top-`wide` guesses hold there. by_depth[d - 1][k]: coverage@k at depth d
    (`lab.coverage`), measured at `positions` answer positions (few positions: a noisy table,
    and the sentence says how many)."""
    first, last, deep = by_depth[0][1], by_depth[-1][1], len(by_depth)
    side = compare(last, first, margin, relative=False)
    if side == "lower":
        trend = f"falls from {first:.2f} at depth 1 to {last:.2f} at depth {deep}"
    elif side == "higher":
        trend = f"rises from {first:.2f} at depth 1 to {last:.2f} at depth {deep}"
    else:
        trend = f"holds near {first:.2f} from depth 1 to depth {deep} ({last:.2f} there)"
    wide_last = by_depth[-1][wide]
    if last <= 0:
        room = f"its top-{wide} guesses hold it {wide_last:.0%} of the time there"
    elif compare(wide_last, last, margin, relative=False) == "higher":
        room = (f"its top-{wide} guesses hold the target's token {wide_last / last:.1f} times as often there "
                f"({wide_last:.2f}): the room a tree's extra children have")
    else:
        room = (f"its top-{wide} guesses add little there ({wide_last:.2f}): a tree's extra children would "
                "rarely help")
    return f"Over {positions} answer positions, the feature draft's top-1 coverage {trend}, and {room}."


def prediction_verdict(predicted: float | None, measured: float, what: str, tol: float = 0.05) -> str:
    """Chapter 5's "predict, then run": the reader's prediction of `what` against the measurement
    (`tol`: absolute). None (no prediction written) gives an empty string, so the cell prints nothing."""
    if predicted is None:
        return ""
    if isinstance(predicted, bool) or not isinstance(predicted, (int, float)) or not 0 <= predicted <= 1:
        raise ValueError(f"MY_PREDICTION must be a number between 0 and 1 (a share of positions), got "
                         f"{predicted!r}; set it to, say, 0.8, or to None to skip the comparison")
    head = f"You predicted {predicted:.2f} for {what}; the measurement is {measured:.2f}"
    side = compare(measured, predicted, tol, relative=False)
    if side == "level":
        return f"{head}: within {tol} of your prediction."
    more = "higher" if side == "higher" else "lower"
    return (f"{head}, {abs(measured - predicted):.2f} {more} than you predicted. Before reading on, ask "
            "which of your assumptions the measurement contradicts.")


def launch_prediction_note(launch_us: float, spec_name: str) -> str:
    """Chapter 5: what the GPU depth-ratio assumes where no GPU is present (a prediction, not a
    measurement)."""
    if launch_us <= 0:
        raise ValueError(f"LAUNCH_US must be > 0 µs, got {launch_us}: it is the assumed cost of one kernel "
                         "launch (5 µs is a common rough figure)")
    return (f"predicted, not measured: there is no GPU here, so it assumes that every torch operation is one "
            f"kernel launch costing LAUNCH_US = {launch_us:g} µs (an assumption, not a spec-sheet figure), "
            f"run one after another with no CUDA graphs, plus the time to read the bfloat16 weights at the "
            f"{spec_name}'s spec-sheet bandwidth")


def launch_regime_verdict(n_ops: int, launch_us: float, weight_bytes: float, bandwidth: float,
                          name: str = "this draft") -> str:
    """Chapter 5: is a draft's step launch-bound or bandwidth-bound on paper? Launches: n_ops × launch_us
    (assumed); weights: weight_bytes / bandwidth. Whichever is larger bounds the step, so it says whether c
    follows the operation count or the bytes (a prediction from an assumed launch cost)."""
    launches, read = n_ops * launch_us * 1e-6, weight_bytes / bandwidth
    both = (f"{name}'s {n_ops} launches would take {launches * 1e3:.2f} ms at an assumed {launch_us:g} µs "
            f"each, and reading its weights {read * 1e3:.2f} ms")
    if launches > read:
        return (f"{both}: launch-bound without CUDA graphs, so its c would follow the operation count, "
                "not the bytes")
    return f"{both}: bandwidth-bound, so its c would follow the bytes"


def sharpness_verdict(beta: Mapping[float, float], shipped: float, positions: int,
                      margin: float = 0.005, in_sample: bool = False) -> str:
    """Chapter 5: which factor s on the feature draft's logits keeps the most at T = 1 (β = Σ min(p, q_s) at
    the first draft position, by s: `lab.coverage.acceptance_by_sharpness`), against its own q (s = 1), and
    the s the shipped drafter samples with. Within `margin` of s = 1's β, no reshaping is worth naming.
    in_sample: these positions come from prompts the shipped s was chosen on (`prompts.TUNING`)."""
    best, own = max(beta, key=beta.get), beta[1.0]
    if best == 1.0 or compare(beta[best], own, margin, relative=False) != "higher":
        shape = (f"the draft's own q (s = 1) keeps about as much as any factor tried: β = {own:.3f}, "
                 f"{beta[best]:.3f} at best (s = {best:g})")
    else:
        which = "flatter" if best > 1 else "sharper"
        fix = "sharpened" if best > 1 else "flattened"
        shape = (f"the draft's q is {which} than the target's p: {fix} by s = {best:g} it keeps β = "
                 f"{beta[best]:.3f}, where its own q keeps {own:.3f}")
    where = ("on the tuning prompts, which include these: for the shipped s this comparison is in-sample"
             if in_sample else "on other prompts (the tuning prompts)")
    return (f"Over {positions} answer positions, {shape}. The shipped feature drafter samples with s = "
            f"{shipped:g}, chosen {where}.")
