"""`lab.pass_clock`: the target's passes timed inside the loops, filed by run and rows, and the prediction
priced again with them."""
import math

import pytest
import torch

import specdec_ref as sd
from specdec_ref.cache import COMPILED_PASS
from specdec_ref.lab.pass_clock import PassClock, labelled, passes_in_loop
from specdec_ref.models import method as mm
from specdec_ref.models.toy import tiny_pair


def test_the_clock_files_each_pass_by_run_and_rows_and_leaves_the_model_as_it_was():
    target, draft = tiny_pair(vocab_size=8, seed=0, hidden=16, n_layers=1)
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    logits = sd.cache.CachedModel.logits
    with PassClock(target) as clock:
        labelled(clock, "plain", sd.autoregressive_generate)(target, ids, 6, sampling=sd.SamplingConfig(0))
        out = labelled(clock, "chain", sd.speculative_generate)(target, draft, ids, 6, gamma=2,
                                                                sampling=sd.SamplingConfig(0))
        sd.autoregressive_generate(target, ids, 3)  # no label: not kept
    assert sd.cache.CachedModel.logits is logits  # put back
    plain = [r for r, _ in clock.times["plain"]]
    assert plain[0] == 6 and set(plain[1:]) == {1}  # the prefill, then one row a token
    chain = clock.passes("chain", rows=3)  # the prefill (6 rows) left out
    assert len(chain) == out.stats.target_calls - 1 and all(1 <= r <= 3 for r, _ in chain)
    assert set(clock.times) == {"plain", "chain"} and all(s > 0 for _, s in clock.times["plain"])
    assert clock.median("plain", rows=1) > 0 and clock.mean_rows("plain", rows=1) == 1.0
    assert math.isnan(clock.median("nothing", rows=1))


def test_the_clock_times_a_compiled_pass_through_its_runner_and_puts_it_back():
    calls = []

    class Compiled:
        def runner(self, ids, *rest):
            calls.append(ids.shape[-1])
            return ids

    model, compiled = torch.nn.Linear(1, 1), Compiled()
    model.__dict__[COMPILED_PASS] = compiled
    runner = compiled.runner
    with PassClock(model) as clock:
        clock.label = "run"
        compiled.runner(torch.zeros(1, 4, dtype=torch.long), "kv")
        clock.label = None
        compiled.runner(torch.zeros(1, 2, dtype=torch.long))
    assert compiled.runner == runner and calls == [4, 2]
    assert [r for r, _ in clock.times["run"]] == [4]


def test_a_repriced_prediction_is_the_cost_models_own_when_the_loop_paid_the_calibrated_price():
    costs = mm.Costs({1: 1.0, 2: 1.02, 3: 1.05, 4: 1.1}, 0.05, 0.002, 0.03, 0.02, 0.01)
    method, tau = 2, 1.8

    class Clock(PassClock):  # plain passes of 10 ms, the chain's of 3 rows `ratio` times that
        def __init__(self, ratio):
            super().__init__(None)
            self.times.update(plain=[(1, 0.010)] * 5, **{"best method": [(3, 0.010 * ratio)] * 5})

    same = passes_in_loop(Clock(1.05), method, tau, costs, False)
    assert same["ratio"] == pytest.approx(1.05) and same["calibrated_ratio"] == pytest.approx(1.05)
    assert same["repriced_speedup"] == pytest.approx(mm.predicted_speedup(method, tau, costs))
    assert same["method_rows"] == 3 and same["plain_ms"] == pytest.approx(10.0)
    slower = passes_in_loop(Clock(1.25), method, tau, costs, False)  # power: a steeper pass predicts less
    cost = mm.iteration_cost(method, tau, costs) + 0.20
    assert slower["repriced_speedup"] == pytest.approx(tau / cost)
    assert slower["repriced_speedup"] < same["repriced_speedup"]


def test_bench_puts_the_chosen_defaults_prediction_beside_what_its_pass_cost_in_the_run():
    from specdec_ref.lab.bench import chosen_prediction, format_table
    from specdec_ref.models.choice import Choice
    costs = mm.Costs({1: 1.0, 2: 1.02, 3: 1.05, 4: 1.1}, 0.05, 0.002, 0.03, 0.02, 0.01)
    tree = sd.TreeBudget(2, 2, 3)
    predicted = {"greedy": {"tree 2/2/3": 1.38, "chain γ=2": 1.35}, "T=1": {"chain γ=2": 1.28}}
    choice = Choice(tree, 2, predicted, costs)
    clock = PassClock(None)
    row = "speculative, ours (the chosen default: tree 2/2/3)"
    clock.times.update({"plain (target only)": [(1, 0.010)] * 3, row: [(4, 0.0125)] * 3 + [(30, 0.1)]})
    why = chosen_prediction(choice, tree, sd.SamplingConfig(0), clock, row, 4)
    assert why == {"method": "tree 2/2/3", "predicted": 1.38, "rows": 4, "calibrated_ratio": 1.1,
                   "in_loop_ratio": pytest.approx(1.25)}  # the 30-row prefill left out
    sampled = chosen_prediction(choice, 2, sd.SamplingConfig(1.0), clock, row, 4)
    assert sampled["method"] == "chain γ=2" and sampled["predicted"] == 1.28  # the T = 1 prediction
    result = {"rows": [], "settings": {"gamma": 2}, "alpha": 0.5, "cost_ratio_c": 0.05,
              "predicted_speedup": 1.5}
    assert "chosen default" not in format_table(result)  # no choice (SPECDEC_CALIBRATE=0): no line
    line = format_table({**result, "chosen_default": why}).splitlines()[-1]
    assert "chosen default (tree 2/2/3)" in line and "4-row target pass at 1.10" in line
    assert "(in this run: 1.25)" in line and "1.38×" in line
