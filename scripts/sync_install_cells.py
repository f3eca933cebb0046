"""Pin every chapter's Colab install cell to the commit that last changed the package; mark it for a GPU
runtime.

    python scripts/sync_install_cells.py [NOTEBOOK ...]     (default: the chapters listed in _toc.yml)

The install cell runs `pip install "specdec_ref @ git+REPO_URL@<commit>" "transformers>=…,<…"` (the package
at a commit, never a moving branch, and the transformers releases the tests cover),
and one that exists as soon as the branch holding it is pushed (a tag would need a separate push). The commit
is the last one that changed what pip builds (PACKAGE below); the notebooks live outside it, so committing the
new pin leaves the package as it was. After changing the package: commit it, run this script, commit the
notebooks. tests/test_colab.py fails until the pinned package equals the package at HEAD.
REPO_URL and the Colab metadata live in specdec_ref/chapters/notebook.py. Outputs are left alone.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from specdec_ref.chapters.notebook import COLAB_METADATA, install_args  # noqa: E402

# what `pip install git+...@commit` builds from; the feature head's training corpus lives in the tree but is
# not packaged (pyproject.toml ships only the weights), so new corpus shards need no new pin
PACKAGE = ("specdec_ref", "pyproject.toml", "requirements.txt", ":(exclude)specdec_ref/distill/corpus")
INSTALL_LINE = re.compile(r'(!pip -q install )"specdec_ref @ git\+([^"@]*)(?:@([^"]*))?"'
                          r'(?: "transformers[^"]*")?')


def git(*args: str, repo: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def package_commit(repo: Path = ROOT) -> str:
    """The last commit that changed the package (refused while the package has uncommitted changes)."""
    dirty = git("status", "--porcelain", "--", *PACKAGE, repo=repo)
    if dirty:
        raise ValueError(f"commit the package first: a pin must name a commit that holds it\n{dirty}")
    return git("log", "-1", "--format=%H", "--", *PACKAGE, repo=repo)


def check_pin(commit: str, repo: Path = ROOT) -> None:
    """ValueError unless `commit` is a full commit of this history whose package equals the package at
    HEAD."""
    if not re.fullmatch(r"[0-9a-f]{40}", commit or ""):
        raise ValueError(f"the install cells must pin a full 40-character commit, not {commit!r}")
    if subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=repo,
                      capture_output=True).returncode:
        raise ValueError(f"the pinned commit {commit[:12]} is not in this repository's history")
    changed = git("diff", "--name-only", commit, "HEAD", "--", *PACKAGE, repo=repo)
    if changed:
        raise ValueError(f"the package changed after the pinned commit {commit[:12]} "
                         f"({changed.splitlines()[:3]}): "
                         "commit it, run `python scripts/sync_install_cells.py`, and commit the notebooks")


def chapters() -> list[Path]:
    """The notebooks the book's table of contents lists."""
    files = re.findall(r"^\s*-\s*file:\s*(\S+)\s*$", (ROOT / "_toc.yml").read_text(), flags=re.M)
    return [ROOT / f"{f}.ipynb" for f in files if (ROOT / f"{f}.ipynb").exists()]


def install_cell(nb) -> nbformat.NotebookNode:
    """The one code cell that pip-installs specdec_ref from git."""
    cells = [c for c in nb.cells if c.cell_type == "code" and INSTALL_LINE.search(c.source)]
    if len(cells) != 1:
        raise ValueError("expected one install cell (`!pip -q install \"specdec_ref @ git+...\"`), "
                         f"found {len(cells)}")
    return cells[0]


def pinned_commit(nb) -> str | None:
    """The revision a notebook's install cell pins (None if it pins nothing)."""
    return INSTALL_LINE.search(install_cell(nb).source).group(3)


def sync(path: Path, commit: str) -> bool:
    """Rewrite path's install line and Colab metadata; True if anything changed."""
    nb = nbformat.read(path, as_version=4)
    cell = install_cell(nb)
    source = INSTALL_LINE.sub(lambda m: m.group(1) + install_args(commit), cell.source)
    metadata = {**nb.metadata, **COLAB_METADATA}
    if source == cell.source and metadata == dict(nb.metadata):
        return False
    cell.source = source
    nb.metadata.update(COLAB_METADATA)
    nbformat.write(nb, path)
    return True


def main(argv: list[str] | None = None) -> int:
    paths = [Path(p) for p in (argv if argv is not None else sys.argv[1:])] or chapters()
    commit = package_commit()
    print(f"pinning {commit[:12]}, the last commit that changed {', '.join(PACKAGE[:3])}")
    for path in paths:
        print(f"{path.name}: {'updated' if sync(path, commit) else 'already up to date'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
