"""The command line and the benchmark run end to end on the offline pair."""
import json
import subprocess
import sys

import pytest
import torch

import specdec_ref as sd

from specdec_ref.lab.bench import format_table

pytestmark = pytest.mark.slow  # every test here runs the CLI in a subprocess on the real offline pair
# --threads 1: CI runs two test workers on two cores, and a subprocess on two threads beside the other worker
# oversubscribes them (the calibration then takes minutes, and is not cached)


def _run(*args, **env):
    return subprocess.run([sys.executable, "-m", "specdec_ref", *args], capture_output=True, text=True,
                          timeout=900, env={**__import__("os").environ, "HF_HUB_OFFLINE": "1", **env})


def test_cli_generates_and_reports_acceptance_and_speed():
    out = _run("--max-new-tokens", "6", "--prompt", "Say hello.", "--threads", "1", "--gamma", "2")
    assert out.returncode == 0, out.stderr
    assert "acceptance rate" in out.stdout and "tokens/s" in out.stdout and "speedup" in out.stdout
    assert "chain of γ = 2" in out.stdout  # an explicit --gamma overrides the chosen default
    assert "default method:" not in out.stderr  # ... so the loader does not calibrate to choose one


def test_cli_runs_and_names_the_default_method_chosen_on_this_machine():
    out = _run("--max-new-tokens", "6", "--prompt", "Say hello.", "--threads", "1")
    assert out.returncode == 0, out.stderr
    assert "default method:" in out.stderr and "override" in out.stderr  # the choice and how to change it
    assert "method: " in out.stdout and "τ =" in out.stdout and "speedup" in out.stdout
    line = next(s for s in out.stdout.splitlines() if s.startswith("greedy outputs identical: "))
    assert line.endswith(": yes") or ("logit gap" in line and " vs " in line and "]" in line), line


def test_cli_rejects_bad_arguments_with_a_message():
    out = _run("--gamma", "0")
    assert out.returncode != 0 and "gamma" in out.stderr
    out = _run("--temperature", "-1")
    assert out.returncode != 0 and "temperature" in out.stderr


def test_bench_writes_table_and_json_with_every_row(tmp_path):
    path = tmp_path / "bench.json"
    # the default method's calibration is checked above; here the drafter keeps its own default
    out = _run("bench", "--prompts", "1", "--max-new-tokens", "6", "--json", str(path), "--threads", "1",
               SPECDEC_CALIBRATE="0")
    assert out.returncode == 0, out.stderr
    result = json.loads(path.read_text())
    methods = [r["method"] for r in result["rows"]]
    assert methods[0].startswith("plain") and any(m.startswith("speculative") for m in methods)
    assert any("HF assisted, its defaults" in m for m in methods) and any("constant" in m for m in methods)
    assert 0 < result["cost_ratio_c"] and result["predicted_speedup"] > 0
    assert result["command"].startswith("python -m specdec_ref bench")
    assert format_table(result) in out.stdout
    # our rows give the target's pass in the loop (lab.pass_clock), Hugging Face's rows none
    ours = {r["method"]: r for r in result["rows"]
            if "ours" in r["method"] or r["method"].startswith("plain (")}
    assert all(r["target_pass_ms"] > 0 and r["target_pass_rows"] >= 1 for r in ours.values())
    chain = next(r for m, r in ours.items() if m.startswith("speculative, ours (γ="))
    assert chain["target_pass_rows"] <= result["settings"]["gamma"] + 1  # the prefill left out
    assert all(r["target_pass_ms"] is None for r in result["rows"] if r["method"].startswith("HF"))


def test_run_both_ways_pairs_every_run_and_sees_a_switch_that_changes_the_output():
    import contextlib

    from specdec_ref.lab.bench import run_both_ways
    from specdec_ref.models.toy import tiny_pair
    target, draft = tiny_pair(vocab_size=16, seed=0, noise=0.3, hidden=32)
    encoded = [torch.tensor([[1, 2, 3]]), torch.tensor([[4, 5]])]
    methods = {"plain": None, "chain γ=2": dict(gamma=2), "tree 2/2/3": dict(tree=sd.TreeBudget(2, 2, 3))}
    greedy = sd.SamplingConfig(0)
    rows, same = run_both_ways(target, sd.ModelDrafter(draft), encoded, methods, contextlib.nullcontext,
                               max_new_tokens=12, sampling=greedy, rounds=2)
    assert set(rows) == {(on, name) for on in (False, True) for name in methods}
    assert all(row.tokens == 2 * 2 * 12 for row in rows.values()) and len(same) == 2 * 2 * 3 and all(same)

    @contextlib.contextmanager
    def another_target():  # the switch off: a different model, so greedy outputs part
        weight = target.lm_head.weight
        with torch.no_grad():
            saved = weight.clone()
            weight.copy_(torch.randn_like(weight))
        try:
            yield
        finally:
            with torch.no_grad():
                weight.copy_(saved)

    _, same = run_both_ways(target, sd.ModelDrafter(draft), encoded, methods, another_target,
                            max_new_tokens=12, sampling=greedy, rounds=1)
    assert not any(same)
