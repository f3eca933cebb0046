"""scripts/setup_reader.sh refuses a nearly full disk with a message that says what to do, before pip runs
(a CI run once ran out of space halfway through installing torch, with only pip's OSError to show for it)."""
import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_reader_setup(tmp_path: Path, free_kb: int) -> subprocess.CompletedProcess:
    for name in ("scripts/setup_reader.sh", "scripts/setup.sh", "constraints.txt", "pyproject.toml"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    bin_dir, venv_bin = tmp_path / "fakebin", tmp_path / ".venv-reader" / "bin"
    bin_dir.mkdir()
    venv_bin.mkdir(parents=True)
    # df reports free_kb; the venv's python records any call (it must not be called when the disk is full)
    (bin_dir / "df").write_text("#!/bin/sh\necho 'Filesystem 1024-blocks Used Available Capacity Mounted'\n"
                                f"echo '/dev/x 100000000 1 {free_kb} 1% /'\n")
    (venv_bin / "python").write_text(f"#!/bin/sh\necho called >> {tmp_path}/python_calls\nexit 0\n")
    for f in (bin_dir / "df", venv_bin / "python"):
        f.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", NVIDIA_SMI="false",
               TORCH_CPU_INDEX="http://127.0.0.1:9/none")
    return subprocess.run(["bash", "scripts/setup_reader.sh"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60)


def test_reader_setup_refuses_a_full_disk_before_pip(tmp_path):
    result = run_reader_setup(tmp_path, free_kb=800_000)
    assert result.returncode == 1
    assert "only 781 MB free" in result.stderr and "free some space and rerun" in result.stderr
    assert not (tmp_path / "python_calls").exists()


def test_reader_setup_goes_on_with_room(tmp_path):
    result = run_reader_setup(tmp_path, free_kb=50_000_000)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "python_calls").read_text().count("called") >= 3  # pip, torch, the package
