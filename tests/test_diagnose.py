"""`diagnose`: the verdict logic on synthetic measurements, and the CLI end to end on the offline pair."""
import json
import os
import subprocess
import sys

import pytest
import torch

import specdec_ref as sd
from specdec_ref.lab.diagnose import Measurements, greedy_divergence, position_acceptance, verdict
from specdec_ref.models.toy import tiny_llama
from specdec_ref.lab.speedup import generalized_speedup, linear_verify_costs, speedup_by_gamma


def test_draft_as_costly_as_target_will_not_pay_off_and_blames_the_draft():
    v = verdict(Measurements(alpha=0.7, c=1.0, verify_cost=linear_verify_costs(0.0, 9), overhead=0.0))
    assert not v.pays_off and v.blame == "draft_cost" and "will not pay off" in v.message


def test_cheap_draft_that_is_rarely_accepted_blames_alpha():
    v = verdict(Measurements(alpha=0.05, c=0.1, verify_cost=linear_verify_costs(0.0, 9), overhead=0.0))
    assert not v.pays_off and v.blame == "alpha"


def test_high_alpha_cheap_draft_recommends_gamma_above_one():
    v = verdict(Measurements(alpha=0.85, c=0.05, verify_cost=linear_verify_costs(0.02, 9), overhead=0.02))
    assert v.pays_off and v.best_gamma > 1 and v.predicted_speedup > 2 and f"γ = {v.best_gamma}" in v.message


def test_steep_verify_cost_is_blamed_when_the_textbook_would_pay_off():
    v = verdict(Measurements(alpha=0.4, c=0.05, verify_cost=linear_verify_costs(0.6, 9), overhead=0.02))
    assert not v.pays_off and v.blame == "verify_cost"


def test_loop_overhead_is_blamed_when_it_dominates():
    v = verdict(Measurements(alpha=0.4, c=0.05, verify_cost=linear_verify_costs(0.02, 9), overhead=0.6))
    assert not v.pays_off and v.blame == "overhead"


def test_an_overhead_that_grows_per_draft_token_is_priced_per_gamma():
    # h measured at γ = 4 is 0.2 and grows by 0.05 per draft token: h(1) = 0.05
    m = Measurements(alpha=0.5, c=0.05, verify_cost=linear_verify_costs(0.0, 9), overhead=0.2,
                     calibration_gamma=4, overhead_slope=0.05)
    assert m.overheads()[:4] == pytest.approx([0.05, 0.1, 0.15, 0.2])
    v = verdict(m)
    g = v.best_gamma
    assert v.predicted_speedup == pytest.approx(generalized_speedup(0.5, g, 0.05, 1.0, 0.05 * g))
    # power: one h for every γ prices the short chains at γ = 4's overhead, and so picks a longer one
    flat = verdict(Measurements(alpha=0.5, c=0.05, verify_cost=linear_verify_costs(0.0, 9), overhead=0.2))
    assert flat.best_gamma > g and flat.predicted_speedup < v.predicted_speedup - 0.05


def test_speedup_by_gamma_takes_an_overhead_per_gamma_and_refuses_too_few():
    h = [0.01, 0.02, 0.03]
    got = speedup_by_gamma(0.6, 0.1, linear_verify_costs(0.1, 4), h, gamma_max=3)
    assert got == {g: pytest.approx(generalized_speedup(0.6, g, 0.1, 1 + 0.1 * g, h[g - 1]))
                   for g in (1, 2, 3)}
    with pytest.raises(ValueError, match="overhead per γ"):
        speedup_by_gamma(0.6, 0.1, linear_verify_costs(0.1, 4), h[:2], gamma_max=3)


def test_position_acceptance_counts_only_examined_positions():
    accepted, examined = position_acceptance(accepted=[0, 3, 1], drafted=[3, 3, 3])
    assert examined == [3, 2, 1] and accepted == [2, 1, 1]


@pytest.mark.slow
def test_cli_diagnose_prints_a_verdict_and_writes_every_json_key(tmp_path):
    path = tmp_path / "d.json"
    out = subprocess.run([sys.executable, "-m", "specdec_ref", "diagnose", "--prompts", "1",
                          "--max-new-tokens", "8", "--gamma-max", "2", "--threads", "1", "--json", str(path)],
                         capture_output=True, text=True, timeout=900,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr
    assert "default method:" not in out.stderr  # diagnose calibrates once, itself, not the loader too
    assert "γ =" in out.stdout and ("Use γ" in out.stdout or "will not pay off" in out.stdout)
    result = json.loads(path.read_text())
    for key in ("alpha", "c", "verify_cost", "overhead", "overhead_ms", "best_gamma", "predicted_speedup",
                "measured_speedup", "kernel_path", "tau_by_method", "predicted_by_method", "best_method",
                "best_method_measured_speedup", "overhead_by_gamma", "overhead_slope", "calibration_gamma",
                "passes_in_loop"):
        assert key in result
    in_loop = result["passes_in_loop"]  # the target's passes timed in the measured runs (lab.pass_clock)
    assert in_loop["plain_ms"] > 0 and in_loop["method_ms"] > 0 and in_loop["repriced_speedup"] > 0
    assert "the target's passes in those runs" in out.stdout
    largest_tree = (max(t["n_nodes"] for t in result["settings"]["trees"])
                    if result["settings"]["trees"] else 0)
    assert len(result["verify_cost"]) == max(3, largest_tree + 1) and result["verify_cost"][0] == 1.0
    assert set(result["tau_by_method"]) == set(result["predicted_by_method"]) >= {"chain γ=1", "chain γ=2"}
    assert "kernel path:" in out.stdout and "best method by prediction" in out.stdout
    # the default draft is the feature head where its weights are installed
    if result["coverage"] is not None:
        cov = result["coverage"]
        assert cov["ks"] == [1, 2, 4, 8] and cov["positions"] > 0
        assert all(0 <= x <= 1 for row in cov["by_depth"] + cov["path"] for x in row)
        assert all(p <= c + 1e-9 for prow, crow in zip(cov["path"], cov["by_depth"])
                   for p, c in zip(prow, crow))
        assert "coverage@k by depth" in out.stdout


# --- greedy outputs that differ: near-tie or bug ------------------------------------------------

def test_greedy_divergence_is_none_when_outputs_agree():
    target, ids = tiny_llama(), torch.tensor([[1, 2]])
    plain = sd.autoregressive_generate(target, ids, 8, sampling=sd.SamplingConfig(temperature=0)).tokens
    assert greedy_divergence(target, ids, plain, plain.clone()) is None


def test_a_wrong_token_far_from_the_top_is_not_called_a_near_tie():
    target, ids = tiny_llama(logit_scale=5.0), torch.tensor([[1, 2]])
    plain = sd.autoregressive_generate(target, ids, 8, sampling=sd.SamplingConfig(temperature=0)).tokens
    logits = target(input_ids=torch.cat([ids[0], plain[:3]])[None]).logits[0, -1]
    wrong = plain.clone()
    wrong[3] = int(logits.argmin())  # what a broken loop could emit: the target's least likely token
    split = greedy_divergence(target, ids, plain, wrong)
    assert split.position == 3 and split.plain_token == int(plain[3]) and split.spec_token == int(wrong[3])
    assert split.gap > 1 and not split.near_tie and "suspect a bug" in str(split)


def test_an_exact_tie_is_called_a_near_tie():
    target, ids = tiny_llama(), torch.tensor([[1, 2]])
    plain = sd.autoregressive_generate(target, ids, 4, sampling=sd.SamplingConfig(temperature=0)).tokens
    other = (int(plain[0]) + 1) % target.config.vocab_size
    with torch.no_grad():
        target.lm_head.weight[other] = target.lm_head.weight[int(plain[0])]  # two tokens with equal logits
    tied = plain.clone()
    tied[0] = other
    split = greedy_divergence(target, ids, plain, tied)
    assert split.position == 0 and split.gap == 0 and split.near_tie and "near-tie" in str(split)


# --- choosing between chains and dynamic trees -----------------------------------------------------

def test_method_taus_counts_tokens_per_target_pass_after_the_prefill():
    from specdec_ref.lab.diagnose import method_taus
    from specdec_ref.models.toy import tiny_pair
    target, draft = tiny_pair(vocab_size=8, seed=0, noise=0.0, hidden=32)  # draft == target: all accepted
    taus = method_taus(target, draft, [torch.tensor([[1, 2, 3]])], {"chain γ=3": dict(gamma=3)}, 16,
                       sd.SamplingConfig(0))
    assert taus["chain γ=3"] == pytest.approx(4.0)  # every pass keeps γ + 1 tokens


def test_method_taus_counts_the_draft_passes_an_iteration_makes():
    from specdec_ref.lab.diagnose import method_taus
    from specdec_ref.models.toy import tiny_pair
    target, draft = tiny_pair(vocab_size=8, seed=0, noise=0.5, hidden=32)
    drafter, passes, nodes = sd.ModelDrafter(draft), {}, {}
    methods = {"chain γ=3": dict(gamma=3), "tree 3/2/4": dict(tree=sd.TreeBudget(3, 2, 4)),
               "tree 3/2/4 stop 0.9": dict(tree=sd.TreeBudget(3, 2, 4, stop=0.9))}
    method_taus(target, drafter, [torch.tensor([[1, 2, 3]])], methods, 40, sd.SamplingConfig(0),
                draft_passes=passes, draft_nodes=nodes)
    assert 2.5 < passes["chain γ=3"] <= 3.0 and 2.5 < passes["tree 3/2/4"] <= 3.0  # fewer near the end
    assert passes["tree 3/2/4 stop 0.9"] < passes["tree 3/2/4"] - 0.5  # an unsure draft stops early
    assert 2.5 < nodes["chain γ=3"] <= 3.0 and 3.0 < nodes["tree 3/2/4"] <= 4.0  # drafted tokens scored
    assert nodes["tree 3/2/4 stop 0.9"] < nodes["tree 3/2/4"] - 0.5  # and a smaller tree


def test_the_best_method_line_says_how_to_run_it():
    from specdec_ref.lab.diagnose import method_call
    from specdec_ref.models.method import CANDIDATES, method_name
    assert method_call("chain γ=3") == "speculative_generate(..., gamma=3)"
    assert method_call("tree 2/2/4") == ("speculative_generate(..., "
                                         "tree=sd.TreeBudget(depth=2, topk=2, n_nodes=4))")
    assert method_call("tree 4/2/5 stop 0.15").endswith("n_nodes=5, stop=0.15))")
    for m in CANDIDATES:  # every candidate the default choice may name can be written as a call
        assert method_call(method_name(m)).startswith("speculative_generate(..., ")
    with pytest.raises(ValueError, match="a method name is"):
        method_call("tree 2/2")


def test_an_iterations_first_draft_step_is_priced_at_c_first_beside_the_loop_overhead():
    """h is the loop's own work; the first draft step's price over c (it follows the target's pass) is added
    to every γ's prediction once, so the verdict still sees what an iteration costs."""
    from specdec_ref.lab.diagnose import Measurements, verdict
    base = Measurements(alpha=0.5, c=0.05, verify_cost=[1.0, 1.05, 1.1, 1.15, 1.2], overhead=0.03,
                        calibration_gamma=2)
    cold = Measurements(**{**base.__dict__, "c_first": 0.09})
    assert cold.iteration_extras() == pytest.approx([h + 0.04 for h in base.overheads()])
    assert verdict(cold).predicted_speedup < verdict(base).predicted_speedup
