"""The default method is chosen by predicted speedup: trees where verification is flat, chains where it is
not."""
import json
from dataclasses import replace

import numpy as np
import pytest
import torch

import specdec_ref as sd
from specdec_ref.models import choice as mc
from specdec_ref.models import machine_load
from specdec_ref.models import method as mm
from specdec_ref.models.feature_draft import FeatureHead
from specdec_ref.models.toy import tiny_pair

TAUS = {"chain γ=1": 1.6, "chain γ=2": 2.0, "chain γ=3": 2.2, "tree 2/2/4": 2.3, "tree 4/4/12": 3.0}


def costs(slope: float, c_pass: float = 0.03, h0: float = 0.05) -> mm.Costs:
    """t(k)/t(1) = 1 + slope (k - 1): slope 0 is a flat verification, 0.2 a steep one."""
    return mm.Costs({k: 1 + slope * (k - 1) for k in range(1, 18)}, c_pass, 0.002, h0, 0.02, 0.04)


def test_names_round_trip_and_bad_names_are_refused():
    for m in mm.CANDIDATES:
        assert mm.parse_method(mm.method_name(m)) == m
    with pytest.raises(ValueError, match="chain γ="):
        mm.parse_method("tree of life")
    assert mm.parse_method("tree 4/2/5 stop 0.15") == sd.TreeBudget(4, 2, 5, stop=0.15)
    assert mm.method_name(sd.TreeBudget(4, 2, 5)) == "tree 4/2/5"  # stop 0 is not named
    for bad in ("chain γ=2 stop 0.1", "tree 4/2/5 stop x"):
        with pytest.raises(ValueError, match="stop"):
            mm.parse_method(bad)


def test_iteration_cost_prices_every_draft_pass_and_the_target_rows():
    c = costs(0.1)
    tree = sd.TreeBudget(3, 2, 5)
    # target 6 rows -> 1.5; draft passes: τ rows, then 2 passes of 2 rows; overhead h0
    expect = 1.5 + (0.03 + 0.002 * (2.0 - 1)) + 2 * (0.03 + 0.002) + 0.05
    assert mm.iteration_cost(tree, 2.0, c) == pytest.approx(expect)
    assert mm.iteration_cost(tree, 2.0, c, sampled=True) == pytest.approx(expect + 0.02)
    assert mm.predicted_speedup(tree, 2.0, c) == pytest.approx(2.0 / expect)
    # a tree that stops early: 1.5 draft passes an iteration on average, so half a pass after the first
    fewer = 1.5 + (0.03 + 0.002 * (2.0 - 1)) + 0.5 * (0.03 + 0.002) + 0.05
    assert mm.iteration_cost(tree, 2.0, c, passes=1.5) == pytest.approx(fewer)
    assert mm.iteration_cost(tree, 2.0, c, passes=3) == pytest.approx(expect)  # its full depth
    taus = {"tree 3/2/5": 2.0, "tree 3/2/5 stop 0.2": 1.95}
    assert mm.choose(taus, c, False)[0] == tree  # priced at full depth, the stop loses τ for nothing
    chosen, predicted = mm.choose(taus, c, False, passes={"tree 3/2/5 stop 0.2": 1.5})
    assert chosen == sd.TreeBudget(3, 2, 5, stop=0.2)
    assert predicted["tree 3/2/5"] == pytest.approx(2.0 / expect)
    # and 3 drafted tokens an iteration instead of 5: 4 target rows (t = 1.3) and 3 nodes' bookkeeping
    smaller = expect - (1.5 - 1.3)
    assert mm.iteration_cost(tree, 2.0, c, nodes=3) == pytest.approx(smaller)
    _, predicted = mm.choose(taus, c, False, nodes={"tree 3/2/5": 3})
    assert predicted["tree 3/2/5"] == pytest.approx(2.0 / smaller)


def test_the_first_draft_pass_of_an_iteration_is_priced_at_c_first_once():
    """c_first: the draft pass right after the target's, its weights out of the caches; the others c₁."""
    base = costs(0.1)
    cold = replace(base, c_first=0.08)
    for method in (1, 3, sd.TreeBudget(3, 2, 5)):
        extra = mm.iteration_cost(method, 2.0, cold) - mm.iteration_cost(method, 2.0, base)
        assert extra == pytest.approx(0.08 - 0.03)
    assert mm.iteration_cost(3, 2.0, replace(base, c_first=0.0)) == mm.iteration_cost(3, 2.0, base)


def test_a_chain_drafted_in_one_call_is_priced_at_its_own_measured_cost():
    """c_chain["γ"] replaces the chain's passes and its cold first pass; its fed rows still cost c_row each;
    other chains and trees are priced as before (power: without c_chain the same chain costs the sum)."""
    base = replace(costs(0.1), c_first=0.08)
    one_call = replace(base, c_chain={"2": 0.07})
    expect = base.verify_cost(3) + 0.07 + 0.002 * (2.0 - 1) + base.h0  # τ = 2 rows fed
    assert mm.iteration_cost(2, 2.0, one_call) == pytest.approx(expect)
    assert mm.iteration_cost(2, 2.0, base) == pytest.approx(expect - 0.07 + 2 * 0.03 + (0.08 - 0.03))
    for method in (3, sd.TreeBudget(3, 2, 5)):
        assert mm.iteration_cost(method, 2.0, one_call) == mm.iteration_cost(method, 2.0, base)


def test_a_greedy_tree_grown_in_one_call_is_priced_at_its_own_measured_cost():
    """c_tree["depth/width"] replaces a greedy tree's passes of that depth and width, whatever its nodes; its
    fed rows still cost c_row each; sampled, or of another shape, a tree is priced as before (power: without
    c_tree the same tree costs the sum of its passes)."""
    base = replace(costs(0.1), c_first=0.08)
    grown = replace(base, c_tree={"3/3": 0.09})
    for n in (6, 8):
        tree = sd.TreeBudget(3, 3, n)
        expect = base.verify_cost(n + 1) + 0.09 + 0.002 * (2.0 - 1) + base.h0 + base.h_node * n
        assert mm.iteration_cost(tree, 2.0, grown) == pytest.approx(expect)
        assert mm.iteration_cost(tree, 2.0, base) == pytest.approx(
            expect - 0.09 + 3 * 0.03 + 2 * 2 * 0.002 + (0.08 - 0.03))
        assert mm.iteration_cost(tree, 2.0, grown, sampled=True) == mm.iteration_cost(tree, 2.0, base, True)
    for method in (3, sd.TreeBudget(2, 2, 4), sd.TreeBudget(3, 2, 5)):
        assert mm.iteration_cost(method, 2.0, grown) == mm.iteration_cost(method, 2.0, base)
    assert mm.one_call_price(sd.TreeBudget(3, 3, 8, stop=0.2), False, {}, {"3/3": 0.09}) == 0.09
    assert mm.one_call_price(2, True, {"2": 0.07}, {}) == 0.07  # a chain's package samples too


def test_the_calibration_prices_the_chains_drafted_in_one_call(pair, monkeypatch):
    target, drafter = pair
    monkeypatch.setattr(mm, "one_call_chains", lambda drafter: [2])
    timed, real = [], mm.timed_steps

    def timed_steps(target, drafter, ids, n, how, *args, **kwargs):
        if not isinstance(drafter, mm.NoDraft):
            timed.append(how)
        return real(target, drafter, ids, n, how, *args, **kwargs)
    monkeypatch.setattr(mm, "timed_steps", timed_steps)
    c = mm.calibrate(target, drafter, torch.tensor([[1, 2, 3, 4, 5]]))
    assert list(c.c_chain) == ["2"] and c.c_chain["2"] > 0
    assert dict(gamma=2) in timed and dict(gamma=3) not in timed and dict(gamma=1) not in timed
    monkeypatch.setattr(mm, "one_call_chains", lambda drafter: [])  # power: no such chains, none priced
    assert mm.calibrate(target, drafter, torch.tensor([[1, 2, 3, 4, 5]])).c_chain == {}


def test_draft_passes_after_target_follow_a_target_pass_each():
    from specdec_ref.models.toy import tiny_pair
    target, draft = tiny_pair(vocab_size=8, seed=0)
    calls = []
    target.register_forward_pre_hook(lambda m, a: calls.append(1))
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    mm.draft_pass_seconds(target, sd.ModelDrafter(draft), ids, repeats=3)
    plain = len(calls)
    calls.clear()
    mm.draft_pass_seconds(target, sd.ModelDrafter(draft), ids, repeats=3, after_target=True)
    assert plain == 0  # an LM draft needs no target pass
    assert len(calls) == 1 + 3 + 2  # the prompt, then one before each pass, the 2 warm-up rounds included


def test_a_tree_pays_its_bookkeeping_per_node_and_a_chain_none():
    base, per_node = costs(0.1), replace(costs(0.1), h_node=0.01)
    tree = sd.TreeBudget(3, 2, 5)
    assert mm.iteration_cost(tree, 2.0, per_node) == pytest.approx(mm.iteration_cost(tree, 2.0, base) + 0.05)
    assert mm.iteration_cost(3, 2.0, per_node) == mm.iteration_cost(3, 2.0, base)


def loop_points(h0=0.05, h_node=0.01, delta=0.02, delta_node=0.03):
    """One (sampled, nodes, median cost) per calibrated method, as `calibrate` builds them, on a machine whose
    costs are the arguments: chains (no nodes), trees 2/2/4 and 4/4/12, greedy; a chain and 4/4/12 sampled."""
    methods = ((0.0, 0.0), (0.0, 0.0), (0.0, 4.0), (0.0, 12.0), (1.0, 0.0), (1.0, 12.0))
    return [(s, n, h0 + h_node * n + s * (delta + delta_node * n)) for s, n in methods]


def test_the_fit_tells_a_trees_bookkeeping_from_the_loops_per_iteration_work():
    assert mm.fit_loop_costs(loop_points()) == pytest.approx((0.05, 0.02, 0.01, 0.03))
    # power: without the per-node terms (the model before h_node) a tree's bookkeeping lands on h₀ and δ, and
    # every chain is priced at part of a tree's
    p = np.array(loop_points())
    h0_alone, delta_alone = np.linalg.lstsq(np.stack([np.ones(len(p)), p[:, 0]], 1), p[:, 2], rcond=None)[0]
    assert h0_alone > 0.05 + 0.02 and delta_alone > 0.02 + 0.1


def test_the_fit_never_prices_a_term_below_zero():
    h0, delta, h_node, delta_node = mm.fit_loop_costs(loop_points(delta=-0.03, delta_node=0.0))  # noise
    assert delta == 0.0 and min(h0, h_node, delta_node) >= 0.0


def test_verification_prices_are_the_closest_ordered_ones_not_a_running_maximum():
    """One noisy t(2)/t(1) (a burst of other work) moves its neighbours a little: a running maximum would
    price every tree of up to 8 rows at that one bad timing and hide the flat verification."""
    noisy = [1.0, 1.30, 1.05, 1.05, 1.05, 1.05]  # k = 1..6, flat but for k = 2
    fitted = mm.monotone(noisy)
    assert fitted == pytest.approx([1.0, 1.10, 1.10, 1.10, 1.10, 1.10])
    assert fitted[-1] < 1.15 < np.maximum.accumulate(noisy)[-1]  # power: the running maximum says 1.30
    assert mm.monotone([1.0, 1.02, 1.1, 1.5]) == [1.0, 1.02, 1.1, 1.5]  # ordered prices stand
    rng = np.random.default_rng(0)
    for _ in range(20):  # always ordered, and as dear in total as what was measured (pooling keeps sums)
        v = list(1 + rng.random(10))
        f = mm.monotone(v)
        assert all(a <= b + 1e-12 for a, b in zip(f, f[1:])) and sum(f) == pytest.approx(sum(v))


def test_a_sampled_tree_pays_its_rows_per_node():
    c = replace(costs(0.1), h_node=0.01, h_node_sampled=0.03)
    tree = sd.TreeBudget(3, 2, 5)
    assert (mm.iteration_cost(tree, 2.0, c, sampled=True) - mm.iteration_cost(tree, 2.0, c)
            == pytest.approx(0.02 + 0.03 * 5))
    assert mm.iteration_cost(3, 2.0, c, sampled=True) - mm.iteration_cost(3, 2.0, c) == pytest.approx(0.02)


def test_a_flat_verification_chooses_the_tree_and_a_steep_one_the_chain():
    flat, _ = mm.choose(TAUS, costs(0.0), sampled=False)
    steep, _ = mm.choose(TAUS, costs(0.2), sampled=False)
    assert isinstance(flat, sd.TreeBudget) and flat.n_nodes == 12
    assert isinstance(steep, int)


def test_a_costly_draft_pass_chooses_fewer_draft_passes():
    cheap, _ = mm.choose(TAUS, costs(0.0), sampled=False)
    costly, predicted = mm.choose(TAUS, costs(0.0, c_pass=0.6), sampled=False)
    assert len(mm.draft_rows(cheap, 2.0)) == 4 and len(mm.draft_rows(costly, 2.0)) <= 2
    assert predicted[mm.method_name(costly)] == max(predicted.values())


@pytest.fixture
def pair(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    target, _ = tiny_pair(16, seed=0, hidden=32, n_layers=2, dtype=torch.float32)
    torch.manual_seed(0)
    return target, sd.FeatureDrafter(FeatureHead(target).eval())


def steady_machine(monkeypatch, factor: float = 1.0, other_load: float = 0.0) -> None:
    """The check on cached costs finds the plain step at `factor` times the one the costs were measured at;
    other processes use `other_load` cores meanwhile (nothing else runs, by default, whatever the test
    machine is doing)."""
    monkeypatch.setattr(mm, "current_step_seconds", lambda target, ids: factor * steady_machine.step)
    # and t(5)/t(1) where the costs priced it (a tiny model's passes are too short to judge it by timing)
    monkeypatch.setattr(mm, "current_shape", lambda target, ids: steady_machine.shape)
    monkeypatch.setattr(mm.LoadMeter, "other_cores", lambda self: other_load)
    # a tiny model's passes take microseconds, so a busy test machine can make any t(k)/t(1) look impossible
    monkeypatch.setattr(machine_load, "impossible_verification", lambda costs: None)
    real = mm.calibrate

    def calibrate(*args, **kwargs):
        costs = real(*args, **kwargs)
        steady_machine.step, steady_machine.shape = costs.step_seconds, costs.verify_cost(mm.SHAPE_K)
        return costs
    monkeypatch.setattr(mm, "calibrate", calibrate)


def test_calibration_measures_costs_and_is_cached_per_machine(pair, tmp_path, monkeypatch):
    target, drafter = pair
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    steady_machine(monkeypatch)
    c = mm.calibrated_costs(target, drafter, ids)
    assert c.step_seconds > 0 and 0.2 < c.verify[1] < 5 and min(c.c_pass, c.c_row, c.h0, c.h_sampled) >= 0
    files = list((tmp_path / "calibration").glob("*.json"))
    assert len(files) == 1 and files[0].stem == mm.machine_key(target, drafter)
    files[0].write_text(json.dumps({**json.loads(files[0].read_text()), "h0": 123.0}))
    assert mm.calibrated_costs(target, drafter, ids).h0 == 123.0  # read back, not measured again
    assert mm.calibrated_costs(target, drafter, ids, refresh=True).h0 != 123.0


def test_calibration_times_every_method_in_interleaved_rounds(pair, monkeypatch):
    """Each calibrated method runs ROUNDS times, all methods once before any runs again, so a drift in the
    machine's speed reaches every method alike, and its point is the median of all its rounds' iterations."""
    target, drafter = pair
    order, real = [], mm.timed_steps

    def timed_steps(target, drafter, ids, n, how, sampling, *args, **kwargs):
        if not isinstance(drafter, mm.NoDraft):
            order.append((how.get("tree", how.get("gamma")), sampling.temperature > 0))
        return real(target, drafter, ids, n, how, sampling, *args, **kwargs)
    monkeypatch.setattr(mm, "timed_steps", timed_steps)
    mm.calibrate(target, drafter, torch.tensor([[1, 2, 3, 4, 5]]))
    assert mm.ROUNDS >= 2 and order == list(mm.CALIBRATION) * mm.ROUNDS  # not each method's rounds together


def test_the_machine_key_follows_the_compiled_head_package(pair):
    """A head package of another format (or other weights) is another draft pass: its costs are measured
    again, not read from the old package's calibration."""
    from pathlib import Path
    target, drafter = pair

    class Compiled:  # what machine_key reads of a models.aot_head.CompiledHead
        def __init__(self, name):
            self.path = Path("/cache/aot") / name

    keys = []
    for head in (Compiled("a.pt2"), Compiled("a.pt2"), Compiled("b.pt2")):
        drafter.head = head
        keys.append(mm.machine_key(target, drafter))
    assert keys[0] == keys[1] and keys[1] != keys[2]  # power: the same package, the same key


class _Chains:  # what the choice reads of a models.aot_chain.CompiledChains
    def __init__(self, built):
        self._built = built

    def built(self):
        return self._built


class _WithChains:  # a drafter whose compiled head drafts these chains in one call
    def __init__(self, built):
        self.head = type("Head", (), {"chains": _Chains(built)})()


def test_chains_drafted_in_one_call_are_the_chains_calibrated_and_chosen():
    """Where the head drafts some chains in one call (cheaper than pass by pass), the calibration times those
    chains in place of its own, and the choice weighs no other chain; trees stay. Without such packages,
    nothing changes (power: the filter and the replacement act only then)."""
    plain, chained = _WithChains([]), _WithChains([2])
    assert mm.calibration_methods(plain) == mm.CALIBRATION == mm.calibration_methods(object())
    methods = mm.calibration_methods(chained)
    assert [m for m in methods if isinstance(m[0], int)] == [(2, False), (2, True)]
    trees = [m for m in mm.CALIBRATION if isinstance(m[0], sd.TreeBudget)]
    assert [m for m in methods if isinstance(m[0], sd.TreeBudget)] == trees
    assert len({s for _, s in methods}) == 2  # greedy and sampled both timed
    taus = {"chain γ=1": 1.5, "chain γ=2": 1.8, "chain γ=3": 2.0, "tree 2/2/4": 2.2}
    assert mm.choosable(taus, plain) == taus
    assert mm.choosable(taus, chained) == {"chain γ=2": 1.8, "tree 2/2/4": 2.2}
    assert mm.one_call_chains(chained) == [2] and mm.one_call_chains(plain) == []


class _WithTrees:  # a drafter whose compiled head drafts these chains and grows these greedy trees at once
    def __init__(self, chains, trees):
        self.head = type("Head", (), {"chains": _Chains(chains), "trees": _Chains(trees)})()


def test_greedy_trees_grown_in_one_call_are_the_greedy_trees_calibrated_and_chosen():
    """Where the head grows greedy trees of some shapes in one call, the calibration times the widest
    candidate of each in place of its own greedy trees, and the greedy choice weighs no other tree; sampled
    trees stay (they grow pass by pass). Without such packages, nothing changes (power)."""
    grown = _WithTrees([2], [(2, 2), (3, 3)])
    methods = mm.calibration_methods(grown)
    assert [m for m, s in methods if isinstance(m, sd.TreeBudget) and not s] == [
        sd.TreeBudget(2, 2, 4), sd.TreeBudget(3, 3, 8)]
    assert [m for m, s in methods if isinstance(m, sd.TreeBudget) and s] == [
        m for m, s in mm.CALIBRATION if isinstance(m, sd.TreeBudget) and s]
    assert [m for m in methods if isinstance(m[0], int)] == [(2, False), (2, True)]
    assert mm.calibration_methods(_WithTrees([], [])) == mm.CALIBRATION
    taus = {"chain γ=2": 1.8, "chain γ=3": 2.0, "tree 2/2/4": 2.2, "tree 3/3/6": 2.3, "tree 3/3/8": 2.4,
            "tree 4/3/6 stop 0.25": 2.3, "tree 4/4/12": 2.5}
    assert mm.choosable(taus, grown) == {"chain γ=2": 1.8, "tree 2/2/4": 2.2, "tree 3/3/6": 2.3,
                                         "tree 3/3/8": 2.4}
    assert mm.choosable(taus, grown, sampled=True) == {k: v for k, v in taus.items() if k != "chain γ=3"}
    assert mm.choosable(taus, _WithTrees([], [])) == taus
    assert mm.widest((3, 3)) == sd.TreeBudget(3, 3, 8) and mm.widest((6, 2)) == sd.TreeBudget(6, 2, 12)


def test_the_calibration_prices_the_greedy_trees_grown_in_one_call(pair, monkeypatch):
    target, drafter = pair
    monkeypatch.setattr(mm, "one_call_trees", lambda drafter: [(2, 2)])
    timed, real = [], mm.timed_steps

    def timed_steps(target, drafter, ids, n, how, sampling, *args, **kwargs):
        if not isinstance(drafter, mm.NoDraft):
            timed.append((how, sampling.greedy))
        return real(target, drafter, ids, n, how, sampling, *args, **kwargs)
    monkeypatch.setattr(mm, "timed_steps", timed_steps)
    c = mm.calibrate(target, drafter, torch.tensor([[1, 2, 3, 4, 5]]))
    assert list(c.c_tree) == ["2/2"] and c.c_tree["2/2"] > 0
    assert (dict(tree=sd.TreeBudget(2, 2, 4)), True) in timed  # greedy: only the tree grown in one call
    assert (dict(tree=sd.TreeBudget(4, 4, 12)), True) not in timed
    assert (dict(tree=sd.TreeBudget(4, 4, 12)), False) in timed  # sampled trees as before
    monkeypatch.setattr(mm, "one_call_trees", lambda drafter: [])  # power: no such trees, none priced
    assert mm.calibrate(target, drafter, torch.tensor([[1, 2, 3, 4, 5]])).c_tree == {}


def test_a_machine_key_changes_with_the_chains_drafted_in_one_call(pair):
    target, drafter = pair
    keys = []
    for built in ([], [2], [2]):
        drafter.head = _WithChains(built).head
        keys.append(mm.machine_key(target, drafter))
    assert keys[0] != keys[1] == keys[2]


def test_a_machine_key_changes_with_the_compiled_draws(pair, monkeypatch):
    """The loop's sampled work is cheaper with `models.aot_verdict`'s programs: a calibration made without
    them is not reused with them."""
    from specdec_ref.cache import SAMPLED_PACKAGES
    target, drafter = pair
    before = mm.machine_key(target, drafter)
    monkeypatch.setitem(target.__dict__, SAMPLED_PACKAGES, object())
    assert mm.machine_key(target, drafter) != before
    monkeypatch.delitem(target.__dict__, SAMPLED_PACKAGES)
    assert mm.machine_key(target, drafter) == before


def calibrated_once(pair, monkeypatch):
    """A steady machine's costs, calibrated and cached once: (target, drafter, ids, the cache file, its
    contents)."""
    target, drafter = pair
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    steady_machine(monkeypatch)
    path = mm.cache_path(mm.machine_key(target, drafter))
    mm.calibrated_costs(target, drafter, ids)
    return target, drafter, ids, path, json.loads(path.read_text())


def test_cached_costs_are_measured_again_when_the_machine_changed_speed(pair, tmp_path, monkeypatch, capsys):
    target, drafter, ids, path, saved = calibrated_once(pair, monkeypatch)
    shape = steady_machine.shape  # t(5)/t(1) as the saved costs priced it
    path.write_text(json.dumps({**saved, "h0": 123.0, "step_seconds": saved["step_seconds"] * 10}))
    # calibrated under a load that made every step 10x slower: the quiet machine measures again
    assert mm.calibrated_costs(target, drafter, ids).h0 != 123.0
    assert "measuring again" in capsys.readouterr().err
    # the machine back at the first calibration's speed and shape (the second calibration's own t(5)/t(1),
    # timed on a tiny model, may differ from the first's by more than the check allows on a busy machine)
    steady_machine.step, steady_machine.shape = saved["step_seconds"], shape
    path.write_text(json.dumps({**saved, "h0": 123.0, "step_seconds": saved["step_seconds"] * 1.2}))
    assert mm.calibrated_costs(target, drafter, ids).h0 == 123.0  # power: within STEADY it is reused


def test_cached_costs_are_measured_again_when_verification_got_steeper_or_flatter(pair, monkeypatch, capsys):
    """The same plain step, but t(5)/t(1) moved: the trees' prices changed, so the costs are measured
    again."""
    target, drafter, ids, path, saved = calibrated_once(pair, monkeypatch)
    path.write_text(json.dumps({**saved, "h0": 123.0}))
    priced = steady_machine.shape
    for moved in (priced + 2 * mm.SHAPE, priced - 2 * mm.SHAPE):
        steady_machine.shape = moved
        # the plain step as the cache has it: a recalibration above timed its own, and a tiny model's steps
        # vary enough on a busy machine to be judged a change of speed instead
        steady_machine.step = saved["step_seconds"]
        assert mm.calibrated_costs(target, drafter, ids).h0 != 123.0
        assert "5-row target pass now costs" in capsys.readouterr().err
        path.write_text(json.dumps({**saved, "h0": 123.0}))
    steady_machine.shape = priced + mm.SHAPE / 2  # power: within SHAPE the cached costs are reused
    steady_machine.step = saved["step_seconds"]  # (a recalibration above timed its own step)
    assert mm.calibrated_costs(target, drafter, ids).h0 == 123.0


def test_current_shape_times_a_five_row_pass_against_a_one_row_pass(pair):
    target, _ = pair
    shape = mm.current_shape(target, torch.tensor([[1, 2, 3, 4, 5]]))
    assert 0.2 < shape < 20  # a ratio of two pass times of the same model, not seconds


def test_a_calibration_the_machine_drifted_under_is_used_but_not_cached(pair, tmp_path, monkeypatch, capsys):
    target, drafter = pair
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    steady_machine(monkeypatch, factor=2.0)  # right after calibrating, a step takes twice as long
    costs = mm.calibrated_costs(target, drafter, ids)
    assert costs.step_seconds > 0 and not mm.cache_path(mm.machine_key(target, drafter)).exists()
    assert "not cached" in capsys.readouterr().err


def test_a_calibration_beside_another_job_is_used_but_not_cached(pair, monkeypatch, capsys):
    target, drafter = pair
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    cores = mm.n_cores()
    steady_machine(monkeypatch, other_load=cores)  # another job holds every core: the threads share them
    costs = mm.calibrated_costs(target, drafter, ids)
    assert mm.contention(costs) is not None and not mm.cache_path(mm.machine_key(target, drafter)).exists()
    assert "not cached" in capsys.readouterr().err
    # power: the same calibration with the other job on the cores it leaves free is cached
    steady_machine(monkeypatch, other_load=max(cores - torch.get_num_threads(), 0))
    costs = mm.calibrated_costs(target, drafter, ids)
    assert mm.contention(costs) is None and mm.cache_path(mm.machine_key(target, drafter)).exists()


def test_contention_reads_oversubscription_and_impossible_verification_costs():
    quiet = costs(0.05)
    quiet.threads, quiet.cores, quiet.other_load = 2, 2, 0.1
    assert mm.contention(quiet) is None
    busy = mm.Costs(**{**quiet.__dict__, "other_load": 1.0})  # 2 threads beside a 1-core job on 2 cores
    assert "shared cores" in mm.contention(busy)
    assert mm.contention(mm.Costs(**{**quiet.__dict__, "threads": 1, "other_load": 1.0})) is None
    noisy = mm.Costs(**{**quiet.__dict__, "verify": {1: 1.0, 2: 2.38, 3: 2.4}})  # a load burst at k = 2
    assert "2-row target pass at 2.38" in mm.contention(noisy)
    unknown = mm.Costs(**{**quiet.__dict__, "other_load": float("nan")})  # no /proc/stat: nothing says so
    assert mm.contention(unknown) is None


def test_the_summary_recommends_plain_decoding_only_when_no_method_is_predicted_faster():
    assert mc.plain_is_faster(1.2, 1.1) is None
    assert "greedy" in mc.plain_is_faster(0.9, 1.1) and "sampling" not in mc.plain_is_faster(0.9, 1.1)
    assert "greedy or when sampling" in mc.plain_is_faster(0.9, 0.95)
    choice = mc.Choice(1, 1, {"greedy": {"chain γ=1": 0.9}, "T=1": {"chain γ=1": 1.05}}, costs(0.1))
    assert "sd.autoregressive_generate" in choice.summary()
    choice.predicted["greedy"]["chain γ=1"] = 1.01  # power: above 1x, no such line
    assert "autoregressive_generate" not in choice.summary()


def test_defaults_drive_the_one_line_call_greedy_and_sampled_separately(pair):
    target, drafter = pair
    drafter.defaults = {"greedy": sd.TreeBudget(2, 2, 3), "sampled": 2}
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    for sampling, is_tree in ((sd.SamplingConfig(0), True), (sd.SamplingConfig(1.0), False)):
        steps = []
        sd.speculative_generate(target, drafter, ids, 10, sampling=sampling, on_step=steps.append,
                                generator=torch.Generator().manual_seed(0))
        assert {s.tree is not None for s in steps} == {is_tree}


def test_default_methods_reads_quality_calibrates_and_can_be_switched_off(pair, tmp_path, monkeypatch,
                                                                           capsys):
    target, drafter = pair

    asked = []

    def encode(prompt):  # the loader's encode_chat for the target's tokenizer
        asked.append(prompt)
        return torch.tensor([[1, 2, 3, 4, 5]])

    quality = tmp_path / "quality.json"
    # no quality file: keep the drafter's own
    assert mc.default_methods(target, drafter, encode, quality) is None and not asked
    quality.write_text(json.dumps({"tau": {"greedy": TAUS, "T=1": TAUS}}))
    chosen = mc.default_methods(target, drafter, encode, quality)
    assert set(chosen) == {"greedy", "sampled", "choice"} and "default method:" in capsys.readouterr().err
    assert (chosen["choice"].greedy, chosen["choice"].sampled) == (chosen["greedy"], chosen["sampled"])
    assert asked == [mc.CALIBRATION_PROMPT]  # calibrated on the loader's own prompt
    monkeypatch.setenv("SPECDEC_CALIBRATE", "0")
    assert mc.default_methods(target, drafter, encode, quality) is None


def test_pass_timings_run_in_inference_mode_as_the_loops_do():
    """`pass_seconds` and `draft_pass_seconds` time the passes as the loops run them, without autograd, from
    any caller (`diagnose` calls them outside inference mode; with autograd a pass of the offline target
    took 1.8 times as long)."""
    from specdec_ref.models.toy import tiny_pair
    target, draft = tiny_pair(vocab_size=8, seed=0)
    modes = []
    for model in (target, draft):
        model.register_forward_pre_hook(lambda m, a: modes.append(torch.is_inference_mode_enabled()))
    mm.pass_seconds(target, [1, 2], 4, repeats=1)
    mm.draft_pass_seconds(target, sd.ModelDrafter(draft), torch.tensor([[1, 2, 3, 4, 5]]), repeats=1)
    assert modes and all(modes)
