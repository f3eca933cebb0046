"""Pin every chapter's Colab install cell to the commit that last changed the package; mark it for a GPU
runtime; link it to its student copy, and write the student copies.

    python scripts/sync_install_cells.py [NOTEBOOK ...]     (default: the chapters listed in _toc.yml)

The install cell runs `pip install "specdec_ref @ git+REPO_URL@<commit>" "transformers>=…,<…"` (the package
at a commit, never a moving branch, and the transformers releases the tests cover),
and one that exists as soon as the branch holding it is pushed (a tag would need a separate push). The commit
is the last one that changed what pip builds (PACKAGE below); the notebooks live outside it, so committing the
new pin leaves the package as it was. After changing the package: commit it, run this script, commit the
notebooks. tests/test_colab.py fails until the pinned package equals the package at HEAD.
REPO_URL and the Colab metadata live in specdec_ref/chapters/notebook.py. Outputs are left alone.

Each chapter's first Markdown cell gets one line under its title, a link that opens the chapter's student copy
in Colab, and the student copies (scripts/make_student_notebooks.py: no solutions, no outputs, QUICK = True)
are rewritten in book/students/, where the book's Colab buttons point too (book/_ext/student_copies.py).
tests/test_student_notebooks.py fails while a student copy differs from what this script would write.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
from make_student_notebooks import student_copy  # noqa: E402

from specdec_ref.chapters.notebook import COLAB_METADATA, REPO_URL, install_args  # noqa: E402

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


STUDENT_DIR = "students"  # book/students/<chapter>.ipynb
COLAB_LINK = re.compile(r"^\[Open the student copy in Colab\]\(.*$\n?", re.M)


def student_colab_url(name: str, branch: str = "main") -> str:
    """Where Colab opens the student copy of the chapter `name` (e.g. "03_exact.ipynb")."""
    owner_repo = REPO_URL.removeprefix("https://github.com/")
    return f"https://colab.research.google.com/github/{owner_repo}/blob/{branch}/book/{STUDENT_DIR}/{name}"


def colab_link(name: str) -> str:
    """The line under a chapter's title that opens its student copy."""
    return (f"[Open the student copy in Colab]({student_colab_url(name)}) (no solutions, quick mode on; "
            "in this page the solutions stay folded)\n")


def with_colab_link(source: str, name: str) -> str:
    """A Markdown cell's text with the Colab line right after its first heading (replacing an old one)."""
    lines = COLAB_LINK.sub("", source).splitlines(keepends=True)
    at = next((i + 1 for i, line in enumerate(lines) if line.startswith("#")), 0)
    head, rest = "".join(lines[:at]), "".join(lines[at:]).lstrip("\n")
    if head and not head.endswith("\n"):
        head += "\n"
    return head + "\n" + colab_link(name) + ("\n" + rest if rest else "")


def sync(path: Path, commit: str) -> bool:
    """Rewrite path's install line, Colab metadata and Colab link; True if anything changed."""
    nb = nbformat.read(path, as_version=4)
    cell = install_cell(nb)
    source = INSTALL_LINE.sub(lambda m: m.group(1) + install_args(commit), cell.source)
    metadata = {**nb.metadata, **COLAB_METADATA}
    title = next((c for c in nb.cells if c.cell_type == "markdown"), None)
    linked = None if title is None else with_colab_link(title.source, path.name)
    if source == cell.source and metadata == dict(nb.metadata) and (title is None or linked == title.source):
        return False
    cell.source = source
    nb.metadata.update(COLAB_METADATA)
    if title is not None:
        title.source = linked
    nbformat.write(nb, path)
    return True


def student_path(path: Path) -> Path:
    """Where a chapter's student copy lives: book/students/<chapter>."""
    return path.parent / STUDENT_DIR / path.name


def student_text(path: Path) -> str:
    """The student copy of the chapter at `path`, as the file's text."""
    student = student_copy(nbformat.read(path, as_version=4))
    note = (f"*The student copy of this chapter: no solutions, quick mode on "
            f"([the chapter with its solutions]({REPO_URL}/blob/main/book/{path.name})).*\n")
    for cell in student.cells:  # the student copy says what it is instead of linking to itself
        if cell.cell_type == "markdown":
            cell.source = COLAB_LINK.sub(note, cell.source)
    nbformat.validate(student)
    return nbformat.writes(student) + "\n"


def write_student_copy(path: Path) -> bool:
    """Write book/students/<chapter> from the chapter; True if it changed."""
    out, text = student_path(path), student_text(path)
    if out.exists() and out.read_text() == text:
        return False
    out.parent.mkdir(exist_ok=True)
    out.write_text(text)
    return True


def main(argv: list[str] | None = None) -> int:
    paths = [Path(p) for p in (argv if argv is not None else sys.argv[1:])] or chapters()
    commit = package_commit()
    print(f"pinning {commit[:12]}, the last commit that changed {', '.join(PACKAGE[:3])}")
    for path in paths:
        print(f"{path.name}: {'updated' if sync(path, commit) else 'already up to date'}; student copy "
              f"{'rewritten' if write_student_copy(path) else 'up to date'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
