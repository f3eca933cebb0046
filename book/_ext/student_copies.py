"""Sphinx extension: the book's launch buttons open the student copies, and the build publishes them.

The chapters in book/ carry their solutions (folded in the rendered page, but a hidden solution cell would
overwrite the reader's own function on Run All). scripts/sync_install_cells.py writes student copies beside
them, in book/students/ (no solutions, quick mode on). sphinx-book-theme builds each page's Colab button
from the page's own path; this extension, running after it, points the button at the student copy, and
copies the student notebooks into the built site, as students/<chapter>.ipynb.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

STUDENT_DIR = "students"  # beside the chapters, in book/, and beside the pages, in the built site
_BLOB = re.compile(r"(/blob/[^/]+/)((?:[^/]+/)*)([^/]+\.ipynb)$")  # .../blob/<branch>/<dirs>/<name>.ipynb


def student_url(url: str) -> str:
    """The same link, for the notebook's student copy: `.../blob/main/book/01.ipynb` ->
    `.../blob/main/book/students/01.ipynb`. A link that is not to a notebook comes back unchanged."""
    m = _BLOB.search(url)
    if m is None or m.group(2).endswith(f"{STUDENT_DIR}/"):
        return url
    return url[:m.start()] + m.group(1) + m.group(2) + f"{STUDENT_DIR}/" + m.group(3)


def _launch_buttons(buttons):
    """Every link button in the theme's header buttons (dropdowns hold theirs under "buttons")."""
    for button in buttons or []:
        yield button
        yield from _launch_buttons(button.get("buttons"))


def point_launch_buttons_at_student_copies(app, pagename, templatename, context, doctree) -> None:
    """html-page-context, after the theme's add_launch_buttons (priority 501): Colab opens the student
    copy. Pages without a student copy (the appendix's Markdown pages) keep their links."""
    if not (Path(app.srcdir) / Path(pagename).parent / STUDENT_DIR / f"{Path(pagename).name}.ipynb").exists():
        return
    for button in _launch_buttons(context.get("header_buttons")):
        if button.get("text") == "Colab" and "url" in button:
            button["url"] = student_url(button["url"])


def publish_student_copies(app, exception) -> None:
    """build-finished: copy book/students/*.ipynb into the site, so a workshop can hand out a link."""
    if exception is not None or app.builder.format != "html":
        return
    out = Path(app.outdir) / STUDENT_DIR
    out.mkdir(exist_ok=True)
    for nb in sorted((Path(app.srcdir) / "book" / STUDENT_DIR).glob("*.ipynb")):
        shutil.copy2(nb, out / nb.name)


def setup(app):
    app.connect("html-page-context", point_launch_buttons_at_student_copies, priority=502)
    app.connect("build-finished", publish_student_copies)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
