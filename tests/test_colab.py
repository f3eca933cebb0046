"""Colab in one click: one repository URL, install cells pinned to a commit, chapters that open on a GPU
runtime."""
import importlib.util
import re
import subprocess
from pathlib import Path

import nbformat
import pytest
import yaml

from specdec_ref.chapters import notebook

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("sync_install_cells",
                                              ROOT / "scripts" / "sync_install_cells.py")
sync = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sync)
CHAPTERS = sync.chapters()


def test_repo_url_is_the_one_in_config_yml():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["repository"]["url"].rstrip("/") == notebook.REPO_URL, (
        "_config.yml's repository.url (the launch buttons) and specdec_ref.chapters.notebook.REPO_URL "
        "(the install cells) must name the same repository")


def pins() -> set[str | None]:
    return {sync.pinned_commit(nbformat.read(p, as_version=4)) for p in CHAPTERS}


def has_history(repo: Path) -> bool:
    inside = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=repo, capture_output=True,
                            text=True)
    return inside.returncode == 0 and inside.stdout.strip() == "false"


def test_every_chapter_pins_the_same_full_commit():
    (commit,) = pins()  # one pin for the whole book
    assert re.fullmatch(r"[0-9a-f]{40}", commit or ""), \
        f"pin {commit!r}: run `python scripts/sync_install_cells.py`"


def test_the_pinned_commit_installs_the_package_at_head():
    if not has_history(ROOT):
        pytest.skip("no full git history here (a shallow clone or an unpacked archive): "
                    "nothing to compare the pin to")
    (commit,) = pins()
    sync.check_pin(commit)


def test_check_pin_rejects_a_stale_pin_and_an_unknown_one(tmp_path):
    def git(*args):
        return sync.git(*args, repo=tmp_path)

    git("init", "-q")
    git("config", "user.email", "t@example.org")
    git("config", "user.name", "t")
    (tmp_path / "specdec_ref").mkdir()
    (tmp_path / "specdec_ref" / "a.py").write_text("x = 1\n")
    git("add", "-A")
    git("commit", "-qm", "package")
    first = sync.package_commit(tmp_path)
    (tmp_path / "book.ipynb").write_text("{}")
    git("add", "-A")
    git("commit", "-qm", "notebooks only")
    assert sync.package_commit(tmp_path) == first  # a notebook commit does not move the pin
    sync.check_pin(first, tmp_path)
    (tmp_path / "specdec_ref" / "a.py").write_text("x = 2\n")
    with pytest.raises(ValueError, match="commit the package first"):
        sync.package_commit(tmp_path)
    git("commit", "-qam", "package again")
    with pytest.raises(ValueError, match="package changed after the pinned commit"):
        sync.check_pin(first, tmp_path)
    with pytest.raises(ValueError, match="not in this repository's history"):
        sync.check_pin("0" * 40, tmp_path)
    with pytest.raises(ValueError, match="full 40-character commit"):
        sync.check_pin("v0.1.0", tmp_path)


def test_the_table_of_contents_lists_chapters():
    assert len(CHAPTERS) >= 5 and all(p.name[0].isdigit() or p.name.startswith("appendix_") for p in CHAPTERS)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_install_cell_pins_a_commit_of_the_repository_and_the_chapter_opens_on_a_gpu(chapter):
    nb = nbformat.read(chapter, as_version=4)
    hint = f"run `python scripts/sync_install_cells.py {chapter.relative_to(ROOT)}`"
    cell = sync.install_cell(nb)
    assert '!pip -q install ' + notebook.install_args(sync.pinned_commit(nb)) in cell.source, hint
    assert 'if "google.colab" in sys.modules:' in cell.source  # never installs anything outside Colab
    assert nb.cells.index(cell) < 3, "the install cell comes before the knobs"
    for key, value in notebook.COLAB_METADATA.items():
        assert nb.metadata.get(key) == value, hint


def test_colab_links_in_the_docs_point_at_the_repository():
    owner_name = notebook.REPO_URL.removeprefix("https://github.com/")
    for doc in [ROOT / "README.md", *sorted((ROOT / "book").glob("*.md"))]:
        for link in re.findall(r"colab\.research\.google\.com/github/([\w.-]+/[\w.-]+)/", doc.read_text()):
            assert link == owner_name, f"{doc.name} links Colab to {link}, not {owner_name}"


def test_sync_script_is_idempotent(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        'import sys\nif "google.colab" in sys.modules:\n    !pip -q install "specdec_ref @ git+https://example.org/x"')])
    path = tmp_path / "ch.ipynb"
    nbformat.write(nb, path)
    commit = "1" * 40
    assert sync.sync(path, commit) is True and sync.sync(path, commit) is False
    assert notebook.install_spec(commit) in path.read_text()
    assert sync.pinned_commit(nbformat.read(path, as_version=4)) == commit


def test_copy_in_dtype_copies_a_small_model_and_refuses_one_over_the_limit(toy_pair, capsys):
    import torch
    target, _ = toy_pair  # float64
    assert notebook.copy_in_dtype(target, torch.float64) is target
    small = notebook.copy_in_dtype(target, torch.float32)
    assert small is not target and small.dtype == torch.float32 and target.dtype == torch.float64
    assert notebook.copy_in_dtype(target, torch.float32, max_bytes=100) is None
    assert "Skipped: a float32 copy" in capsys.readouterr().out


def test_a_copy_in_another_dtype_leaves_the_compiled_pass_with_the_original(toy_pair):
    # the package holds the original's weights: a cast copy that kept it would time (and run) the original
    import copy

    import torch

    class Package:  # stands in for a loaded AOTInductor package, which cannot be deep-copied either
        def __deepcopy__(self, memo):
            raise TypeError("cannot pickle a package's loader")

    target, _ = toy_pair
    package = Package()
    target.__dict__["_specdec_compiled"] = package
    target.__dict__["_specdec_static_caches"] = {"kept": object()}  # the original's buffers stay with it too
    try:
        small = notebook.copy_in_dtype(target, torch.float32)
        assert "_specdec_compiled" not in small.__dict__ and target.__dict__["_specdec_compiled"] is package
        assert "_specdec_static_caches" not in small.__dict__ and "_specdec_static_caches" in target.__dict__
        with pytest.raises(TypeError, match="cannot pickle"):  # power: a plain deep copy takes it along
            copy.deepcopy(target)
    finally:
        target.__dict__.pop("_specdec_compiled", None)
        target.__dict__.pop("_specdec_static_caches", None)
