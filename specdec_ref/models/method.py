"""Which method a drafter runs by default (a chain of some γ, or a dynamic tree), chosen by predicted speedup.

Two inputs meet in one cost model:

* the draft's **recorded quality**: τ, the tokens one target pass keeps, for every candidate method, greedy
  and at T = 1, measured once on held-out prompts and shipped beside the weights (`quality.json`, with the
  head's coverage@k per depth and α per draft position, written by `scripts/record_head_quality.py`);
* this machine's **costs**, calibrated in about ten seconds (`calibrate`) and cached on disk per machine,
  dtype, model and package version: t(k)/t(1) for the target, and the loop's cost per draft pass, per extra
  draft row and per iteration, fitted on the iterations of several methods at once.

One iteration costs, in steps of the plain loop (chapter 6's `eq-tree-cost`, with the overhead; the passes
are priced in units of t(1), which the fitted overheads reconcile: `Costs`):

    cost = t(r)/t(1) + Σ_i (c₁ + c_row (m_i - 1)) + (c₁' - c₁) + h₀ + h_node |𝒯| (+ δ + δ_node |𝒯| sampled)

where r is the rows the target scores (γ + 1 for a chain, |𝒯| + 1 for a tree), m_i the rows of draft pass i
(the first feeds the τ tokens the last iteration kept; a chain's later passes score 1 row, a tree's w rows),
c₁ a one-row draft pass, c₁' the first one of an iteration (right after the target's pass, which pushed the
draft's weights out of the caches), c_row each further row, h₀ the loop's own work per iteration and h_node a
tree's per node (growing it, its masks and positions, keeping its path; |𝒯| = 0 for a chain); δ and
δ_node the same when sampling (probabilities over the vocabulary: a sampled tree builds a row and residuals
per node). One h₀ fitted on chains and trees together would price a chain at a tree's bookkeeping. A chain
or greedy tree that a compiled head drafts in one call (`models.aot_chain`, `aot_tree`) has its Σ and c₁'
measured as one price (`Costs.c_chain`, `c_tree`). The predicted speedup is τ / cost.
`lab.diagnose` predicts with the same `predicted_speedup`, from the τ it measures on the spot.
"""
from __future__ import annotations

import hashlib
import json
import statistics
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..cache import SAMPLED_PACKAGES, cached_model, vocab_size
from ..drafters import empty_proposal
from ..device import cache_dir, chip_name, package_version, seconds_since, start_timer
from ..generate import Step, autoregressive_generate, rows_per_pass, speculative_generate
from ..sampling import SamplingConfig
from ..tree import TreeBudget
from .kernels import kernel_path
from .machine_load import LoadMeter, contention, n_cores  # noqa: F401  (n_cores: read as method.n_cores too)

Method = int | TreeBudget  # a chain of γ draft tokens, or an EAGLE-2 dynamic tree
# the small trees first: where t(k) is flat only up to 3-4 rows (a 2-core CPU), 2-3 nodes is all a tree can
# afford; one draft pass (depth 1) drafts the head's best two or three guesses for the next token
CANDIDATES: tuple[Method, ...] = (1, 2, 3, 4, 5, 6, TreeBudget(1, 2, 2), TreeBudget(1, 3, 3),
                                  TreeBudget(2, 2, 3), TreeBudget(2, 2, 4), TreeBudget(3, 3, 6),
                                  TreeBudget(3, 3, 8), TreeBudget(4, 4, 12), TreeBudget(5, 4, 16),
                                  # deeper trees that skip a draft pass where the head is unsure
                                  TreeBudget(4, 2, 5, stop=0.15), TreeBudget(4, 3, 6, stop=0.15),
                                  TreeBudget(4, 3, 6, stop=0.25), TreeBudget(5, 3, 8, stop=0.15))
# (method, sampled): the iterations the costs are fitted on
CALIBRATION = ((1, False), (3, False), (TreeBudget(2, 2, 4), False), (TreeBudget(4, 4, 12), False),
               (3, True), (TreeBudget(2, 2, 4), True), (TreeBudget(4, 4, 12), True))
ROUNDS = 2  # the methods' iterations are timed in this many interleaved rounds
VERIFY_KS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 13, 17)  # t(7) > t(8) with oneDNN in bfloat16 on a Zen 5


def one_call_chains(drafter) -> list[int]:  # the γ whose chains a compiled head drafts in one call, if any
    chains = getattr(getattr(drafter, "head", None), "chains", None)
    return chains.built() if chains is not None else []


def one_call_trees(drafter) -> list[tuple[int, int]]:  # (depth, width) of the greedy trees grown in one call
    trees = getattr(getattr(drafter, "head", None), "trees", None)
    return trees.built() if trees is not None else []


def widest(shape: tuple[int, int]) -> TreeBudget:
    """The candidate tree of this depth and width with the most nodes and no stop: the one calibrated."""
    fits = [m for m in CANDIDATES if isinstance(m, TreeBudget) and (m.depth, m.topk) == shape and not m.stop]
    return max(fits, key=lambda m: m.n_nodes, default=TreeBudget(*shape, shape[0] * shape[1]))


def calibration_methods(drafter) -> tuple[tuple[Method, bool], ...]:
    """CALIBRATION, its chains replaced by those a compiled head drafts in one call and its greedy trees by
    those it grows in one call, where it has any: the only ones the choice then weighs (`choosable`)."""
    chains, trees = one_call_chains(drafter), one_call_trees(drafter)
    kept = [(m, s) for m, s in CALIBRATION
            if not (chains and isinstance(m, int)) and not (trees and isinstance(m, TreeBudget) and not s)]
    return tuple([(g, False) for g in chains] + [(widest(t), False) for t in trees]
                 + [(g, True) for g in chains[-1:]] + kept)


def choosable(taus: dict[str, float], drafter, sampled: bool = False) -> dict[str, float]:
    """The recorded methods the choice weighs: all, less chains not drafted in one call where some are, and
    (greedy) less trees not grown in one call where some are."""
    chains, trees = one_call_chains(drafter), one_call_trees(drafter)

    def weighed(m: Method) -> bool:
        if isinstance(m, int):
            return not chains or m in chains
        return sampled or not trees or (m.depth, m.topk) in trees
    return {name: tau for name, tau in taus.items() if weighed(parse_method(name))}


def one_call_price(method: Method, sampled: bool, c_chain: dict, c_tree: dict) -> float | None:
    """The measured price of a proposal made in one call (`Costs.c_chain`, `Costs.c_tree`), if it is one."""
    if isinstance(method, TreeBudget):
        return None if sampled else c_tree.get(f"{method.depth}/{method.topk}")
    return c_chain.get(str(method))


def method_name(method: Method) -> str:
    """"chain γ=3", "tree 3/3/8" (depth / width / nodes) or "tree 4/2/5 stop 0.15" (`TreeBudget.stop`): the
    names in quality.json and `diagnose`."""
    if not isinstance(method, TreeBudget):
        return f"chain γ={method}"
    stop = f" stop {method.stop:g}" if method.stop > 0 else ""
    return f"tree {method.depth}/{method.topk}/{method.n_nodes}{stop}"


def parse_method(name: str) -> Method:
    """The inverse of `method_name`."""
    name, _, stop = name.partition(" stop ")
    kind, _, rest = name.partition(" ")
    numbers = rest.removeprefix("γ=").split("/")
    if (all(x.isdigit() for x in numbers) and (kind, len(numbers)) in (("chain", 1), ("tree", 3))
            and (not stop or kind == "tree" and stop.replace(".", "", 1).isdigit())):
        if kind == "chain":
            return int(numbers[0])
        return TreeBudget(*(int(x) for x in numbers), stop=float(stop or 0))
    raise ValueError("a method name is 'chain γ=<int>' or 'tree <depth>/<width>/<nodes>' (then optionally "
                     f"' stop <p>'), got {name!r}")


def method_kwargs(method: Method) -> dict:  # how `speculative_generate` is asked for a method
    return dict(tree=method) if isinstance(method, TreeBudget) else dict(gamma=method)


def target_rows(method: Method) -> int:
    """Rows the target scores per iteration: the newest token and the drafted ones."""
    return rows_per_pass(method) + 1


def draft_rows(method: Method, tau: float) -> list[float]:
    """Rows of each draft pass: the first feeds the τ tokens kept last time, then 1 row (chain) or w rows
    (tree)."""
    if isinstance(method, TreeBudget):
        return [tau] + [float(method.topk)] * (method.depth - 1)
    return [tau] + [1.0] * (method - 1)


@dataclass
class Costs:
    """This machine's costs. The passes are ratios of bare passes timed side by side, in units of a one-row
    target pass t(1); the overheads are what is left of timed iterations in steps of the plain loop (s₁
    seconds: t(1) plus the loop's own work), so they also absorb the small difference between the units."""
    verify: dict[int, float]  # k -> t(k)/t(1), a target pass over k new rows after a typical context
    c_pass: float  # c₁: one draft pass over one row, with the loop's work per pass
    c_row: float  # each further row of a draft pass
    h0: float  # the loop's work per iteration beyond its passes
    h_sampled: float  # extra work per iteration when sampling (probabilities over the vocabulary, residuals)
    step_seconds: float  # s₁
    key: str = ""  # what the costs were measured on (`machine_key`)
    threads: int = 0  # torch's CPU threads during the calibration
    cores: int = 0  # the cores this process may run on
    other_load: float = float("nan")  # cores' worth of CPU other processes used meanwhile (nan: unknown)
    h_node: float = 0.0  # a tree's bookkeeping per node (0 in costs saved before it was fitted)
    h_node_sampled: float = 0.0  # and per node when sampling
    c_first: float = 0.0  # the first draft pass of an iteration, after the target's (0: priced as c_pass)
    c_chain: dict[str, float] = field(default_factory=dict)  # "γ": a chain drafted in one call, priced whole
    c_tree: dict[str, float] = field(default_factory=dict)  # "depth/width": a greedy tree grown in one call

    def verify_cost(self, k: float) -> float:  # t(k)/t(1), linear between measured k
        ks = sorted(self.verify)
        return float(np.interp(k, ks, [self.verify[kk] for kk in ks]))


def cold_extra(c_first: float, c: float) -> float:
    """What an iteration's first draft pass costs over the others (0 when c_first was not measured)."""
    return max(c_first - c, 0.0)


def iteration_cost(method: Method, tau: float, costs: Costs, sampled: bool = False,
                   passes: float | None = None, nodes: float | None = None) -> float:
    """One iteration's time in plain-loop steps (the module docstring's cost); passes and nodes: the draft
    passes an iteration makes and the drafted tokens the target scores, on average, where fewer than the
    method's (a tree with `stop` is often smaller than its budget)."""
    rows = draft_rows(method, tau)
    later = (len(rows) if passes is None else passes) - 1  # the passes after the first, all of one width
    draft = costs.c_pass + costs.c_row * (rows[0] - 1) + later * (costs.c_pass + costs.c_row * (rows[-1] - 1))
    draft += cold_extra(costs.c_first, costs.c_pass)
    whole = one_call_price(method, sampled, costs.c_chain, costs.c_tree)
    if whole is not None:  # drafted in one call: its own measured price, and its rows fed
        draft = whole + costs.c_row * (rows[0] - 1)
    rows = target_rows(method) if nodes is None else nodes + 1
    nodes = (rows - 1) * isinstance(method, TreeBudget)  # a tree's bookkeeping is per node
    return (costs.verify_cost(rows) + draft + costs.h0 + costs.h_node * nodes
            + (costs.h_sampled + costs.h_node_sampled * nodes if sampled else 0.0))


def predicted_speedup(method: Method, tau: float, costs: Costs, sampled: bool = False,
                      passes: float | None = None, nodes: float | None = None) -> float:
    """τ tokens per iteration over what the iteration costs: the speedup over plain decoding."""
    return tau / iteration_cost(method, tau, costs, sampled, passes, nodes)


def choose(taus: dict[str, float], costs: Costs, sampled: bool, passes: dict[str, float] | None = None,
           nodes: dict[str, float] | None = None) -> tuple[Method, dict[str, float]]:
    """The method with the highest predicted speedup, from recorded τ (and draft passes and drafted tokens per
    iteration, where recorded) by name -> (method, predictions by name)."""
    passes, nodes = passes or {}, nodes or {}
    predicted = {name: predicted_speedup(parse_method(name), tau, costs, sampled, passes.get(name),
                                         nodes.get(name)) for name, tau in taus.items()}
    return parse_method(max(predicted, key=predicted.get)), predicted


# ---------------------------------------------------------------------------------------------
# Calibration: about ten seconds on a 2-core CPU, cached
# ---------------------------------------------------------------------------------------------

# the terms and how each is found: costs cached under another cost model are measured again
COST_MODEL = (f"h0 + h_node (+ sampled), c_row, c_first, one-call chains and trees measured, t{VERIFY_KS}, "
              f"medians of {ROUNDS} rounds of {[(method_name(m), s) for m, s in CALIBRATION]}")


def machine_key(target, drafter) -> str:
    """What calibrated costs depend on: processor, threads, dtype, models, torch and package versions, the
    attention and compiled packages the passes, drafts and draws run through (a new head package,
    `aot_head.HEAD_FORMAT`, is priced anew)."""
    device = next(target.parameters()).device
    head = getattr(drafter, "head", None)
    head_package = getattr(head, "path", None)  # a compiled head (models.aot_head.CompiledHead): its package
    parts = [COST_MODEL, chip_name(device), device.type, str(torch.get_num_threads()), str(target.dtype),
             torch.__version__, package_version(), type(target).__name__,
             str(target.config.num_hidden_layers), str(target.config.hidden_size), type(drafter).__name__,
             type(head).__name__, kernel_path(target), getattr(head_package, "name", ""),
             str(getattr(target.config, "_attn_implementation", "")), str(one_call_chains(drafter)),
             str(one_call_trees(drafter)), str(SAMPLED_PACKAGES in target.__dict__)]  # + one-call draws
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


@torch.inference_mode()  # as the loops run: with autograd, an offline target pass took 1.8 times as long
def pass_seconds(model, ks: list[int], context_len: int, repeats: int = 3) -> dict[int, float]:
    """Median seconds of a cached target pass over k new rows after context_len tokens, k interleaved, through
    the cache the loops use (`cached_model(cache="auto")`: the compiled pass where the model has one)."""
    device = next(model.parameters()).device
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (context_len + max(ks),), generator=g).to(device)
    lm = cached_model(model, cache="auto")
    lm.logits(ids[:context_len], keep=1)
    times: dict[int, list[float]] = {k: [] for k in ks}
    for r in range(repeats + 1):  # the first round warms up
        for k in ks:
            lm.rollback(context_len)
            t0 = start_timer(device)
            lm.logits(ids[:context_len + k], keep=k)
            if r:
                times[k].append(seconds_since(t0, device))
    return {k: statistics.median(v) for k, v in times.items()}


def timed_steps(target, drafter, ids: torch.Tensor, max_new_tokens: int, how: dict, sampling: SamplingConfig,
                generator: torch.Generator | None, eos_token_id=None) -> list[tuple[Step, float, int]]:
    """One speculative generation (how: dict(gamma=γ) or dict(tree=...)); every iteration with the seconds
    since the previous one ended (nan for the first, which includes the prefill) and the draft passes it
    made."""
    out, last = [], [None, drafter.calls]

    def on_step(step: Step) -> None:
        now = seconds_since(0.0, ids.device)  # synchronises, then perf_counter
        out.append((step, float("nan") if last[0] is None else now - last[0], drafter.calls - last[1]))
        last[0], last[1] = now, drafter.calls

    speculative_generate(target, drafter, ids, max_new_tokens, **how, sampling=sampling, generator=generator,
                         eos_token_id=eos_token_id, on_step=on_step)
    return out


class NoDraft:
    """A drafter that proposes nothing: each iteration is one plain target step, timed by the same loop."""
    default_gamma, wants_target_hidden, calls, n_cached = 1, False, 0, 0

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size

    def propose(self, context_ids, gamma, sampling, generator=None):  # [T] -> ([0], [0, V])
        return empty_proposal(context_ids, self.vocab_size)

    def sync(self, n_kept: int, target_hidden: torch.Tensor | None = None) -> None:
        pass


def loop_step_seconds(target, ids: torch.Tensor, n_tokens: int, sampling: SamplingConfig = SamplingConfig(0),
                      generator: torch.Generator | None = None, eos_token_id=None) -> float:  # ids [1, T]
    """Median seconds of one step of the loop with an empty draft (`NoDraft`: one plain target step each),
    the prefill excluded: the unit every iteration is measured in, robust to a burst of other work."""
    dts = [dt for _, dt, _ in timed_steps(target, NoDraft(vocab_size(target)), ids, n_tokens, dict(gamma=1),
                                          sampling, generator, eos_token_id)]
    return statistics.median(dts[1:] or dts)


def primed_drafter(target, drafter, tokens: torch.Tensor, with_target: bool):  # [T] -> (lm, [T-1, d])
    """The drafter's cache filled with the prompt, to time its passes: with_target (or a feature drafter) runs
    the target over it too, and returns its cached model and the features the drafter reads (else None)."""
    lm = hidden = None
    drafter.sync(0)
    if drafter.wants_target_hidden or with_target:
        lm = cached_model(target, keep_hidden=drafter.wants_target_hidden, cache="auto")
        lm.logits(tokens)
        hidden = lm.hidden[:-1] if drafter.wants_target_hidden else None  # [T-1, d]
    drafter.sync(tokens.shape[0] - 1, hidden)
    drafter.propose(tokens, 1, SamplingConfig(0))  # fills the draft's cache with the prompt, untimed
    return lm, hidden


def timed_draft_pass(drafter, tokens: torch.Tensor, hidden, rows: int = 1, gamma: int = 1,
                     tree: TreeBudget | None = None) -> float:
    """Seconds of one draft pass over the prompt's last `rows` rows, fed again (`primed_drafter` first); with
    gamma > 1, of a whole greedy proposal of gamma tokens; with a tree, of its greedy growth."""
    drafter.sync(tokens.shape[0] - rows, hidden)  # forget the last rows: the pass feeds them again
    t0 = start_timer(tokens.device)
    if tree is None:
        drafter.propose(tokens, gamma, SamplingConfig(0))
    else:
        drafter.propose_tree(tokens, tree, SamplingConfig(0))
    return seconds_since(t0, tokens.device)


@torch.inference_mode()
def draft_pass_seconds(target, drafter, ids: torch.Tensor, repeats: int = 5, rows: int = 1,
                       after_target: bool = False, gamma: int = 1,
                       tree: TreeBudget | None = None) -> float:  # ids [1, T]
    """Median seconds of one draft pass over the prompt's last `rows` rows, fed again, the draft's cache warm
    (`timed_draft_pass`). after_target: each follows a target pass, as an iteration's first draft pass does
    (the target's weights push the draft's out of the caches: 3 times the cost, offline head, Zen 5)."""
    tokens = ids[0]
    lm, hidden = primed_drafter(target, drafter, tokens, after_target)
    times = []
    for r in range(repeats + 2):  # two warm-up rounds
        if after_target:  # the target's pass over the newest token, untimed
            lm.rollback(tokens.shape[0] - 1)
            lm.logits(tokens, keep=1)
        dt = timed_draft_pass(drafter, tokens, hidden, rows, gamma, tree)
        if r >= 2:
            times.append(dt)
    drafter.sync(0)
    return statistics.median(times)


@torch.inference_mode()
def calibrate(target, drafter, ids: torch.Tensor, n_tokens: int = 16) -> Costs:  # ids [1, T]
    """This machine's `Costs` for target and drafter on one prompt (about ten seconds, 2-core CPU). Each
    number is a ratio of neighbouring timings, so a machine whose speed drifts with other work still gets
    sound costs: t(k)/t(1) from interleaved passes (`pass_seconds`), each method's iterations over the plain
    loop's step timed right before and right after them."""
    autoregressive_generate(target, ids, 4)  # warm up
    load = LoadMeter()
    ks = list(VERIFY_KS)
    t = pass_seconds(target, ks, ids.shape[1] + n_tokens // 2, repeats=11)
    # t(k)/t(1), the plain loop's step being t(1) plus a little; more rows never cost less than fewer, so a
    # ratio out of order is noise on one side or the other: the closest ordered prices are fitted
    prices = monotone([max(t[k] / t[1], 1.0) for k in ks])  # t(k)/t(1) at ks, interpolated between them below
    verify = dict(zip(ks, prices))
    # c₁ measured directly (a fit cannot tell a draft pass from the rows it adds), against t(1) around it
    draft_s = draft_pass_seconds(target, drafter, ids)
    t1 = (t[1] + pass_seconds(target, [1], ids.shape[1] + n_tokens // 2, repeats=5)[1]) / 2
    c_pass = draft_s / t1
    c_first = draft_pass_seconds(target, drafter, ids, after_target=True) / t1  # the iteration's first pass
    c_chain = {str(g): draft_pass_seconds(target, drafter, ids, after_target=True, gamma=g) / t1
               for g in one_call_chains(drafter)}  # chains drafted in one call, priced whole
    c_tree = {f"{d}/{w}": draft_pass_seconds(target, drafter, ids, after_target=True, tree=widest((d, w)))
              / t1 for d, w in one_call_trees(drafter)}  # and greedy trees grown in one call
    # c_row too: fitted, it is nearly collinear with h_node (a bigger tree has more nodes and more draft rows)
    wide = min(4, ids.shape[1] - 1)
    c_row = max(draft_pass_seconds(target, drafter, ids, rows=wide) - draft_s, 0.0) / max(wide - 1, 1) / t1
    methods = calibration_methods(drafter)
    rests: dict[tuple[Method, bool], list[float]] = {key: [] for key in methods}
    steps = [loop_step_seconds(target, ids, n_tokens)]
    for method, sampled in methods * ROUNDS:  # every method, then all of them again
        how = method_kwargs(method)
        # the first iterations are the prefill and (a feature drafter) the first feed of the prompt's features
        its = timed_steps(target, drafter, ids, n_tokens, how, SamplingConfig(1.0 if sampled else 0.0),
                          torch.Generator(device=ids.device).manual_seed(0))
        steps.append(loop_step_seconds(target, ids, n_tokens))
        step = (steps[-2] + steps[-1]) / 2  # the unit for this method: the plain loop's step around it
        rest = rests[method, sampled]
        for i, (s, dt, passes) in enumerate(its):
            r = (s.tree.size if s.tree is not None else s.n_drafted) + 1  # rows the target scored
            extra = (passes - 1) * (method.topk if isinstance(method, TreeBudget) else 1) if passes else 0
            kept = its[i - 1][0].n_accepted + 1.0 if i else 1.0  # rows the first draft pass feeds
            extra_rows = max((kept if passes else 0) + extra - passes, 0.0)
            draft = passes * c_pass + (cold_extra(c_first, c_pass) if passes else 0.0) + c_row * extra_rows
            whole = one_call_price(method, sampled, c_chain, c_tree)
            if passes and whole is not None:
                draft = whole + c_row * (kept - 1)
            if i >= 2 and (s.tree is None or s.tree.size == rows_per_pass(method)):  # whole trees only
                rest.append(dt / step - float(np.interp(r, ks, prices)) - draft)
    points = [(float(sampled), float(rows_per_pass(method)) if isinstance(method, TreeBudget) else 0.0,
               statistics.median(rest))  # the median of all rounds' iterations: robust to a burst of work
              for (method, sampled), rest in rests.items() if rest]
    h0, h_s, h_node, h_node_s = fit_loop_costs(points)
    other = load.other_cores() if ids.device.type == "cpu" else float("nan")
    return Costs(verify, c_pass, c_row, h0, h_s, statistics.median(steps), machine_key(target, drafter),
                 torch.get_num_threads(), n_cores(), other, h_node, h_node_s, c_first, c_chain, c_tree)


def monotone(values: list[float]) -> list[float]:
    """The non-decreasing sequence closest to `values` in least squares (pool adjacent violators): a run of
    values out of order is replaced by its mean. One noisy high t(2)/t(1) then moves its neighbours a little,
    where a running maximum would lift every later price to it."""
    blocks: list[tuple[float, int]] = []  # (mean, count)
    for v in values:
        mean, count = float(v), 1
        while blocks and blocks[-1][0] > mean:
            m, n = blocks.pop()
            mean, count = (m * n + mean * count) / (n + count), n + count
        blocks.append((mean, count))
    return [m for m, n in blocks for _ in range(n)]


def fit_loop_costs(points: list[tuple[float, float, float]]) -> tuple[float, float, float, float]:
    """h₀, δ, h_node and δ_node, none below 0 (non-negative least squares), from one point per calibrated
    method: (sampled 0/1, tree nodes |𝒯| (0 for a chain), the median of its iterations' time in plain steps
    less their target pass and draft passes)."""
    from scipy.optimize import nnls  # scipy's import takes a while: only when calibrating
    if not points:
        return 0.0, 0.0, 0.0, 0.0
    p = np.array(points, dtype=float)
    sampled, nodes = p[:, 0], p[:, 1]
    a = np.stack([np.ones_like(nodes), sampled, nodes, sampled * nodes], axis=1)
    h0, h_s, h_node, h_node_s = (float(x) for x in nnls(a, p[:, 2])[0])
    return h0, h_s, h_node, h_node_s


def cache_path(key: str) -> Path:
    return cache_dir() / "calibration" / f"{key}.json"


STEADY = 0.3  # cached costs stand while the plain loop's step is within 30% of the step they were measured at
SHAPE_K, SHAPE = 5, 0.05  # ... and while t(5)/t(1) measured now is within 0.05 of the price they give it


@torch.inference_mode()
def current_step_seconds(target, ids: torch.Tensor) -> float:  # ids [1, T]
    """The plain loop's step right now, in a fraction of a second (a warm-up, then 8 steps of the loop with an
    empty draft): the check on cached costs. The warm-up matters: a model's first pass after loading packs its
    weights (oneDNN) and costs several steps."""
    autoregressive_generate(target, ids, 2)
    return loop_step_seconds(target, ids, 8)


def current_shape(target, ids: torch.Tensor) -> float:  # ids [1, T]
    """t(SHAPE_K)/t(1) right now, from five interleaved rounds of the two passes (a fifth of a second on a
    2-core CPU): the check on the cached prices of verification."""
    t = pass_seconds(target, [1, SHAPE_K], ids.shape[1] + 8, repeats=5)
    return t[SHAPE_K] / t[1]


def calibrated_costs(target, drafter, ids: torch.Tensor, *, refresh: bool = False) -> Costs:
    """`calibrate` once per machine_key; later calls read the cached costs (SPECDEC_CACHE moves the cache).

    Costs are ratios, so they survive a busier or quieter machine, but not one whose speed or verification
    shape moved (a heavy load once priced a draft pass at 0.4 of a step instead of 0.06; one Zen 5 guest's
    t(5)/t(1) went from 1.03 to 1.12 in two hours, and the best tree with it). So cached costs are checked
    against the plain step now (within STEADY) and t(5)/t(1) now (within SHAPE), else measured again. A
    calibration whose machine changed speed while it ran, or that shared its cores with another job
    (`contention`: oversubscribed threads once priced t(2)/t(1) at 2.38 where it is 1.05), is used but not
    cached, with a warning that says how to get a sound one.
    """
    path = cache_path(machine_key(target, drafter))
    if path.exists() and not refresh:
        saved = json.loads(path.read_text())
        costs = Costs(**{**saved, "verify": {int(k): v for k, v in saved["verify"].items()}})
        drift = current_step_seconds(target, ids) / costs.step_seconds
        if abs(drift - 1) > STEADY:
            print(f"calibration: a plain step now takes {drift:.2f}× the cached calibration's; measuring "
                  "again", file=sys.stderr)
        else:
            shape, priced = current_shape(target, ids), costs.verify_cost(SHAPE_K)
            if abs(shape - priced) <= SHAPE:
                return costs
            print(f"calibration: a {SHAPE_K}-row target pass now costs {shape:.2f} one-row passes, the "
                  f"cached calibration priced it at {priced:.2f}; measuring again", file=sys.stderr)
    costs = calibrate(target, drafter, ids)
    problem = contention(costs)
    if problem is not None:
        known = costs.other_load == costs.other_load
        free = max(1, int(costs.cores - costs.other_load + 0.5)) if known else 1
        print(f"calibration: not cached, and the method chosen from it may be off: {problem}. For a sound "
              f"choice, run when the machine is quiet, or give this process the cores it has "
              f"(torch.set_num_threads({free}) before loading); SPECDEC_CALIBRATE=0 skips it",
              file=sys.stderr)
        return costs
    drift = current_step_seconds(target, ids) / costs.step_seconds
    if abs(drift - 1) > STEADY:
        print(f"calibration: the machine's speed moved while it was measured (a plain step after it took "
              f"{drift:.2f}× the step it measured): used now, not cached", file=sys.stderr)
        return costs
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(costs), indent=1))
    return costs
