"""Will speculative decoding pay off for this pair, on this device? Measure, predict, measure again, say why.

    python -m specdec_ref diagnose --pair offline --prompts 4 --json diagnose.json

`measure` collects everything the generalised speedup formula (lab/speedup) needs: the per-token
acceptance α (and per draft position), the cost ratio c, the verify cost t(k)/t(1) for k = 1..γ_max+1
and the loop's overhead per iteration. `verdict` turns those numbers into a recommendation in plain
words, and blames one factor when speculation cannot pay off. `diagnose` does both, then measures the
real speedup at the recommended γ, so the prediction is checked on the spot.
"""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field, replace

import torch

from ..cache import CachedModel, vocab_size
from ..drafters import FeatureDrafter, TreeDrafter
from ..generate import as_drafter, autoregressive_generate, speculative_generate
from ..models.kernels import kernel_path
from ..models.method import (CANDIDATES, calibrate, choosable, choose, cold_extra, loop_step_seconds,
                             method_name, parse_method, pass_seconds, timed_steps)
from ..sampling import SamplingConfig
from .bench import Row, cost_ratio, run_interleaved
from .compare import target_answers
from .coverage import coverage_by_depth
from .pass_clock import PassClock, labelled, passes_in_loop
from .speedup import best_gamma, predicted_speedup, speedup_by_gamma
from ..tree import TreeBudget

BLAME = {  # the factor that keeps speculation from paying off -> what to tell the reader
    "alpha": "α is too low: the draft agrees with the target too rarely "
             "(a better-aligned or distilled draft)",
    "draft_cost": "the draft is too costly: each draft step costs a large share of a target step "
                  "(a shallower or narrower draft, or prompt lookup)",
    "verify_cost": "verifying is too costly: scoring γ+1 tokens costs much more than one token "
                   "on this device (compute-bound small-batch kernels; a GPU, or bfloat16, flattens t(k))",
    "overhead": "the loop's overhead is too high: per-iteration work outside the forward passes "
                "(sampling, bookkeeping, Python) eats the gain",
}


@dataclass
class Measurements:
    """What the generalised formula needs, measured for one pair, prompt set and device."""
    alpha: float  # per-token acceptance α (accepted / examined) at the calibration γ
    c: float  # one draft step / one target step (cached one-token passes)
    verify_cost: list[float]  # t(k)/t(1) for k = 1, 2, ..., γ_max + 1
    overhead: float  # h: loop time per iteration beyond the model passes, in units of t(1)
    alpha_per_position: list[float] = field(default_factory=list)  # acceptance at draft position 1, 2, ...
    step_seconds: float = float("nan")  # t(1): one cached target step, seconds
    kernel_path: str = ""  # which matrix kernel the target's linear layers use (kernels.kernel_path)
    calibration_gamma: int = 0  # the γ `overhead` was measured at
    overhead_slope: float = 0.0  # h₁: h grows by this per draft token (0: one h for every γ)
    c_first: float = 0.0  # an iteration's first draft step, right after the target's pass (0: priced as c)

    @property
    def overhead_ms(self) -> float:
        """The loop overhead h per iteration in milliseconds (`overhead` is h itself, in units of t(1))."""
        return self.overhead * self.step_seconds * 1e3

    def overheads(self) -> list[float]:
        """h(γ) for γ = 1..γ_max: h at the calibration γ, plus h₁ per draft token more or less."""
        return [self.overhead + self.overhead_slope * (g - self.calibration_gamma)
                for g in range(1, self.gamma_max + 1)]

    def iteration_extras(self) -> list[float]:
        """What an iteration costs beyond γc and t(γ+1)/t(1), for γ = 1..γ_max: h(γ), and the first draft
        step's price over c (it follows the target's pass, whose weights pushed the draft's out of the
        caches)."""
        cold = cold_extra(self.c_first, self.c)
        return [h + cold for h in self.overheads()]

    @property
    def gamma_max(self) -> int:
        return len(self.verify_cost) - 1


@dataclass
class Verdict:
    best_gamma: int  # the γ with the highest predicted speedup
    predicted_speedup: float  # at best_gamma, from the generalised formula
    pays_off: bool  # predicted speedup > 1
    blame: str | None  # None, or a key of BLAME: the factor that keeps it from paying off
    message: str  # the same, in plain words


def verdict(m: Measurements) -> Verdict:
    """Recommend a γ, or say that speculation will not pay off and which factor is to blame."""
    gamma, s = best_gamma(m.alpha, m.c, m.verify_cost, m.iteration_extras(), m.gamma_max)
    if s > 1:
        return Verdict(gamma, s, True, None, f"Use γ = {gamma}: predicted speedup {s:.2f}× "
                       f"(α = {m.alpha:.2f}, c = {m.c:.3f}, "
                       f"t({gamma + 1})/t(1) = {m.verify_cost[gamma]:.2f}).")
    g_text, s_text = best_gamma(m.alpha, m.c, gamma_max=m.gamma_max)  # free verification, no overhead
    if s_text <= 1:  # even the textbook formula says no: α <= c (section "When does it pay off?")
        blame = "draft_cost" if m.c >= 0.5 else "alpha"
    else:  # the textbook says yes, so the measured costs take the gain away: blame the larger one
        extra_verify = m.verify_cost[g_text] - 1
        blame = "verify_cost" if extra_verify >= m.overhead else "overhead"
    return Verdict(gamma, s, False, blame,
                   f"Speculation will not pay off here: at best {s:.2f}× (γ = {gamma}). "
                   f"To blame: {BLAME[blame]}. Measured α = {m.alpha:.2f}, c = {m.c:.3f}, "
                   f"t(2)/t(1) = {m.verify_cost[1]:.2f}, loop overhead h = {m.overhead:.3f} t(1).")


def position_acceptance(accepted: list[int], drafted: list[int]) -> tuple[list[int], list[int]]:
    """Per draft position 1..γ: (times accepted, times examined), from `Stats.accepted` and `Stats.drafted`.

    Position i is examined when positions < i were all accepted; an iteration that accepted n of d
    draft tokens examined positions 1..min(n + 1, d) and accepted positions 1..n.
    """
    n = max(drafted, default=0)
    acc, exam = [0] * n, [0] * n
    for a, d in zip(accepted, drafted):
        for i in range(min(a + 1, d)):
            exam[i] += 1
            acc[i] += i < a
    return acc, exam


def cost_ratios(target, draft, ks: range, context_len: int,
                rounds: int = 5) -> tuple[list[float], float, float, float]:
    """(t(k)/t(1) for k in ks, c, c right after a target pass, t(1) in seconds): t(k) from interleaved,
    warmed-up passes through the cache the loops use (`models.method.pass_seconds`: the compiled pass where
    the target has one), c from `bench.cost_ratio` (the one estimator of c: each round warmed, median of
    rounds)."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab_size(target), (1, context_len),
                        generator=g).to(next(target.parameters()).device)
    t = pass_seconds(target, list(ks), context_len, repeats=rounds)
    c, c_first = (cost_ratio(target, draft, ids, 3 * rounds, rounds, after_target=a) for a in (False, True))
    return [t[k] / t[1] for k in ks], c, c_first, t[1]


def measure(target, draft, encoded: list[torch.Tensor], *, gamma_max: int = 8,
            calibration_gamma: int | None = None, max_new_tokens: int = 64,
            sampling: SamplingConfig = SamplingConfig(temperature=0), seed: int = 0,
            rounds: int = 5, eos_token_id=None, fit_slope: bool = False) -> Measurements:
    """Measure t(k)/t(1) and c with cached passes, then α and the overhead from the loop at the calibration γ.

    The overhead is what an iteration costs beyond its passes, γc + (c_first - c) + t(γ+1)/t(1) (the first
    draft step follows the target's pass and costs c_first), in units of one step of the same loop
    with an empty draft (plain decoding), timed on the same prompt right before and right after: a ratio
    of neighbouring timings, so it survives a machine whose speed drifts with other people's jobs.
    fit_slope also runs the loop at γ = 1 on every prompt and fits h(γ) = h₀ + γh₁ through the two (each
    draft pass brings work of its own: one h measured at γ = 4 overprices γ = 1 by half on a 2-core CPU).
    """
    if gamma_max < 1:
        raise ValueError(f"gamma_max must be >= 1, got {gamma_max}")
    gamma = calibration_gamma or min(gamma_max, 4)
    # a typical length
    context = int(sum(ids.shape[1] for ids in encoded) / len(encoded)) + max_new_tokens // 2
    verify_cost, c, c_first, t1 = cost_ratios(target, draft, range(1, gamma_max + 2), context, rounds)
    cold = cold_extra(c_first, c)  # the first draft step of an iteration follows the target's pass
    g = torch.Generator(device=encoded[0].device).manual_seed(seed)
    steps, overheads = [], []
    def plain_step(ids) -> float:  # seconds per step of the loop with an empty draft, prefill excluded
        return loop_step_seconds(target, ids, max_new_tokens, sampling, g, eos_token_id)

    at_one = []  # overheads of the loop at γ = 1 (fit_slope)

    def iteration_overheads(ids, gamma: int) -> tuple[list, list[float]]:  # -> (steps, overhead of each)
        before = plain_step(ids)  # plain, speculative, plain: the plain runs bracket the one they time
        spec = timed_steps(target, as_drafter(draft), ids, max_new_tokens, dict(gamma=gamma), sampling, g,
                           eos_token_id)
        step_loop = (before + plain_step(ids)) / 2
        # the first iteration includes the prefill
        return [s for s, _, _ in spec], [dt / step_loop - s.n_drafted * c - (cold if s.n_drafted else 0.0)
                                         - verify_cost[s.n_drafted] for s, dt, _ in spec[1:]]

    for ids in encoded:
        spec, hs = iteration_overheads(ids, gamma)
        steps, overheads = steps + spec, overheads + hs
        if fit_slope and gamma > 1:
            at_one += iteration_overheads(ids, 1)[1]
    accepted, drafted = [s.n_accepted for s in steps], [s.draft_tokens.shape[0] for s in steps]
    acc, exam = position_acceptance(accepted, drafted)
    h = statistics.median(overheads) if overheads else 0.0  # median: robust to load bursts
    slope = (h - statistics.median(at_one)) / (gamma - 1) if at_one else 0.0
    return Measurements(alpha=sum(acc) / sum(exam) if sum(exam) else float("nan"), c=c,
                        verify_cost=verify_cost, overhead=h,
                        alpha_per_position=[a / e if e else float("nan") for a, e in zip(acc, exam)],
                        step_seconds=t1, kernel_path=kernel_path(target), calibration_gamma=gamma,
                        overhead_slope=slope, c_first=c_first)


def measure_speedups(target, drafters: dict, encoded: list[torch.Tensor], max_new_tokens: int,
                     sampling: SamplingConfig, seed: int = 0, eos_token_id=None,
                     progress=None, clock: PassClock | None = None) -> dict[str, Row]:
    """Plain decoding and each named (drafter, γ or {"gamma": γ} or {"tree": TreeBudget}), interleaved
    prompt by prompt; rows of tokens and seconds. A `PassClock` files the target's passes under each name.

    Read a speedup as rows[name].tokens_per_second / rows["plain"].tokens_per_second.
    """
    g = torch.Generator(device=encoded[0].device).manual_seed(seed)
    opts = dict(sampling=sampling, generator=g, eos_token_id=eos_token_id)

    def methods(n: int) -> dict:  # every method, generating n new tokens
        runs = {"plain": lambda ids: autoregressive_generate(target, ids, n, **opts)}
        for name, (drafter, how) in drafters.items():
            how = how if isinstance(how, dict) else dict(gamma=how)
            runs[name] = (lambda d, hw: lambda ids: speculative_generate(target, d, ids, n, **hw, **opts)
                          )(drafter, how)
        return {name: labelled(clock, name, run) for name, run in runs.items()}

    for run in methods(4).values():  # a short warm-up: first calls allocate and load kernels
        run(encoded[0])
    return run_interleaved(methods(max_new_tokens), encoded, progress or (lambda _: None), warmup=False)


# the trees the default is chosen from
TREE_BUDGETS = tuple(m for m in CANDIDATES if isinstance(m, TreeBudget))


def method_taus(target, drafter, encoded: list[torch.Tensor], methods: dict, max_new_tokens: int,
                sampling: SamplingConfig, seed: int = 0, eos_token_id=None,
                draft_passes: dict | None = None, draft_nodes: dict | None = None) -> dict[str, float]:
    """τ, new tokens per target pass (the prefill's pass included), of each method {name: dict(gamma=..) or
    dict(tree=..)}. A feature drafter's first pass drafts nothing (it is the prefill), a model draft's
    does. draft_passes, draft_nodes: dicts to fill with each method's draft passes and drafted tokens per
    iteration (fewer than its budget for a tree that stops early, `TreeBudget.stop`); the drafter must then be
    a `Drafter`."""
    taus = {}
    for name, how in methods.items():
        g = torch.Generator(device=encoded[0].device).manual_seed(seed)
        tokens = passes = drafts = iterations = drafted = 0
        for ids in encoded:
            before = drafter.calls if draft_passes is not None else 0  # a Drafter counts over its lifetime
            out = speculative_generate(target, drafter, ids, max_new_tokens, **how, sampling=sampling,
                                       generator=g, eos_token_id=eos_token_id)
            tokens, passes = tokens + out.tokens.shape[0], passes + out.stats.target_calls
            iterations, drafted = iterations + len(out.stats.accepted), drafted + sum(out.stats.drafted)
            drafts += drafter.calls - before if draft_passes is not None else 0
        taus[name] = tokens / passes if passes else float("nan")
        if draft_passes is not None:
            draft_passes[name] = drafts / iterations if iterations else float("nan")
        if draft_nodes is not None:
            draft_nodes[name] = drafted / iterations if iterations else float("nan")
    return taus


def diagnose(target, draft, encoded: list[torch.Tensor], *, gamma_max: int = 8, max_new_tokens: int = 64,
             sampling: SamplingConfig = SamplingConfig(temperature=0), seed: int = 0, eos_token_id=None,
             trees: tuple[TreeBudget, ...] = TREE_BUDGETS, progress=None) -> dict:
    """Measure, predict the speedup of chains (γ = 1..γ_max) and dynamic trees, measure the best; as a dict.

    The chains are predicted twice: from α by the generalised formula, and from their measured τ like the
    trees, by `models.method.predicted_speedup`, the cost model the loader's default choice uses, on costs
    calibrated the same way (`models.method.calibrate`), so that every method is ranked on the same footing.
    Trees need a drafter that can grow them. For a feature drafter it also measures the head's coverage@k per
    draft depth (`lab.coverage`).
    """
    say = progress or (lambda _: None)
    drafter = as_drafter(draft)
    trees = trees if isinstance(drafter, TreeDrafter) else ()
    k_max = max([gamma_max + 1] + [b.n_nodes + 1 for b in trees])
    say("measuring t(k), c, α and the loop overhead ...")
    m = measure(target, draft, encoded, gamma_max=k_max - 1, max_new_tokens=max_new_tokens, sampling=sampling,
                seed=seed, eos_token_id=eos_token_id, fit_slope=True)
    v = verdict(replace(m, verify_cost=m.verify_cost[:gamma_max + 1]))
    h = m.iteration_extras()
    methods = {method_name(g): dict(gamma=g) for g in range(1, gamma_max + 1)}
    methods.update({method_name(b): dict(tree=b) for b in trees})
    say("measuring τ of every chain and tree ...")
    passes, nodes = {}, {}  # draft passes and drafted tokens per iteration
    taus = method_taus(target, drafter, encoded, methods, max_new_tokens, sampling, seed, eos_token_id,
                       draft_passes=passes, draft_nodes=nodes)
    coverage = None
    if isinstance(drafter, FeatureDrafter):  # what a tree of this head can keep, depth by depth
        say("measuring the feature head's coverage@k per depth ...")
        answers = target_answers(target, encoded, max_new_tokens, eos_token_id)
        cov = coverage_by_depth(target, drafter.head, answers, depth=max([b.depth for b in trees], default=4))
        # by_depth[d - 1][i]: coverage@ks[i] at depth d
        coverage = {"ks": list(cov.ks), "positions": cov.positions,
                    "by_depth": [[row[k] for k in cov.ks] for row in cov.by_depth],
                    "path": [[row[k] for k in cov.ks] for row in cov.path]}
    # calibrated last, right before the speedups it predicts are measured: a shared machine's t(k) moves
    say("calibrating the costs per draft pass, row and iteration "
        "(models.method, as the default choice does) ...")
    costs = calibrate(target, drafter, encoded[0])
    # the loader's choice, on measured τ
    predicted = choose(taus, costs, not sampling.greedy, passes, nodes)[1]  # every method's prediction
    usable = choosable(predicted, drafter, not sampling.greedy)  # what the choice weighs (`method.choosable`)
    best_method = parse_method(max(usable, key=usable.get))
    best = method_name(best_method)
    say(f"measuring the real speedup at γ = {v.best_gamma} and of {best} ...")
    runs = {"speculative": (drafter, dict(gamma=v.best_gamma)), "best method": (drafter, methods[best])}
    with PassClock(target) as clock:
        rows = measure_speedups(target, runs, encoded, max_new_tokens, sampling, seed, eos_token_id, say,
                                clock)
    plain = rows["plain"].tokens_per_second
    in_loop = passes_in_loop(clock, best_method, taus[best], costs, not sampling.greedy, passes.get(best),
                             nodes.get(best))
    return {**asdict(m), "verify_cost": m.verify_cost, "overhead_ms": m.overhead_ms,
            "best_gamma": v.best_gamma,
            "predicted_speedup": v.predicted_speedup,
            "measured_speedup": rows["speculative"].tokens_per_second / plain,
            "measured_alpha": rows["speculative"].alpha,
            "pays_off": v.pays_off, "blame": v.blame, "verdict": v.message,
            "predicted_by_gamma": speedup_by_gamma(m.alpha, m.c, m.verify_cost, h, gamma_max),
            "overhead_by_gamma": dict(zip(range(1, gamma_max + 1), m.overheads())),
            "textbook_by_gamma": {g: predicted_speedup(m.alpha, g, m.c) for g in range(1, gamma_max + 1)},
            "tau_by_method": taus, "predicted_by_method": predicted, "best_method": best,
            "best_method_measured_speedup": rows["best method"].tokens_per_second / plain,
            "passes_in_loop": in_loop,
            "coverage": coverage, "costs": asdict(costs),
            "settings": {"prompts": len(encoded), "max_new_tokens": max_new_tokens, "gamma_max": gamma_max,
                         "trees": [asdict(b) for b in trees], "sampling": asdict(sampling), "seed": seed,
                         "device": str(encoded[0].device), "torch_threads": torch.get_num_threads()}}


def format_report(result: dict) -> str:
    """The diagnosis as a few lines of plain text."""
    lines = [f"kernel path: {result['kernel_path']}",
             f"α = {result['alpha']:.3f} per token; by draft position: "
             + ", ".join(f"{a:.2f}" for a in result["alpha_per_position"]),
             f"c = {result['c']:.3f} "
             f"(draft step / target step; t(1) = {result['step_seconds'] * 1e3:.1f} ms); "
             f"{result.get('c_first', 0.0):.3f} for an iteration's first draft step, right after the "
             "target's pass (its weights out of the caches)",
             "t(k)/t(1), k = 1..: " + ", ".join(f"{x:.2f}" for x in result["verify_cost"]),
             f"loop overhead h = {result['overhead']:.3f} t(1) = "
             f"{result['overhead_ms']:.1f} ms per iteration at γ = {result['calibration_gamma']}"
             + (f", {result['overhead_by_gamma'][1]:.3f} t(1) at γ = 1 (h₀ + γh₁, "
                f"h₁ = {result['overhead_slope']:.3f})" if result.get("overhead_slope") else "")
             + ": the loop's work beyond what c, its first step and the plain step already hold (each is "
             "timed with the work around it, so h can come out near or below 0; scripts/loop_overhead.py "
             "times all of it)",
             "predicted speedup by γ: "
             + ", ".join(f"{g}: {s:.2f}×" for g, s in result["predicted_by_gamma"].items()),
             f"measured at γ = {result['best_gamma']}: {result['measured_speedup']:.2f}× "
             f"(predicted {result['predicted_speedup']:.2f}×)"]
    if result.get("tau_by_method"):
        lines.append("τ and predicted speedup by method: " + ", ".join(
            f"{name}: τ {tau:.2f}, {result['predicted_by_method'][name]:.2f}×"
            for name, tau in result["tau_by_method"].items()))
        lines.append(f"best method by prediction: {result['best_method']}, measured "
                     f"{result['best_method_measured_speedup']:.2f}× "
                     f"(predicted {result['predicted_by_method'][result['best_method']]:.2f}×)")
    if result.get("passes_in_loop"):
        p = result["passes_in_loop"]
        lines.append(f"the target's passes in those runs: plain decoding's {p['plain_ms']:.2f} ms, "
                     f"{result['best_method']}'s ({p['method_rows']:.1f} rows) {p['method_ms']:.2f} ms, "
                     f"{p['ratio']:.2f} times as long where the calibration priced "
                     f"{p['calibrated_ratio']:.2f}; "
                     f"with that price the same cost model predicts {p['repriced_speedup']:.2f}× "
                     "(lab.pass_clock: on a shared machine t(k) moves within seconds)")
    if result.get("coverage"):
        cov = result["coverage"]
        ks = list(cov["ks"])
        lines.append(f"feature head coverage@k by depth ({cov['positions']} answer positions; "
                     "the target's token in the head's top k, its own features fed back):")
        lines += [f"  depth {d}: " + ", ".join(f"top-{k} {x:.2f}" for k, x in zip(ks, row))
                  for d, row in enumerate(cov["by_depth"], 1)]
    lines += ["", result["verdict"]]
    if result.get("tau_by_method"):  # the verdict above weighs chains by α; this line, every method by τ
        best = result["best_method"]
        lines.append(f"Across chains and trees, by measured τ: {best} (predicted "
                     f"{result['predicted_by_method'][best]:.2f}×, measured "
                     f"{result['best_method_measured_speedup']:.2f}×); run it with "
                     f"{method_call(best)}.")
    return "\n".join(lines)


def method_call(name: str) -> str:
    """How to ask speculative_generate for a method named as `models.method.method_name` writes it."""
    method = parse_method(name)
    if isinstance(method, TreeBudget):
        stop = f", stop={method.stop:g}" if method.stop > 0 else ""
        return (f"speculative_generate(..., tree=sd.TreeBudget(depth={method.depth}, topk={method.topk}, "
                f"n_nodes={method.n_nodes}{stop}))")
    return f"speculative_generate(..., gamma={method})"


# ---------------------------------------------------------------------------------------------
# Greedy outputs that differ: a floating-point near-tie, or a bug?
# ---------------------------------------------------------------------------------------------

@dataclass
class Divergence:
    """Where greedy speculative and plain outputs part, and whether rounding can explain it."""
    position: int  # index of the first differing new token
    plain_token: int
    spec_token: int
    gap: float  # the target's logit of its own greedy choice minus its logit of the other token (plain path)
    # largest |logit difference| at that position between a one-pass and a token-by-token score
    rounding: float

    @property
    def near_tie(self) -> bool:
        """Rounding can flip the choice: the two logits are closer than the two ways of computing them
        differ."""
        return self.gap <= 2 * self.rounding

    def __str__(self) -> str:
        verdict = ("a floating-point near-tie: the two scoring paths differ by more than half the gap "
                   "(chapter 3)"
                   if self.near_tie else "NOT a near-tie: rounding cannot explain this; suspect a bug")
        return (f"they part at new token {self.position} (plain {self.plain_token}, speculative "
                f"{self.spec_token}); logit gap {self.gap:.3g} vs rounding {self.rounding:.3g}: {verdict}")


@torch.inference_mode()
def greedy_divergence(target, input_ids: torch.Tensor, plain_tokens: torch.Tensor,
                      spec_tokens: torch.Tensor,
                      ) -> Divergence | None:  # [1, T], [n], [m] -> Divergence | None
    """None if the greedy outputs agree (up to the shorter one); else measure the gap and the rounding there.

    The position's logits are computed twice, as the two loops compute them: token by token with a KV
    cache (plain decoding), and with the whole prefix scored in one pass (a verification-sized pass).
    """
    n = min(plain_tokens.shape[0], spec_tokens.shape[0])
    differ = (plain_tokens[:n] != spec_tokens[:n]).nonzero()
    if differ.numel() == 0:
        return None
    i = int(differ[0])
    prefix = torch.cat([input_ids[0], plain_tokens[:i]])  # [T + i], shared by both outputs
    lm = CachedModel(target)
    step_logits = lm.logits(input_ids[0])[-1]  # [V]
    for t in range(input_ids.shape[1], prefix.shape[0]):
        step_logits = lm.logits(prefix[:t + 1])[-1]
    one_pass = target(input_ids=prefix[None]).logits[0, -1]  # [V]
    a, b = int(plain_tokens[i]), int(spec_tokens[i])
    step_logits, one_pass = step_logits.float(), one_pass.float()
    return Divergence(position=i, plain_token=a, spec_token=b, gap=float(step_logits[a] - step_logits[b]),
                      rounding=float((step_logits - one_pass).abs().max()))
