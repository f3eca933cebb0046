"""The GPU check: timing logic on made-up numbers, the no-CUDA path, a CPU dry run of it all, staging."""
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from specdec_ref.lab import gpu_check

ROOT = Path(__file__).resolve().parent.parent


def test_clocks_within_ten_percent_agree():
    # medians 10.5 vs 10.0 ms
    r = gpu_check.compare_timings([0.0105, 0.0104, 0.0200], [0.0100, 0.0101, 0.0099])
    assert r.agree and r.relative_gap == pytest.approx(0.05)
    assert str(r).startswith("PASS")


def test_clocks_more_than_ten_percent_apart_disagree():
    r = gpu_check.compare_timings([0.0120, 0.0121], [0.0100, 0.0100])  # a timer that counts launch overhead
    assert not r.agree and str(r).startswith("FAIL")
    assert not gpu_check.compare_timings([0.0080], [0.0100]).agree  # too fast: work left unfinished


def test_compare_timings_rejects_empty_or_nonpositive_input():
    with pytest.raises(ValueError, match="at least one"):
        gpu_check.compare_timings([], [0.01])
    with pytest.raises(ValueError, match="positive"):
        gpu_check.compare_timings([0.01], [0.0])


@pytest.mark.skipif(torch.cuda.is_available(), reason="tests the path for machines without CUDA")
def test_without_cuda_the_module_says_so_and_exits_0():
    run = subprocess.run([sys.executable, "-m", "specdec_ref.lab.gpu_check"], capture_output=True, text=True)
    assert run.returncode == 0 and "no CUDA" in run.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="tests the path for machines without CUDA")
def test_without_cuda_the_script_says_so_and_exits_0():
    run = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh")], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable})
    assert run.returncode == 0, run.stderr
    assert "no CUDA" in run.stdout


# ---------------------------------------------------------------------------------------------
# The check as the GPU machine runs it, dry-run on the CPU: its results fit what comes back
# ---------------------------------------------------------------------------------------------

RESULT_LIMITS = dict(files=8, depth=2, bytes=16 * 2**20)  # what the device machine returns from $OUT


def _dry_run(tmp_path, **env):
    out = tmp_path / "OUT"
    out.mkdir()
    env = {"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "OUT": str(out), "HOME": str(tmp_path),
           "OMP_NUM_THREADS": "1", "GPU_CHECK_DRY_RUN": "1", **env}
    run = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh")], capture_output=True, text=True,
                         timeout=300, env=env)
    return run, out


def test_dry_run_writes_a_summary_line_per_part_and_results_that_fit_the_device_limits(tmp_path):
    run, out = _dry_run(tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    files = [p for p in out.rglob("*") if p.is_file()]
    assert 0 < len(files) <= RESULT_LIMITS["files"]
    assert all(len(p.relative_to(out).parts) - 1 <= RESULT_LIMITS["depth"] for p in files)
    assert all(p.stat().st_size <= RESULT_LIMITS["bytes"] for p in files)
    summary = json.loads((out / "gpu_check" / "summary.json").read_text())
    assert [p["part"] for p in summary["parts"]] == ["timing", "tiny", "side-by-side", "chapters"]
    assert summary["ok"] and {p["part"]: p["status"] for p in summary["parts"]}["tiny"] == "PASS"
    assert "overflow -> " in summary["parts"][1]["detail"]  # the float16 probe fell back on the GPU path
    rows = [r["method"] for r in json.loads((out / "gpu_check" / "side_by_side.json").read_text())["rows"]]
    for want in ("plain, eager", "plain, static", "HF generate, plain", "HF assisted, γ=3 constant",
                 "ours, chain γ=3, eager", "ours, chain γ=3, static", "ours, dynamic tree"):
        assert any(r.startswith(want) for r in rows), (want, rows)
    assert (out / "gpu_check" / "side_by_side.png").stat().st_size > 1000
    assert run.stdout.count("side-by-side") >= 2  # its line right after the part, and again in the summary


def test_a_spent_budget_skips_the_remaining_parts_and_says_so(tmp_path):
    run, out = _dry_run(tmp_path, GPU_CHECK_BUDGET="5")
    assert run.returncode == 0, run.stdout + run.stderr
    parts = json.loads((out / "gpu_check" / "summary.json").read_text())["parts"]
    assert {p["part"]: p["status"] for p in parts}["tiny"] == "SKIP" and "no time left" in parts[1]["detail"]


def test_the_chapters_run_one_at_a_time_without_xdist_each_under_a_timeout():
    script = (ROOT / "scripts" / "gpu_check.sh").read_text()
    pytest_lines = [line for line in script.splitlines() if "-m pytest" in line]
    assert pytest_lines and all("-p no:xdist" in line and " -n " not in line for line in pytest_lines)
    assert "--nbmake-timeout" in script
    assert script.count("timeout -k") == 1 and 'part "chapter' in script  # every part goes through part()


def test_a_failing_row_keeps_its_error_and_the_others_go_on():
    calls = []
    ok = gpu_check.Method("ok", lambda ids: (calls.append(1), (4, 0.5))[1])
    bad = gpu_check.Method("bad", lambda ids: 1 / 0)
    rows = gpu_check.side_by_side([bad, ok], [torch.zeros(1, 3), torch.zeros(1, 5)])
    assert rows[0]["error"].startswith("ZeroDivisionError") and rows[0]["tokens"] == 0
    assert rows[1]["error"] is None and rows[1]["tokens"] == 8 and len(calls) == 3  # warm-up + 2 prompts


def test_tiny_pairs_are_small_padded_past_their_tokenizer_and_one_overflows_float16(tmp_path):
    from transformers import AutoConfig, AutoTokenizer
    saved = gpu_check.make_tiny_pairs(tmp_path)
    assert len(saved) == 6 and sum(f.stat().st_size for f in tmp_path.rglob("*") if f.is_file()) < 8 * 2**20
    tok = AutoTokenizer.from_pretrained(tmp_path / "qwen2-target")
    assert type(tok).__name__ == "Qwen2Tokenizer" and tok("why the sky is blue").input_ids  # the Hub's class
    sizes = {p.name: AutoConfig.from_pretrained(p).vocab_size for p in saved}
    assert min(sizes.values()) > len(tok) and sizes["qwen2-target"] != sizes["qwen2-draft"]


# ---------------------------------------------------------------------------------------------
# Staging: only what the image lacks, a checksum per part
# ---------------------------------------------------------------------------------------------

STAGE = ROOT / "scripts" / "gpu_stage.sh"


def test_staging_never_carries_what_the_gpu_image_has():
    script = STAGE.read_text()
    has = set(script.split('IMAGE_HAS="')[1].split('"')[0].split())
    assert {"pytest", "requests", "pyyaml", "numpy", "torch", "transformers", "matplotlib"} <= has
    assert not {"nbmake", "ipykernel", "ipywidgets", "gguf", "nbclient", "nbformat"} & has
    assert ". .venv" not in script and "--no-deps" in script


def _stage(tmp_path, parts):
    stage = tmp_path / "stage"
    stage.mkdir()
    sums = []
    for name, data in parts.items():
        (stage / name).write_bytes(data)
        sums.append(f"{hashlib.sha256(data).hexdigest()}  {name}")
    (stage / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    return stage


def _stage_cmd(stage, verb):
    return subprocess.run(["bash", str(STAGE), verb], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "STAGE_DIR": str(stage), "OUT": str(stage / "out")})


def test_each_part_is_checked_as_it_arrives_and_missing_ones_are_named(tmp_path):
    stage = _stage(tmp_path, {"part_aa": b"a" * 100, "part_ab": b"b" * 50})
    (stage / "part_ab").unlink()  # not sent yet
    run = _stage_cmd(stage, "receive")
    assert run.returncode == 0 and "part_aa OK" in run.stdout and "still to send: part_ab" in run.stdout
    run = _stage_cmd(stage, "device")
    assert run.returncode == 3 and "send part_ab" in run.stderr


def test_a_corrupted_part_is_refused_and_removed(tmp_path):
    stage = _stage(tmp_path, {"part_aa": b"a" * 100})
    (stage / "part_aa").write_bytes(b"a" * 99 + b"!")
    run = _stage_cmd(stage, "receive")
    assert run.returncode == 1 and "FAILS its checksum" in run.stderr and not (stage / "part_aa").exists()
