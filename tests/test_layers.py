"""The house rules that keep the package readable, checked so that they stay true: import layers without
cycles or upward imports (import-linter, configured in pyproject.toml), at most 10 top-level modules, none
over 500 lines, and an opening docstring on every module."""
import ast
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "specdec_ref"


def layer_names(container: str | None = None) -> set[str]:
    """The modules the layers contract names: the package's own (no container), or a container's."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    return {name.strip() for c in config
            if c["type"] == "layers" and c.get("containers", [None]) == [container]
            for layer in c["layers"] for name in layer.split("|")}


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("lint-imports")
    return subprocess.run([str(exe), str(root / "pyproject.toml"), "--no-cache"], cwd=root,
                          capture_output=True, text=True,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})


def test_every_module_and_folder_of_the_package_sits_on_a_layer():
    tops = {f"specdec_ref.{p.stem}" for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__")}
    tops |= {f"specdec_ref.{p.name}" for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert tops == layer_names()


def test_every_module_of_the_models_sits_on_a_layer_of_its_own_contract():
    models = {p.stem for p in (PACKAGE / "models").glob("*.py") if p.stem != "__init__"}
    assert models == layer_names("specdec_ref.models")


@pytest.mark.slow
def test_the_import_layers_hold_and_an_upward_import_breaks_them(tmp_path):
    kept = lint_imports(ROOT)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    # power: the same check on a copy whose sampling module imports the lab (an upward import) must fail
    shutil.copytree(PACKAGE, tmp_path / "specdec_ref",
                    ignore=shutil.ignore_patterns("weights", "corpus", "__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    sampling = tmp_path / "specdec_ref" / "sampling.py"
    sampling.write_text(sampling.read_text() + "\nfrom .lab import timing  # noqa: E402, F401\n")
    broken = lint_imports(tmp_path)
    assert (broken.returncode != 0
            and "specdec_ref.sampling is not allowed to import specdec_ref.lab" in broken.stdout)
    # and inside the models: a package's timing decision (aot_use) that reads the method choice
    sampling.write_text(sampling.read_text().replace("\nfrom .lab import timing  # noqa: E402, F401\n", "\n"))
    assert lint_imports(tmp_path).returncode == 0
    aot_use = tmp_path / "specdec_ref" / "models" / "aot_use.py"
    aot_use.write_text(aot_use.read_text() + "\nfrom . import method  # noqa: E402, F401\n")
    broken = lint_imports(tmp_path)
    assert broken.returncode != 0 and ("specdec_ref.models.aot_use is not allowed to import "
                                       "specdec_ref.models.method") in broken.stdout


def test_at_most_ten_top_level_modules():
    assert len(list(PACKAGE.glob("*.py"))) <= 10


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_is_over_500_lines_and_each_opens_with_a_docstring(path):
    text = path.read_text()
    assert len(text.splitlines()) <= 500
    if text.strip():
        assert ast.get_docstring(ast.parse(text)), f"{path.name} has no opening docstring"
