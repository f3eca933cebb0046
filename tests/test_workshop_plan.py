"""book/workshop_plan.yml, the workshop plan that book/instructors.md renders: checked, and run as written.

Fast tests: the plan parses; every cell it names exists in its chapter, so it cannot go stale as cells move
(and a plan naming a missing cell fails); every name a segment reads is bound by its chapter's setup cells,
the cells it needs or the segment itself (a static check, before any kernel starts); the slots add up; and
instructors.md holds the tables rendered from the plan.

Kernel tests: each segment runs alone, in a fresh kernel, in quick mode: a notebook made of the chapter's
setup cells, the cells the segment needs and its own cells, in the chapter's order, and nothing else. A
segment that is exactly its chapter's first code cells is skipped: CI's run of the chapter (scripts/test.sh)
starts by running it just so, in a fresh kernel.

    python tests/test_workshop_plan.py --write   # re-render the plan's tables into book/instructors.md
"""
from __future__ import annotations

import ast
import builtins
import copy
import os
import re
import sys
import time
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
PLAN = BOOK / "workshop_plan.yml"
INSTRUCTORS = BOOK / "instructors.md"
CELL_TIMEOUT_S = 300  # as CI's chapters: a quick-mode cell takes a minute at most
SELECTOR_KEYS = ({"tag"}, {"ids"}, {"from"}, {"from", "to"})
HEADING = re.compile(r"^(#{1,6})\s")
# names a cell may read without binding them: Python's builtins and what IPython puts in a kernel's namespace
KERNEL_NAMES = set(dir(builtins)) | {"get_ipython", "display", "In", "Out", "exit", "quit"}


# ---- the plan ----

def load_plan(path: Path = PLAN) -> dict:
    plan = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(plan, dict) or not {"chapters", "sessions"} <= set(plan):
        raise ValueError(f"{path}: a plan needs top-level `chapters` (setup cells per notebook) "
                         "and `sessions`")
    return plan


def segments(plan: dict) -> list[dict]:
    """Every segment of every block, each with its block's chapter."""
    out = []
    for session in plan["sessions"]:
        for block in session["blocks"]:
            for seg in block.get("segments", []):
                if "chapter" not in block:
                    raise ValueError(f"block {block['time']!r} has segments but no `chapter`: "
                                     "name its notebook")
                out.append({**seg, "chapter": block["chapter"]})
    return out


def read_chapter(name: str):
    path = BOOK / name
    if not path.exists():
        raise ValueError(f"the plan names {name!r}, which is not in book/: fix the notebook's name")
    return nbformat.read(path, as_version=4)


def _tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def _heading_level(cell) -> int | None:
    """The level of the first heading in a Markdown cell (1 for `#`), None if it has none."""
    if cell.cell_type != "markdown":
        return None
    levels = [len(m.group(1)) for line in cell.source.splitlines() if (m := HEADING.match(line))]
    return min(levels) if levels else None


def _marker_cell(nb, marker: str, where: str) -> int:
    hits = [i for i, c in enumerate(nb.cells) if any(line.strip() == marker.strip()
                                                      for line in c.source.splitlines())]
    if len(hits) != 1:
        raise ValueError(f"{where}: marker {marker!r} is on {len(hits)} cells, not one: use a line "
                         "(a heading) "
                         "that appears exactly once in the chapter")
    return hits[0]


def select(nb, selector: dict, where: str) -> list[int]:
    """Indices of the cells a selector names, in the chapter's order.

    {tag: T}: the cells tagged T. {ids: [...]}: those nbformat cell ids. {from: M}: the cell with the line M
    (a heading) up to, not including, the next heading of the same or a higher level; {from: M, to: N}: up to,
    not including, the cell with the line N.
    """
    if not isinstance(selector, dict) or set(selector) not in SELECTOR_KEYS:
        raise ValueError(f"{where}: a cell selector is {{tag: ...}}, {{ids: [...]}} or "
                         "{from: ..., to: ...}; "
                         f"got {selector!r}")
    if "tag" in selector:
        found = [i for i, c in enumerate(nb.cells) if selector["tag"] in _tags(c)]
        if not found:
            raise ValueError(f"{where}: no cell carries the tag {selector['tag']!r}: "
                             "tag the cells or fix the name")
        return found
    if "ids" in selector:
        if not all(isinstance(i, str) for i in selector["ids"]):
            raise ValueError(f"{where}: cell ids are strings: quote them in the plan, "
                             f"got {selector['ids']!r}")
        index = {c.get("id"): i for i, c in enumerate(nb.cells)}
        missing = [i for i in selector["ids"] if i not in index]
        if missing:
            raise ValueError(f"{where}: no cell has the id(s) {missing}: the cells moved or were replaced; "
                             "name them again (by id or tag)")
        return sorted(index[i] for i in selector["ids"])
    start = _marker_cell(nb, selector["from"], where)
    if "to" in selector:
        end = _marker_cell(nb, selector["to"], where)
    else:
        level = _heading_level(nb.cells[start])
        if level is None:
            raise ValueError(f"{where}: {selector['from']!r} is not a heading: give `to:` as well")
        end = next((j for j in range(start + 1, len(nb.cells))
                    if (lv := _heading_level(nb.cells[j])) is not None and lv <= level), len(nb.cells))
    if end <= start:
        raise ValueError(f"{where}: `to` {selector['to']!r} comes before `from` {selector['from']!r}")
    return list(range(start, end))


def _selectors(value) -> list[dict]:
    return value if isinstance(value, list) else [value]


def segment_cells(plan: dict, seg: dict, nb=None) -> tuple[list[int], list[int]]:
    """(the indices to run: setup, needs and the segment's own cells, in order; the segment's own cells)."""
    nb = nb if nb is not None else read_chapter(seg["chapter"])
    where = f"segment {seg['id']!r} ({seg['chapter']})"
    if seg["chapter"] not in plan["chapters"]:
        raise ValueError(f"{where}: `chapters` in the plan has no setup cells for {seg['chapter']!r}")
    setup = [i for s in _selectors(plan["chapters"][seg["chapter"]]["setup"]) for i in select(nb, s, where)]
    own = sorted({i for s in _selectors(seg["cells"]) for i in select(nb, s, where)})
    needs = [i for s in _selectors(seg.get("needs", [])) for i in select(nb, s, where)]
    return sorted(set(setup) | set(needs) | set(own)), own


def chapter_prefix(plan: dict, seg: dict, nb=None) -> int:
    """n > 0 where the segment's code cells are exactly its chapter's first n code cells: run alone, it runs
    what the chapter's own run (CI's, in a fresh kernel) runs first, so that run covers it; else 0."""
    nb = nb if nb is not None else read_chapter(seg["chapter"])
    keep, _ = segment_cells(plan, seg, nb)
    code = [i for i in keep if nb.cells[i].cell_type == "code"]
    first = [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code"][:len(code)]
    return len(code) if code == first else 0


def segment_notebook(plan: dict, seg: dict):
    """A notebook of the segment's cells alone, outputs cleared, as a fresh kernel would run them."""
    nb = read_chapter(seg["chapter"])
    keep, _ = segment_cells(plan, seg, nb)
    out = copy.deepcopy(nb)
    out.cells = [copy.deepcopy(nb.cells[i]) for i in keep]
    for cell in out.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return out


# ---- which names a cell reads and binds (static, after IPython's own rewriting of magics) ----

def _parse(source: str) -> ast.Module:
    from IPython.core.inputtransformer2 import TransformerManager
    return ast.parse(TransformerManager().transform_cell(source))


def names_of(source: str) -> tuple[set[str], set[str]]:
    """(names the cell reads, names it binds anywhere, function parameters included)."""
    reads, binds = set(), set()
    for node in ast.walk(_parse(source)):
        if isinstance(node, ast.Name):
            (reads if isinstance(node.ctx, ast.Load) else binds).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            binds.add(node.name)
        elif isinstance(node, ast.arg):
            binds.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            binds |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.ExceptHandler) and node.name:
            binds.add(node.name)
    return reads, binds


def unbound_reads(nb) -> list[tuple[str, list[str]]]:
    """(cell id, names it reads that no earlier cell, nor itself, binds) for each code cell that has some."""
    bound, problems = set(KERNEL_NAMES), []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        reads, binds = names_of(cell.source)
        missing = sorted(reads - bound - binds)
        if missing:
            problems.append((cell.get("id"), missing))
        bound |= binds
    return problems


# ---- instructors.md's tables, rendered from the plan ----

def _begin(session_id: str) -> str:
    return (f"% workshop_plan.yml, session {session_id}: "
            "rendered by `python tests/test_workshop_plan.py --write`")


def _end(session_id: str) -> str:
    return f"% end of session {session_id}"


def render_session(session: dict) -> str:
    rows = ["| time | what | run live | assign |", "|---|---|---|---|"]
    for block in session["blocks"]:
        live = "; ".join(s["title"] for s in block.get("segments", [])) or block.get("live", "—")
        rows.append(f"| {block['time']} | {block['what']} | {live} | {block.get('assign', '—')} |")
    return "\n".join(rows)


def render_into(text: str, plan: dict) -> str:
    """instructors.md's text with every session's table replaced by the one rendered from the plan."""
    for session in plan["sessions"]:
        begin, end = _begin(session["id"]), _end(session["id"])
        pattern = re.compile(re.escape(begin) + r"\n.*?\n" + re.escape(end), re.S)  # blank lines: MyST blocks
        if not pattern.search(text):
            raise ValueError(f"instructors.md has no `{begin}` ... `{end}` block for session "
                             f"{session['id']!r}: add the two comment lines where its table goes")
        text = pattern.sub(lambda _: f"{begin}\n\n{render_session(session)}\n\n{end}", text)
    return text


def slot_minutes(slot: str) -> int:
    """'1:45–2:25' -> 40."""
    m = re.fullmatch(r"(\d+):(\d\d)\s*[–-]\s*(\d+):(\d\d)", slot)
    if m is None:
        raise ValueError(f"a block's time is 'h:mm–h:mm', got {slot!r}")
    h0, m0, h1, m1 = map(int, m.groups())
    return (h1 * 60 + m1) - (h0 * 60 + m0)


# ---- fast tests ----

def test_plan_parses_and_every_segment_names_cells_that_exist():
    plan = load_plan()
    segs = segments(plan)
    assert segs, "the plan has no segments"
    assert len({s["id"] for s in segs}) == len(segs), "segment ids must be unique"
    for seg in segs:
        assert {"id", "title", "teaches", "minutes", "cells"} <= set(seg), seg
        keep, own = segment_cells(plan, seg)  # raises on a missing notebook, tag, id or marker
        assert own and any(read_chapter(seg["chapter"]).cells[i].cell_type == "code" for i in own), seg["id"]


def test_a_segment_is_a_chapter_prefix_only_when_its_code_cells_open_the_chapter():
    plan = load_plan()
    seg = {**segments(plan)[0], "needs": []}
    nb = read_chapter(seg["chapter"])
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    setup, _ = segment_cells(plan, {**seg, "cells": {"ids": [nb.cells[code[0]].id]}}, nb)
    m = max(code.index(i) for i in setup if i in code) + 2  # every setup cell, and one code cell more
    ids = [nb.cells[i].id for i in code]
    assert chapter_prefix(plan, {**seg, "cells": {"ids": ids[:m]}}, nb) == m
    # the same, one cell further, without the cell before it: a gap, so the chapter's run is not the segment's
    assert chapter_prefix(plan, {**seg, "cells": {"ids": ids[:m - 1] + [ids[m]]}}, nb) == 0
    assert chapter_prefix(plan, {**seg, "cells": {"ids": ids}}, nb) == len(ids)  # the whole chapter


def test_a_plan_naming_a_missing_cell_fails():
    plan = load_plan()
    seg = copy.deepcopy(segments(plan)[0])
    for broken in ({"ids": ["no-such-cell"]}, {"tag": "segment-that-nobody-tagged"},
                   {"from": "## A heading no chapter has"}, {"cell": 3}):
        seg["cells"] = broken
        with pytest.raises(ValueError, match="no cell|marker|selector"):
            segment_cells(plan, seg)
    seg["chapter"] = "07_missing.ipynb"
    with pytest.raises(ValueError, match="not in book/"):
        segment_cells(plan, seg)


def test_every_name_a_segment_reads_is_bound_within_the_segment():
    plan = load_plan()
    problems = {s["id"]: p for s in segments(plan) if (p := unbound_reads(segment_notebook(plan, s)))}
    assert not problems, ("these segments read names that only cells outside them bind; "
                          "add a checkpoint cell "
                          f"or name the cells in `needs`: {problems}")


def test_the_static_check_catches_a_segment_that_lost_its_checkpoint():
    plan = load_plan()
    seg = next(s for s in segments(plan) if s["id"] == "ch3-power")
    nb = segment_notebook(plan, seg)
    nb.cells = [c for c in nb.cells if "workshop-checkpoint" not in _tags(c)]
    missing = {name for _, names in unbound_reads(nb) for name in names}
    assert {"LAST", "plain_counts", "pair_prompt", "toy_results", "PAIR_TEST"} <= missing


def test_checkpoint_cells_say_so_and_do_nothing_when_their_state_exists():
    for chapter in ("03_exact.ipynb", "04_how_much_faster.ipynb"):
        cells = [c for c in read_chapter(chapter).cells if "workshop-checkpoint" in _tags(c)]
        assert cells, f"{chapter} has no checkpoint cells"
        for cell in cells:
            first, *rest = cell.source.splitlines()
            assert first.startswith("# checkpoint: rebuilds ") and "run on its own" in cell.source[:300]
            assert any(re.match(r'if .*"\w+" not in globals\(\)', line) for line in rest), cell.source
            assert "remove-cell" in _tags(cell), "a checkpoint does nothing in the book: keep it off the page"


def test_each_block_fits_its_slot():
    for session in load_plan()["sessions"]:
        for block in session["blocks"]:
            spent = sum(s["minutes"] for s in block.get("segments", [])) + block.get("exercises_minutes", 0)
            assert spent <= slot_minutes(block["time"]), (block["time"], spent)


def test_instructors_page_holds_the_tables_rendered_from_the_plan():
    text = INSTRUCTORS.read_text(encoding="utf-8")
    assert render_into(text, load_plan()) == text, \
        "instructors.md and workshop_plan.yml disagree: run `python tests/test_workshop_plan.py --write`"
    assert "workshop_plan.yml" in text.replace(_begin(""), "")


def test_rendering_fails_without_the_markers():
    with pytest.raises(ValueError, match="no `%"):
        render_into("# For instructors\n\nno markers here\n", load_plan())


# ---- kernel tests: each segment alone, in a fresh kernel, in quick mode ----

def _cell_seconds(nb) -> list[tuple[float, str]]:
    """(seconds, cell id) of each executed code cell, from the timestamps nbclient records."""
    from datetime import datetime
    out = []
    for cell in nb.cells:
        ex = cell.get("metadata", {}).get("execution", {})
        if "iopub.execute_input" in ex and "shell.execute_reply" in ex:
            start, end = (datetime.fromisoformat(ex[k].replace("Z", "+00:00"))
                          for k in ("iopub.execute_input", "shell.execute_reply"))
            out.append(((end - start).total_seconds(), cell.get("id")))
    return out


@pytest.mark.slow
@pytest.mark.kernel
@pytest.mark.parametrize("seg", segments(load_plan()), ids=lambda s: s["id"])
def test_segment_runs_alone_in_a_fresh_kernel(seg, nbclient):
    plan = load_plan()
    if n := chapter_prefix(plan, seg):
        pytest.skip(f"segment {seg['id']} is the first {n} code cells of {seg['chapter']}: the chapter's run "
                    "in a fresh kernel (scripts/test.sh) runs it exactly as it runs alone")
    nb = segment_notebook(plan, seg)
    env_before = dict(os.environ)
    os.environ.update(SPECDEC_QUICK="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1")
    t0 = time.perf_counter()
    try:
        nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                resources={"metadata": {"path": str(BOOK)}}).execute()
    except nbclient.exceptions.CellExecutionError as e:
        pytest.fail(f"segment {seg['id']} of {seg['chapter']}, run alone: {str(e)[-2000:]}")
    finally:
        os.environ.clear()
        os.environ.update(env_before)
    print(f"segment {seg['id']} ({seg['chapter']}): {time.perf_counter() - t0:.0f} s in a fresh kernel; "
          "slowest "
          "cells: " + ", ".join(f"{cid} {s:.0f} s" for s, cid in sorted(_cell_seconds(nb), reverse=True)[:3]))
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors, errors


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(__doc__)
    text = render_into(INSTRUCTORS.read_text(encoding="utf-8"), load_plan())
    INSTRUCTORS.write_text(text, encoding="utf-8")
    print(f"rendered {PLAN.name} into {INSTRUCTORS.relative_to(ROOT)}")
