"""Make student copies of the chapters: no solutions, no outputs, every exercise checker kept.

    python scripts/make_student_notebooks.py OUT_DIR [NOTEBOOK ...]     (default: book/*.ipynb)

A chapter marks a solution in two ways, and both go:
  * a folded admonition titled "Solution" (`:::{admonition} Solution`) in a Markdown cell, replaced
    by a one-line stub so that the student sees where the answer would have been (the rest of the
    cell, e.g. the question above it, stays);
  * the hidden code cell that runs the solution (tag `hide-cell`, right after that admonition), removed.
Any cell tagged `solution` goes too (a Markdown one becomes the stub). The checker cells stay, so an
untouched notebook still runs from top to bottom: each checker prints "Not attempted yet" and passes.

A student copy runs in quick mode by default: the knobs cell's `QUICK = ...` line becomes `QUICK = True`
(a chapter itself follows SPECDEC_QUICK, which a student's Jupyter does not set).
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
SOLUTION_TAG = "solution"
STUB_TAG = "solution-stub"
STUB_TEXT = "*Solution removed from the student copy: try it, run the checker, and ask if you are stuck.*"
_SOLUTION_OPEN = re.compile(r"^\s*(:{3,}|`{3,})\s*\{admonition\}\s*Solution\b")
_QUICK_LINE = re.compile(r"^QUICK\s*=.*$", re.M)  # the knobs cell's switch, at the cell's top level
STUDENT_QUICK = ("QUICK = True  # quick mode, the workshop's default: smaller, faster experiments "
                 "(False: full sizes)")


def tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def strip_solution_blocks(source: str) -> tuple[str, int]:
    """Replace every "Solution" admonition block in Markdown by the stub; returns (text, blocks replaced).

    A block opens with `:::{admonition} Solution` (or a backtick fence) and closes at the first line
    that is a bare fence of the same character, at least as long (MyST's rule: nested directives
    use shorter fences inside a longer one).
    """
    lines, out, n, i = source.splitlines(), [], 0, 0
    while i < len(lines):
        m = _SOLUTION_OPEN.match(lines[i])
        if not m:
            out.append(lines[i])
            i += 1
            continue
        fence = m.group(1)
        close = re.compile(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        i += 1
        while i < len(lines) and not close.match(lines[i]):
            i += 1
        i += 1  # past the closing fence
        out.append(STUB_TEXT)
        n += 1
    return "\n".join(out), n


def is_solution_markdown(cell) -> bool:
    """A Markdown cell that holds a "Solution" admonition, or one tagged `solution`."""
    return cell.cell_type == "markdown" and (
        SOLUTION_TAG in tags(cell) or any(_SOLUTION_OPEN.match(line) for line in cell.source.splitlines()))


def is_solution_code(cell, previous) -> bool:
    """A code cell tagged `solution`, or the hidden cell that runs the solution just shown above it."""
    if cell.cell_type != "code":
        return False
    hidden_after_solution = ("hide-cell" in tags(cell) and previous is not None
                             and is_solution_markdown(previous))
    return SOLUTION_TAG in tags(cell) or hidden_after_solution


def is_checker(cell) -> bool:
    """A code cell that calls an exercise checker (`ch2.check_greedy_verify(...)`)."""
    return cell.cell_type == "code" and re.search(r"\bch\d+\.check_\w+\(", cell.source) is not None


def quick_by_default(source: str) -> str:
    """A knobs cell with its `QUICK = ...` line set to `QUICK = True` (other cells come back unchanged)."""
    return _QUICK_LINE.sub(STUDENT_QUICK, source, count=1)


def student_copy(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook without solutions (stubs in their place), without outputs, and in quick mode."""
    out = nbformat.v4.new_notebook(metadata=nb.metadata)
    previous, knobs_done = None, False
    for cell in nb.cells:
        if is_solution_markdown(cell):
            text, _ = strip_solution_blocks(cell.source)
            whole = SOLUTION_TAG in tags(cell) or text.strip() == STUB_TEXT
            stub = nbformat.v4.new_markdown_cell(STUB_TEXT if whole else text, metadata={"tags": [STUB_TAG]})
            if "id" in cell:  # the chapter's own id, so that the same chapter always makes the same copy
                stub.id = cell.id
            out.cells.append(stub)
        elif not is_solution_code(cell, previous):
            cell = nbformat.from_dict(dict(cell))
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
                # the first cell that sets QUICK: the knobs
                if not knobs_done and _QUICK_LINE.search(cell.source):
                    cell.source, knobs_done = quick_by_default(cell.source), True
            out.cells.append(cell)
        previous = cell
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="where the student notebooks go (created if missing)")
    parser.add_argument("notebooks", nargs="*", type=Path, help="chapters to convert (default: book/*.ipynb)")
    args = parser.parse_args(argv)
    notebooks = args.notebooks or sorted((ROOT / "book").glob("*.ipynb"))
    if not notebooks:
        parser.error("no notebooks found")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        student = student_copy(nb)
        nbformat.validate(student)
        nbformat.write(student, args.out_dir / path.name)
        removed = len(nb.cells) - len(student.cells)
        stubs = sum(c.source.count(STUB_TEXT) for c in student.cells if c.cell_type == "markdown")
        quick_on = any(STUDENT_QUICK in c.source for c in student.cells if c.cell_type == "code")
        print(f"{path.name}: {stubs} solutions replaced by stubs, {removed} solution cells removed, "
              f"{sum(is_checker(c) for c in student.cells)} checker cells kept, "
              f"{'QUICK = True' if quick_on else 'no QUICK knob found'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
