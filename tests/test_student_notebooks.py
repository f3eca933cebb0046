"""scripts/make_student_notebooks.py on the real chapters: solutions gone, checkers kept, valid notebooks."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "book").glob("*.ipynb"))
spec = importlib.util.spec_from_file_location("make_student_notebooks", ROOT / "scripts" / "make_student_notebooks.py")
msn = importlib.util.module_from_spec(spec)
spec.loader.exec_module(msn)


@pytest.fixture(scope="module")
def students(tmp_path_factory):
    out = tmp_path_factory.mktemp("students")
    assert msn.main([str(out)]) == 0
    return out


def test_every_chapter_gets_a_student_copy(students):
    assert CHAPTERS, "no chapters found in book/"
    assert sorted(p.name for p in students.glob("*.ipynb")) == [p.name for p in CHAPTERS]


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_student_copy_has_no_solution_and_no_output(students, chapter):
    nb = nbformat.read(students / chapter.name, as_version=4)
    nbformat.validate(nb)
    previous = None
    for cell in nb.cells:
        assert not msn.is_solution_markdown(cell)
        assert "{admonition} Solution" not in cell.source
        assert msn.SOLUTION_TAG not in msn.tags(cell)
        assert not msn.is_solution_code(cell, previous)
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
        previous = cell


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_student_copy_keeps_every_exercise_checker(students, chapter):
    original = nbformat.read(chapter, as_version=4)
    student = nbformat.read(students / chapter.name, as_version=4)
    previous, checkers = None, []
    for cell in original.cells:
        if msn.is_checker(cell) and not msn.is_solution_code(cell, previous):
            checkers.append(cell.source)
        previous = cell
    kept = [c.source for c in student.cells if msn.is_checker(c)]
    assert kept == checkers
    solutions = sum(msn.strip_solution_blocks(c.source)[1] for c in original.cells if c.cell_type == "markdown")
    assert sum(c.source.count(msn.STUB_TEXT) for c in student.cells if c.cell_type == "markdown") == solutions


def test_solution_tag_and_hidden_solution_cells_are_removed():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("answer = None\nch9.check_thing(answer)"),
        nbformat.v4.new_markdown_cell(":::{admonition} Solution\n:class: dropdown\n`answer = 42`\n:::"),
        nbformat.v4.new_code_cell("ch9.check_thing(42)", metadata={"tags": ["hide-cell"]}),
        nbformat.v4.new_code_cell("secret = 42", metadata={"tags": ["solution"]}),
        nbformat.v4.new_code_cell("setup = 1", metadata={"tags": ["hide-cell"]}),  # not after a solution: kept
        nbformat.v4.new_markdown_cell("**5. A question.**\n\n::::{admonition} Solution\n:class: dropdown\n"
                                      ":::{note}\ninner\n:::\nthe answer\n::::\nAfter."),
    ])
    out = msn.student_copy(nb)
    assert [c.source for c in out.cells] == ["answer = None\nch9.check_thing(answer)", msn.STUB_TEXT, "setup = 1",
                                             f"**5. A question.**\n\n{msn.STUB_TEXT}\nAfter."]


@pytest.mark.slow
@pytest.mark.kernel
def test_one_student_notebook_runs_and_its_checkers_say_not_attempted(students):
    """Execute chapter 2's student copy in quick mode (the shortest chapter with checkers): no error, and its
    checkers, untouched, say "Not attempted yet"."""
    nbclient = pytest.importorskip("nbclient")
    path = students / "02_draft_and_verify.ipynb"
    nb = nbformat.read(path, as_version=4)
    env_before = dict(os.environ)
    os.environ.update(SPECDEC_QUICK="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1")
    try:
        # 300 s: a quick-mode cell takes a minute at most, and an nbclient stall (#312) sits out the whole timeout
        nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                resources={"metadata": {"path": str(ROOT / "book")}}).execute()
    finally:
        os.environ.clear()
        os.environ.update(env_before)
    if os.environ.get("SPECDEC_KEEP_EXECUTED"):  # a folder: keep the executed copy (e.g. to build the book from)
        nbformat.write(nb, Path(os.environ["SPECDEC_KEEP_EXECUTED"]) / path.name)
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert not [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert "Not attempted yet" in text


def test_script_runs_from_the_command_line(tmp_path):
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_student_notebooks.py"), str(tmp_path),
                          str(CHAPTERS[0])], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / CHAPTERS[0].name).exists() and "checker cells kept" in run.stdout
