"""Colab in one click: one repository URL, a pinned release, and chapters that open on a GPU runtime."""
import importlib.util
import re
import tomllib
from pathlib import Path

import nbformat
import pytest
import yaml

from specdec_ref.chapters import notebook

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("sync_install_cells", ROOT / "scripts" / "sync_install_cells.py")
sync = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sync)
CHAPTERS = sync.chapters()


def test_repo_url_is_the_one_in_config_yml():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["repository"]["url"].rstrip("/") == notebook.REPO_URL, (
        "_config.yml's repository.url (the launch buttons) and specdec_ref.chapters.notebook.REPO_URL (the install "
        "cells) must name the same repository")


def test_release_is_a_tag_named_after_the_package_version():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert notebook.RELEASE == f"v{version}"
    assert notebook.INSTALL_SPEC == f"specdec_ref @ git+{notebook.REPO_URL}@{notebook.RELEASE}"


def test_the_table_of_contents_lists_chapters():
    assert len(CHAPTERS) >= 5 and all(p.name[0].isdigit() for p in CHAPTERS)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_install_cell_pins_the_release_and_the_chapter_opens_on_a_gpu(chapter):
    nb = nbformat.read(chapter, as_version=4)
    hint = f"run `python scripts/sync_install_cells.py {chapter.relative_to(ROOT)}`"
    cell = sync.install_cell(nb)
    assert f'!pip -q install "{notebook.INSTALL_SPEC}"' in cell.source, hint
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
    assert sync.sync(path) is True and sync.sync(path) is False
    assert notebook.INSTALL_SPEC in path.read_text()


def test_copy_in_dtype_copies_a_small_model_and_refuses_one_over_the_limit(toy_pair, capsys):
    import torch
    target, _ = toy_pair  # float64
    assert notebook.copy_in_dtype(target, torch.float64) is target
    small = notebook.copy_in_dtype(target, torch.float32)
    assert small is not target and small.dtype == torch.float32 and target.dtype == torch.float64
    assert notebook.copy_in_dtype(target, torch.float32, max_bytes=100) is None
    assert "Skipped: a float32 copy" in capsys.readouterr().out
