"""scripts/make_student_notebooks.py on the real chapters: solutions gone, checkers kept, valid notebooks.

Whether a student copy still holds a solution is judged here by a rule of its own, not by the script's
(which recognises solution cells by their tags and position, and so misses a solution cell nobody tagged):

* every exercise checker call (`ch5.check_winner(...)`) gets at least one unanswered value: `None`, a name
  last bound to `None` or `...`, a function whose body only raises NotImplementedError, or a deliberately
  broken sampler from `specdec_ref.lab.broken`; never a worked answer;
* no cell defines a function or class that a solution defines, unless as such a stub, and no cell repeats an
  assignment that a solution makes. The solutions are read from the original chapter: the code inside its
  "Solution" admonitions and its hidden cells right after one.
"""
import ast
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "book").glob("*.ipynb"))
spec = importlib.util.spec_from_file_location("make_student_notebooks",
                                              ROOT / "scripts" / "make_student_notebooks.py")
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
    solutions = sum(msn.strip_solution_blocks(c.source)[1] for c in original.cells
                    if c.cell_type == "markdown")
    assert sum(c.source.count(msn.STUB_TEXT) for c in student.cells if c.cell_type == "markdown") == solutions


def test_solution_tag_and_hidden_solution_cells_are_removed():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("answer = None\nch9.check_thing(answer)"),
        nbformat.v4.new_markdown_cell(":::{admonition} Solution\n:class: dropdown\n`answer = 42`\n:::"),
        nbformat.v4.new_code_cell("ch9.check_thing(42)", metadata={"tags": ["hide-cell"]}),
        nbformat.v4.new_code_cell("secret = 42", metadata={"tags": ["solution"]}),
        # not after a solution: kept
        nbformat.v4.new_code_cell("setup = 1", metadata={"tags": ["hide-cell"]}),
        nbformat.v4.new_markdown_cell("**5. A question.**\n\n::::{admonition} Solution\n:class: dropdown\n"
                                      ":::{note}\ninner\n:::\nthe answer\n::::\nAfter."),
    ])
    out = msn.student_copy(nb)
    assert [c.source for c in out.cells] == ["answer = None\nch9.check_thing(answer)", msn.STUB_TEXT,
                                             "setup = 1", f"**5. A question.**\n\n{msn.STUB_TEXT}\nAfter."]


@pytest.mark.slow
@pytest.mark.kernel
def test_one_student_notebook_runs_and_its_checkers_say_not_attempted(students, nbclient):
    """Execute chapter 2's student copy (the shortest chapter with checkers) where the environment asks for
    full mode: it runs in quick mode all the same, without an error, and its checkers, untouched, say
    "Not attempted yet"."""
    path = students / "02_draft_and_verify.ipynb"
    nb = nbformat.read(path, as_version=4)
    env_before = dict(os.environ)
    os.environ.update(SPECDEC_QUICK="0", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1")
    try:
        # 300 s: a quick-mode cell takes a minute at most
        nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                resources={"metadata": {"path": str(ROOT / "book")}}).execute()
    finally:
        os.environ.clear()
        os.environ.update(env_before)
    # a folder: keep the executed copy (e.g. to build the book from)
    if os.environ.get("SPECDEC_KEEP_EXECUTED"):
        nbformat.write(nb, Path(os.environ["SPECDEC_KEEP_EXECUTED"]) / path.name)
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert not [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert "Not attempted yet" in text
    assert "quick=True" in text  # the knobs cell prints the mode it runs in


def test_script_runs_from_the_command_line(tmp_path):
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_student_notebooks.py"), str(tmp_path),
                          str(CHAPTERS[0])], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / CHAPTERS[0].name).exists() and "checker cells kept" in run.stdout


# ---- an independent judge of solutions left in a student copy ----

_ADMONITION = re.compile(r"^\s*(:{3,}|`{3,})\s*\{admonition\}\s*Solution\b", re.M)
_FENCED_PYTHON = re.compile(r"^\s*```(?:python|ipython3?)?\s*\n(.*?)^\s*```", re.S | re.M)
_CHECKER_MODULE = re.compile(r"ch\d+$")


def parse_cell(source: str) -> ast.Module:
    """A code cell as Python (IPython's `!pip` and `%magic` lines turned into calls first)."""
    return ast.parse(TransformerManager().transform_cell(source))


def solution_sources(nb) -> list[str]:
    """The code a chapter gives as solutions: fenced code after a "Solution" admonition opens, in Markdown,
    and the hidden code cells that follow such a Markdown cell."""
    sources, after_solution = [], False
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            opening = _ADMONITION.search(cell.source)
            after_solution = opening is not None
            if opening:
                sources += _FENCED_PYTHON.findall(cell.source[opening.start():])
        elif after_solution and "hide-cell" in cell.get("metadata", {}).get("tags", []):
            sources.append(cell.source)
        else:
            after_solution = False
    return sources


def _is_placeholder(stmt: ast.stmt) -> bool:
    """`pass`, `...`, a docstring, or `raise NotImplementedError(...)`."""
    if isinstance(stmt, ast.Pass):
        return True
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
        return stmt.value.value is Ellipsis or isinstance(stmt.value.value, str)
    return (isinstance(stmt, ast.Raise) and stmt.exc is not None
            and _root_name(stmt.exc) == "NotImplementedError")


def is_stub_def(node: ast.AST) -> bool:
    """`def f(...): raise NotImplementedError` (or `pass`, or `...`), with or without a docstring."""
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and all(map(_is_placeholder, node.body))


def is_unanswered_value(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and (node.value is None or node.value is Ellipsis)


def solution_bindings(nb) -> tuple[set[str], set[str]]:
    """(functions and classes a solution defines, assignments it makes as ast dumps), at module level."""
    defs, assigns = set(), set()
    for source in solution_sources(nb):
        try:
            tree = parse_cell(source)
        except SyntaxError:  # a fenced block without a language that is not Python (a shell line, output)
            continue
        for stmt in tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defs.add(stmt.name)
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                assigns.add(ast.dump(stmt))
    return defs, assigns


def _root_name(node: ast.AST) -> str | None:
    """`broken.step_with_verify(broken.x)` -> "broken": the name an expression is built on."""
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def solution_leaks(original, student) -> list[str]:
    """Every place where `student` (a copy of `original`) still holds solution code, in words."""
    solution_defs, solution_assigns = solution_bindings(original)
    kind: dict[str, str] = {}  # name -> "stub", "broken" or "value", as last bound, in execution order
    leaks = []

    def bind(target: ast.AST, what: str) -> None:
        for node in ast.walk(target):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                kind[node.id] = what

    def unanswered(arg: ast.AST) -> bool:
        if is_unanswered_value(arg):
            return True
        return isinstance(arg, ast.Name) and kind.get(arg.id) in ("stub", "broken")

    def check_calls(node: ast.AST, where: str) -> None:
        for call in ast.walk(node):
            func = getattr(call, "func", None)
            if (isinstance(call, ast.Call) and isinstance(func, ast.Attribute)
                    and func.attr.startswith("check_")
                    and isinstance(func.value, ast.Name) and _CHECKER_MODULE.match(func.value.id)):
                args = list(call.args) + [k.value for k in call.keywords]
                if not any(unanswered(a) for a in args):
                    leaks.append(f"{where}: {ast.unparse(call)} gets a worked answer, not an unanswered stub")

    def visit(stmts: list[ast.stmt], where: str) -> None:
        for stmt in stmts:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                stub = is_stub_def(stmt)
                if stmt.name in solution_defs and not stub:
                    leaks.append(f"{where}: defines {stmt.name}, as a solution does")
                kind[stmt.name] = "stub" if stub else "value"
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                if ast.dump(stmt) in solution_assigns:
                    leaks.append(f"{where}: {ast.unparse(stmt)} is a solution's assignment")
                check_calls(stmt, where)
                value = getattr(stmt, "value", None)
                targets = getattr(stmt, "targets", None) or [stmt.target]
                for target in targets:
                    bind(target, "stub" if value is not None and is_unanswered_value(value) else "value")
            elif isinstance(stmt, ast.For):
                check_calls(stmt.iter, where)
                items = stmt.iter.elts if isinstance(stmt.iter, (ast.List, ast.Tuple)) else [stmt.iter]
                bind(stmt.target,
                     "broken" if all(kind.get(_root_name(e)) == "broken" for e in items) else "value")
                visit(stmt.body + stmt.orelse, where)
            elif isinstance(stmt, (ast.With, ast.If, ast.While, ast.Try)):
                for header in getattr(stmt, "items", []) + [getattr(stmt, "test", None)]:
                    if header is not None:
                        check_calls(header, where)
                handlers = [s for h in getattr(stmt, "handlers", []) for s in h.body]
                visit(stmt.body + getattr(stmt, "orelse", []) + handlers + getattr(stmt, "finalbody", []),
                      where)
            elif isinstance(stmt, ast.ImportFrom):
                for alias in stmt.names:  # the deliberately broken samplers are no one's answer
                    broken = stmt.module == "specdec_ref.lab" and alias.name == "broken" or \
                        stmt.module == "specdec_ref.lab.broken"
                    kind[alias.asname or alias.name] = "broken" if broken else "value"
            elif isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    kind[(alias.asname or alias.name).split(".")[0]] = "value"
            else:
                check_calls(stmt, where)

    for i, cell in enumerate(student.cells):
        if cell.cell_type == "code":
            visit(parse_cell(cell.source).body, f"cell {i}")
    return leaks


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_student_copy_holds_no_solution_code_by_an_independent_rule(students, chapter):
    original = nbformat.read(chapter, as_version=4)
    student = nbformat.read(students / chapter.name, as_version=4)
    assert solution_sources(original), "the chapter's solutions were not found: has their markup changed?"
    assert solution_leaks(original, student) == []


def _chapter_with_exercises(*, tag_solution_cells: bool) -> nbformat.NotebookNode:
    """A small chapter with chapter 5's two exercises, their solutions and their solution cells; untagged, the
    solution cells are exactly what leaked into chapter 5's student copies."""
    hidden = {"tags": ["hide-cell"]} if tag_solution_cells else {}
    drafter = ("class BigramDrafter:\n    default_gamma = 4\n\n    def __init__(self, vocab_size):\n"
               "        self.vocab_size = vocab_size\n\n\ndef make_drafter(vocab_size):\n"
               "    return BigramDrafter(vocab_size)\n")
    return nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import torch\nQUICK = False  # knobs"),
        nbformat.v4.new_markdown_cell("**1. Pick the winner.**"),
        nbformat.v4.new_code_cell("answer = None  # (\"draft name\", γ)\nch5.check_winner(answer)"),
        nbformat.v4.new_markdown_cell(":::{admonition} Solution\n:class: dropdown\nTabulate.\n\n```python\n"
                                      "answer = (\"feature head\", 5)\n```\n:::"),
        nbformat.v4.new_code_cell("ch5.check_winner((\"feature head\", 5))", metadata=dict(hidden)),
        nbformat.v4.new_markdown_cell("**2. Write a drafter.**"),
        nbformat.v4.new_code_cell("def make_drafter(vocab_size):\n    raise NotImplementedError\n\n\n"
                                  "ch5.check_drafter(make_drafter)"),
        nbformat.v4.new_markdown_cell(":::{admonition} Solution\n:class: dropdown\n"
                                      f"```python\n{drafter}```\n:::"),
        nbformat.v4.new_code_cell(drafter + "\n\nch5.check_drafter(make_drafter, n=1000)",
                                  metadata=dict(hidden)),
    ])


def test_the_independent_rule_finds_chapter_5s_untagged_solution_cells():
    leaked = msn.student_copy(_chapter_with_exercises(tag_solution_cells=False))
    leaks = solution_leaks(_chapter_with_exercises(tag_solution_cells=False), leaked)
    assert any("ch5.check_winner(('feature head', 5))" in x for x in leaks), leaks
    assert (any("defines BigramDrafter" in x for x in leaks)
            and any("defines make_drafter" in x for x in leaks))
    assert any("ch5.check_drafter(make_drafter, n=1000)" in x for x in leaks), leaks


def test_the_independent_rule_passes_properly_marked_solution_cells():
    original = _chapter_with_exercises(tag_solution_cells=True)
    assert solution_leaks(original, msn.student_copy(original)) == []


def test_the_independent_rule_finds_a_worked_answer_and_accepts_broken_samplers():
    original = _chapter_with_exercises(tag_solution_cells=True)
    copy = msn.student_copy(original)
    copy.cells.append(nbformat.v4.new_code_cell("answer = (\"feature head\", 5)\nch5.check_winner(answer)"))
    assert len(solution_leaks(original, copy)) == 2  # the solution's assignment, and a checker fed an answer
    copy.cells[-1] = nbformat.v4.new_code_cell(
        "from specdec_ref.lab import broken\n\n"
        "for step in [broken.step_with_verify(broken.verify_late), broken.step]:\n"
        "    with one_thread():\n        ch3.check_capstone_step(step, n_sequences=10)")
    assert solution_leaks(original, copy) == []


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_student_copy_runs_in_quick_mode_whatever_the_environment(students, chapter):
    """The knobs cell sets QUICK = True, and no later cell sets it again."""
    student = nbformat.read(students / chapter.name, as_version=4)
    values = [ast.unparse(stmt.value) for c in student.cells if c.cell_type == "code"
              for stmt in parse_cell(c.source).body
              if isinstance(stmt, ast.Assign)
              and any(getattr(t, "id", None) == "QUICK" for t in stmt.targets)]
    assert values == ["True"]


# ----------------------------------------------------------------------------------------------
# The committed student copies (book/students/), and the links that open them
# ----------------------------------------------------------------------------------------------

def _load(name: str, path: Path):
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


sync = _load("sync_install_cells", ROOT / "scripts" / "sync_install_cells.py")
ext = _load("student_copies", ROOT / "book" / "_ext" / "student_copies.py")
STALE = "the student copy is stale: run `python scripts/sync_install_cells.py` and commit book/students/"


def test_the_committed_student_copies_are_exactly_the_chapters():
    committed = sorted(p.name for p in (ROOT / "book" / sync.STUDENT_DIR).glob("*.ipynb"))
    assert committed == [p.name for p in CHAPTERS], STALE


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_the_committed_student_copy_is_what_the_chapter_makes(chapter):
    path = sync.student_path(chapter)
    assert path.exists() and path.read_text() == sync.student_text(chapter), STALE


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_each_chapter_opens_its_student_copy_in_colab(chapter):
    nb = nbformat.read(chapter, as_version=4)
    title = next(c for c in nb.cells if c.cell_type == "markdown")
    assert sync.colab_link(chapter.name) in title.source, "run `python scripts/sync_install_cells.py`"
    student = nbformat.read(sync.student_path(chapter), as_version=4)
    assert not any(sync.COLAB_LINK.search(c.source) for c in student.cells if c.cell_type == "markdown")
    first = next(c for c in student.cells if c.cell_type == "markdown")
    assert "The student copy of this chapter" in first.source and f"/book/{chapter.name})" in first.source


def test_the_colab_link_is_written_once_under_the_title():
    text = "# Chapter\n\nFirst paragraph.\n"
    once = sync.with_colab_link(text, "01.ipynb")
    assert once.startswith("# Chapter\n\n[Open the student copy in Colab](")
    assert once.endswith("\n\nFirst paragraph.\n")
    assert sync.with_colab_link(once, "01.ipynb") == once
    assert once.count("colab.research.google.com") == 1


def test_the_launch_button_is_pointed_at_the_student_copy():
    url = "https://colab.research.google.com/github/o/r/blob/main/book/03_exact.ipynb"
    assert ext.student_url(url) == url.replace("/book/", "/book/students/")
    assert ext.student_url(ext.student_url(url)) == ext.student_url(url)
    assert ext.student_url("https://github.com/o/r") == "https://github.com/o/r"
    app = type("App", (), {"srcdir": str(ROOT)})()

    def buttons():
        return [{"type": "group", "buttons": [{"text": "Colab", "url": url}, {"text": "Binder", "url": url}]}]

    chapter = {"header_buttons": buttons()}
    ext.point_launch_buttons_at_student_copies(app, "book/03_exact", "page.html", chapter, None)
    colab, binder = chapter["header_buttons"][0]["buttons"]
    assert colab["url"].endswith("/book/students/03_exact.ipynb") and binder["url"] == url
    page = {"header_buttons": buttons()}  # a page without a student copy keeps its link
    ext.point_launch_buttons_at_student_copies(app, "book/notation", "page.html", page, None)
    assert page["header_buttons"][0]["buttons"][0]["url"] == url
