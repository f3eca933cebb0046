"""The target's passes timed where the loops run them: what a k-row pass cost inside a generation, against
what a calibration priced it at minutes before.

A calibration times t(k) back to back, in a few seconds (`models.method.pass_seconds`). On a quiet machine
that is what the loop pays. On a shared one the price moves within seconds: on a 2-core AMD EPYC Zen 4 guest,
measured 122 times in two and a half minutes (`scripts/pass_drift.py`), t(1) ranged from 7.6 to 12.9 ms,
t(4)/t(1) from 0.98 to 1.37 and t(9)/t(1) from 1.27 to 2.15 (the measurement log's twenty-third session).
A prediction made from one calibration then misses the speedup measured a minute later, and `lab.diagnose`
uses this clock to say by how much the target's passes moved, and what the same cost model predicts with the
passes as the loop paid for them.

    with PassClock(target) as clock:
        clock.label = "plain"
        autoregressive_generate(target, ids, 64)
    clock.median("plain", rows=2)  # seconds of the passes of at most 2 rows (the prefill's are wider)
"""
from __future__ import annotations

import statistics
from collections import defaultdict

from ..cache import CachedModel, compiled_pass
from ..device import seconds_since, start_timer
from ..models.method import Costs, Method, iteration_cost, target_rows


class PassClock:
    """Seconds of every target pass by the rows it scored, filed under `label`, while the `with` block runs.

    It wraps the compiled pass's runner where the model has one (`models.aot`; each generation's cached model
    takes the runner when it is made), else `CachedModel.logits` for this model (its forward, or its body and
    LM head apart where the loop keeps its features). Passes outside any label are not kept.
    """

    def __init__(self, target):
        self.target, self.label = target, None
        self.times: dict[str, list[tuple[int, float]]] = defaultdict(list)  # label -> [(rows, seconds)]
        self._undo = []

    def __enter__(self) -> PassClock:
        compiled = compiled_pass(self.target)
        if compiled is not None:
            runner = compiled.runner

            def timed(ids, *inputs):  # ids [1, q]: the rows this pass scores
                t0 = start_timer(ids.device)
                out = runner(ids, *inputs)
                self._add(ids.shape[-1], seconds_since(t0, ids.device))
                return out
            compiled.runner = timed
            self._undo.append(lambda: setattr(compiled, "runner", runner))
        else:  # eager: every cached pass of this model, whichever way it runs (with its features or not)
            logits = CachedModel.logits

            def timed_logits(lm, context_ids, *args, **kwargs):
                if lm.model is not self.target:
                    return logits(lm, context_ids, *args, **kwargs)
                rows, device = context_ids.shape[0] - lm.n_cached, context_ids.device
                t0 = start_timer(device)
                out = logits(lm, context_ids, *args, **kwargs)
                self._add(rows, seconds_since(t0, device))
                return out
            CachedModel.logits = timed_logits
            self._undo.append(lambda: setattr(CachedModel, "logits", logits))
        return self

    def __exit__(self, *exc) -> None:
        while self._undo:
            self._undo.pop()()

    def _add(self, rows: int, seconds: float) -> None:
        if self.label is not None:
            self.times[self.label].append((rows, seconds))

    def passes(self, label: str, rows: int) -> list[tuple[int, float]]:
        """The passes filed under label that scored at most `rows` rows (a prompt's prefill scores more)."""
        return [(r, s) for r, s in self.times.get(label, []) if r <= rows]

    def median(self, label: str, rows: int) -> float:
        """The median seconds of those passes (nan if none)."""
        kept = self.passes(label, rows)
        return statistics.median(s for _, s in kept) if kept else float("nan")

    def mean_rows(self, label: str, rows: int) -> float:
        """The mean rows of those passes (nan if none)."""
        kept = self.passes(label, rows)
        return sum(r for r, _ in kept) / len(kept) if kept else float("nan")

    def plain_pass(self, plain: str) -> float:
        """The median seconds of plain decoding's passes filed under `plain`: one new row each (two where a
        compiled pass pads one-row passes, `models.aot_use`), the prefill left out."""
        return self.median(plain, rows=2)

    def over_plain(self, label: str, rows: int, plain: str) -> float:
        """The median pass of at most `rows` rows under label over plain decoding's (`plain_pass`): t(k)/t(1)
        as the loop paid it."""
        return self.median(label, rows) / self.plain_pass(plain)


def labelled(clock: PassClock | None, label: str, run):
    """run, with the clock's label set to `label` while it runs (run unchanged without a clock)."""
    if clock is None:
        return run

    def wrapped(*args, **kwargs):
        clock.label = label
        try:
            return run(*args, **kwargs)
        finally:
            clock.label = None
    return wrapped


def passes_in_loop(clock: PassClock, method: Method, tau: float, costs: Costs, sampled: bool,
                   passes: float | None = None, nodes: float | None = None) -> dict[str, float]:
    """The target's passes in runs filed as "plain" and "best method" (`lab.diagnose.measure_speedups`):
    their median ms, the method's rows and its pass over plain decoding's, against the calibration's price
    for as many rows, and the method's speedup predicted again by the same cost model
    (`models.method.iteration_cost`) with that one price replaced by what the loop paid."""
    rows = target_rows(method)
    r = rows if nodes is None else nodes + 1  # the rows iteration_cost prices the pass at
    ratio, priced = clock.over_plain("best method", rows, "plain"), costs.verify_cost(r)
    cost = iteration_cost(method, tau, costs, sampled, passes, nodes)
    return {"plain_ms": clock.plain_pass("plain") * 1e3, "method_ms": clock.median("best method", rows) * 1e3,
            "method_rows": clock.mean_rows("best method", rows), "ratio": ratio, "calibrated_ratio": priced,
            "repriced_speedup": tau / (cost - priced + ratio)}
