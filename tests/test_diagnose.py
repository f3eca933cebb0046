"""`diagnose`: the verdict logic on synthetic measurements, and the CLI end to end on the offline pair."""
import json
import os
import subprocess
import sys

import pytest

from specdec_ref.lab.diagnose import Measurements, position_acceptance, verdict
from specdec_ref.lab.speedup import linear_verify_costs


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


def test_position_acceptance_counts_only_examined_positions():
    accepted, examined = position_acceptance(accepted=[0, 3, 1], drafted=[3, 3, 3])
    assert examined == [3, 2, 1] and accepted == [2, 1, 1]


@pytest.mark.slow
def test_cli_diagnose_prints_a_verdict_and_writes_every_json_key(tmp_path):
    path = tmp_path / "d.json"
    out = subprocess.run([sys.executable, "-m", "specdec_ref", "diagnose", "--prompts", "1", "--max-new-tokens", "8",
                          "--gamma-max", "2", "--threads", "1", "--json", str(path)],
                         capture_output=True, text=True, timeout=900, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr
    assert "γ =" in out.stdout and ("Use γ" in out.stdout or "will not pay off" in out.stdout)
    result = json.loads(path.read_text())
    for key in ("alpha", "c", "verify_cost", "overhead", "best_gamma", "predicted_speedup", "measured_speedup"):
        assert key in result
    assert len(result["verify_cost"]) == 3 and result["verify_cost"][0] == 1.0
