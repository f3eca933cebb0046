"""Point every chapter's Colab install cell at REPO_URL@RELEASE, and mark the chapter to open on a GPU runtime.

    python scripts/sync_install_cells.py [NOTEBOOK ...]     (default: the chapters listed in _toc.yml)

REPO_URL, RELEASE and the Colab metadata live in specdec_ref/chapters/notebook.py; tests/test_colab.py fails
until this script has been run after they change. Outputs are left alone.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from specdec_ref.chapters.notebook import COLAB_METADATA, INSTALL_SPEC  # noqa: E402

INSTALL_LINE = re.compile(r'(!pip -q install )"specdec_ref @ git\+[^"]*"')


def chapters() -> list[Path]:
    """The notebooks the book's table of contents lists."""
    files = re.findall(r"^\s*-\s*file:\s*(\S+)\s*$", (ROOT / "_toc.yml").read_text(), flags=re.M)
    return [ROOT / f"{f}.ipynb" for f in files if (ROOT / f"{f}.ipynb").exists()]


def install_cell(nb) -> nbformat.NotebookNode:
    """The one code cell that pip-installs specdec_ref from git."""
    cells = [c for c in nb.cells if c.cell_type == "code" and INSTALL_LINE.search(c.source)]
    if len(cells) != 1:
        raise ValueError(f"expected one install cell (`!pip -q install \"specdec_ref @ git+...\"`), found {len(cells)}")
    return cells[0]


def sync(path: Path) -> bool:
    """Rewrite path's install line and Colab metadata; True if anything changed."""
    nb = nbformat.read(path, as_version=4)
    cell = install_cell(nb)
    source = INSTALL_LINE.sub(lambda m: f'{m.group(1)}"{INSTALL_SPEC}"', cell.source)
    metadata = {**nb.metadata, **COLAB_METADATA}
    if source == cell.source and metadata == dict(nb.metadata):
        return False
    cell.source = source
    nb.metadata.update(COLAB_METADATA)
    nbformat.write(nb, path)
    return True


def main(argv: list[str] | None = None) -> int:
    paths = [Path(p) for p in (argv if argv is not None else sys.argv[1:])] or chapters()
    for path in paths:
        print(f"{path.name}: {'updated' if sync(path) else 'already up to date'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
