"""scripts/check_book.py: its page checks on hand-made HTML, and (with Chromium) a tiny broken book."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("check_book", ROOT / "scripts" / "check_book.py")
cb = importlib.util.module_from_spec(spec)
sys.modules["check_book"] = cb  # dataclasses look their module up there
spec.loader.exec_module(cb)
CHROMIUM = "/usr/bin/chromium"


def code(source, outputs=(), tags=()):
    return {"cell_type": "code", "source": source, "outputs": list(outputs), "metadata": {"tags": list(tags)}}


PNG = {"output_type": "display_data", "data": {"image/png": "iVBORw0KGgo="}, "metadata": {}}
TEXT = {"output_type": "stream", "name": "stdout", "text": "hi"}


def test_parser_counts_output_images_ids_links_and_raw_math():
    page = cb.parse_page('<div id="top"><div class="cell_output"><p><img src="a.png"></p></div>'
                         '<img src="logo.png"><a href="x.html#y">x</a>'
                         '<span class="math">\\(a+b\\)</span><mjx-container></mjx-container></div>')
    assert page.output_images == 1 and page.ids == {"top"} and page.links == ["x.html#y"]
    assert page.raw_math == ["\\(a+b\\)"] and page.mjx_containers == 1


def test_rendered_math_passes_and_raw_math_fails():
    source = '<span class="math notranslate">\\(x\\)</span>'
    rendered = cb.parse_page('<span class="math notranslate"><mjx-container>x</mjx-container></span>')
    assert cb.check_math(source, rendered) == []
    assert cb.check_math(source, cb.parse_page(source))  # MathJax never ran
    assert cb.check_math("<p>no math</p>", cb.parse_page("<p>no math</p>")) == []


def test_figures_counted_unless_removed_or_glued():
    glued = dict(PNG, metadata={"scrapbook": {"name": "fig"}})
    nb = {"cells": [code("plot()", [PNG]), code("plot()", [PNG], ["remove-output"]), code("glue()", [glued]),
                    code("print()", [TEXT])]}
    figures, problems, executed = cb.notebook_expectations(nb)
    assert (figures, problems, executed) == (1, [], True)


def test_widget_without_static_twin_is_reported():
    far = [code(f"x{i} = {i}", [TEXT]) for i in range(4)]
    lonely = {"cells": [code("plot()", [PNG]), *far,
                        code("viz.step_through(a, b)", [TEXT], ["remove-output"])]}
    assert cb.notebook_expectations(lonely)[1]
    twin = {"cells": [*far, code("plot()", [PNG]), code("interact(f, x=1)", [TEXT])]}
    assert cb.notebook_expectations(twin)[1] == []
    unexecuted = {"cells": [code("interact(f, x=1)")]}
    assert cb.notebook_expectations(unexecuted) == (0, [], False)


def test_links_to_missing_pages_and_fragments_are_broken(tmp_path):
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "b.html").write_text('<h1 id="there">b</h1>')
    page = cb.parse_page('<a href="b.html#there">ok</a><a href="b.html#gone">bad</a><a href="c.html">bad</a>'
                         '<a href="https://example.org/">external</a><a href="#self">bad</a>')
    ids_of = lambda p: frozenset(cb.parse_page(p.read_text()).ids)  # noqa: E731
    (tmp_path / "book" / "a.html").write_text("<p>a</p>")
    problems = cb.check_links("book/a.html", page, tmp_path, ids_of)
    assert len(problems) == 3 and all("broken link" in p for p in problems)
    assert cb.external_resources(cb.parse_page('<script src="https://cdn.example/x.js"></script>'))


@pytest.mark.slow
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Chromium (apt-get install -y chromium)")
def test_chromium_finds_a_missing_image_a_broken_link_and_a_missing_figure(tmp_path):
    html = tmp_path / "_build" / "html"
    (html / "book").mkdir(parents=True)
    (html / "index.html").write_text('<meta http-equiv="Refresh" content="0; url=book/good.html" />')
    (html / "book" / "good.html").write_text('<html><body><h1 id="t">fine</h1>'
                                             '<a href="#t">top</a></body></html>')
    (html / "book" / "ch.html").write_text('<html><body><img src="../_images/gone.png">'
                                           '<a href="nowhere.html">x</a></body></html>')
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "ch.ipynb").write_text(json.dumps({"cells": [code("plot()", [PNG])]}))
    shots = tmp_path / "shots"
    problems = cb.check_book(html, tmp_path, shots, CHROMIUM)
    assert all(p.startswith("book/ch.html") for p in problems), problems
    text = "\n".join(problems)
    assert "missing image" in text and "broken link 'nowhere.html'" in text and "shows 0 figures" in text
    assert (shots / "book__good.png").exists() and (shots / "book__ch.png").exists()
