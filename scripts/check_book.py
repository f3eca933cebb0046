"""Check the rendered book in a real browser (headless Chromium), offline.

    python scripts/check_book.py _build/html [--source DIR] [--screenshots DIR] [--chromium PATH]

It serves the built book on localhost, opens every page in headless Chromium (its own command line:
--dump-dom after the page's scripts ran, then --screenshot), and fails on
  * a resource the page asked for that the server could not deliver (a missing image, script, font);
  * a page that loads a script, stylesheet or image from another host (the book must work offline);
  * a broken internal link: a missing page, or a #fragment that no element on the target page has;
  * math left as raw \\( \\) source, or math that MathJax did not turn into <mjx-container>;
  * fewer figures on a chapter page than its executed notebook has figure outputs;
  * a widget cell without a static figure within three code cells of it (STYLE.md 16).
With --launch-only it runs no browser and checks only that every chapter's Colab button opens the chapter's
student copy (book/students/) and that the site publishes the student copies (students/<chapter>.ipynb).
The figure checks read the executed notebooks in the build's source folder (--source, by default the
folder that holds _build). A notebook without any outputs was not executed: its figure checks are
skipped, with a note. A screenshot of every page goes to --screenshots.
"""
from __future__ import annotations

import argparse
import functools
import http.server
import json
import re
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio"]
VIRTUAL_TIME_MS = 15000  # virtual time for the page's scripts (MathJax) before the DOM is dumped
IMAGE_MIMES = ("image/png", "image/svg+xml", "image/jpeg", "image/gif")

# A widget cell is one whose code builds a widget. Not every widget output counts: in a kernel with
# ipywidgets, tqdm's progress bars (model loading) are widgets too, and they need no static twin.
WIDGET_SOURCE = re.compile(r"\binteract(ive)?\(|\bwidgets\.\w+\(|\bviz\.(step_through|pq_explorer)\(|"
                           r"\w+_(widget|explorer)\(")
NEARBY = 3  # a widget's static twin must be within this many code cells of it
IGNORED_PATHS = {"/favicon.ico"}  # browsers ask for it on their own; Sphinx does not make one


# ----------------------------------------------------------------------------------------------
# The page, as the browser left it
# ----------------------------------------------------------------------------------------------

@dataclass
class Page:
    ids: set[str] = field(default_factory=set)
    links: list[str] = field(default_factory=list)  # href of every <a>
    resources: list[str] = field(default_factory=list)  # src/href of scripts, stylesheets, images
    output_images: int = 0  # <img> inside a notebook cell's output
    math_elements: int = 0  # elements of class "math" (what Sphinx emits for MathJax)
    raw_math: list[str] = field(default_factory=list)  # math still shown as TeX source
    mjx_containers: int = 0  # what MathJax leaves behind when it typeset a formula


class _PageParser(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.page = Page()
        self._stack: list[tuple[str, bool, bool]] = []  # (tag, in a cell output, in math)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        in_output = (self._stack[-1][1] if self._stack else False) or "cell_output" in classes
        in_math = (self._stack[-1][2] if self._stack else False) or "math" in classes
        p = self.page
        if a.get("id"):
            p.ids.add(a["id"])
        if tag == "a" and a.get("name"):
            p.ids.add(a["name"])
        if tag == "a" and a.get("href"):
            p.links.append(a["href"])
        if tag in ("script", "img") and a.get("src"):
            p.resources.append(a["src"])
        if tag == "link" and a.get("href") and "stylesheet" in (a.get("rel") or ""):
            p.resources.append(a["href"])
        if tag == "img" and in_output:
            p.output_images += 1
        if "math" in classes:
            p.math_elements += 1
        if tag == "mjx-container":
            p.mjx_containers += 1
        if tag not in ("img", "br", "hr", "meta", "link", "input", "source", "area", "base", "col", "wbr"):
            self._stack.append((tag, in_output, in_math))

    def handle_endtag(self, tag):
        for i in range(len(self._stack) - 1, -1, -1):
            if self._stack[i][0] == tag:
                del self._stack[i:]
                break

    def handle_data(self, data):
        if self._stack and self._stack[-1][2] and re.search(r"\\\(|\\\[|\$\$", data):
            self.page.raw_math.append(data.strip()[:60])


def parse_page(html: str) -> Page:
    parser = _PageParser()
    parser.feed(html)
    return parser.page


# ----------------------------------------------------------------------------------------------
# What the executed notebook says the page should show
# ----------------------------------------------------------------------------------------------

def _tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def _is_figure(output) -> bool:
    shown = "scrapbook" not in output.get("metadata", {})  # glued outputs appear where they are glued
    return shown and any(m in output.get("data", {}) for m in IMAGE_MIMES)


def shown_figures(cell) -> int:
    """Figure outputs of a code cell that the rendered page shows (remove-output/remove-cell hide them)."""
    if cell.get("cell_type") != "code" or {"remove-output", "remove-cell"} & set(_tags(cell)):
        return 0
    return sum(_is_figure(o) for o in cell.get("outputs", []))


def is_widget_cell(cell) -> bool:
    if cell.get("cell_type") != "code":
        return False
    return bool(WIDGET_SOURCE.search("".join(cell.get("source", ""))))


def notebook_expectations(nb: dict) -> tuple[int, list[str], bool]:
    """(figures the page must show, problems with widgets lacking a static twin, executed?)."""
    code = [c for c in nb.get("cells", []) if c.get("cell_type") == "code"]
    executed = any(c.get("outputs") for c in code)
    figures = sum(shown_figures(c) for c in code)
    problems = []
    for i, cell in enumerate(code):
        if is_widget_cell(cell) and executed:
            near = code[max(0, i - NEARBY): i] + code[i + 1: i + 1 + NEARBY]
            if not any(shown_figures(c) for c in near):
                first = "".join(cell.get("source", "")).strip().splitlines()[0][:70]
                problems.append(f"widget cell `{first}` has no static figure within {NEARBY} code cells")
    return figures, problems, executed


# ----------------------------------------------------------------------------------------------
# Links and resources
# ----------------------------------------------------------------------------------------------

def _is_external(url: str) -> bool:
    return urlsplit(url).scheme not in ("", "http", "https") or (
        urlsplit(url).scheme in ("http", "https")
        and urlsplit(url).hostname not in ("127.0.0.1", "localhost"))


def check_links(page_rel: str, page: Page, root: Path, ids_of) -> list[str]:
    """Broken internal links of one page: a missing file, or a fragment without its element."""
    problems = []
    base = "http://book.local/" + page_rel
    for href in page.links:
        if _is_external(href) or href.startswith(("javascript:", "mailto:")):
            continue
        parts = urlsplit(urljoin(base, href))
        path = unquote(parts.path).lstrip("/")
        target = root / path if path else root / "index.html"
        if target.is_dir():
            target = target / "index.html"
        if not target.exists():
            problems.append(f"broken link {href!r}: {target.relative_to(root)} does not exist")
            continue
        frag = unquote(parts.fragment)
        if frag and target.suffix == ".html" and frag not in ids_of(target):
            problems.append(f"broken link {href!r}: no element with id {frag!r} "
                            f"on {target.relative_to(root)}")
    return problems


def external_resources(page: Page) -> list[str]:
    return [f"loads {r!r} from another host (fails offline)" for r in page.resources
            if urlsplit(r).scheme in ("http", "https") and _is_external(r)]


def check_math(html_source: str, page: Page) -> list[str]:
    if 'class="math' not in html_source:
        return []
    if page.raw_math:
        return [f"math left as TeX source ({len(page.raw_math)} times), e.g. {page.raw_math[0]!r}"]
    if page.mjx_containers == 0:
        return ["the page has math, but MathJax rendered none of it (no <mjx-container>)"]
    return []


# ----------------------------------------------------------------------------------------------
# The server and the browser
# ----------------------------------------------------------------------------------------------

class _Recorder(http.server.SimpleHTTPRequestHandler):
    requests: list[tuple[str, int]]  # (path, status), shared by the server's handlers

    def log_request(self, code="-", size="-"):
        self.requests.append((urlsplit(self.path).path, int(code) if str(code).isdigit() else 0))

    def log_message(self, *args):  # quiet
        pass


def serve(root: Path) -> tuple[http.server.ThreadingHTTPServer, list[tuple[str, int]]]:
    requests: list[tuple[str, int]] = []
    handler = type("Recorder", (_Recorder,), {"requests": requests})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(handler, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, requests


def chromium(binary: str, profile: Path, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    cmd = [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def redirect_target(path: Path) -> str | None:
    """The page a redirect page (<meta http-equiv="refresh" content="0; url=...">) sends the reader to."""
    m = re.search(r'<meta[^>]+http-equiv="refresh"[^>]+content="[^"]*url=([^"]+)"', path.read_text(), re.I)
    return unquote(urlsplit(m.group(1)).path) if m else None


def check_book(root: Path, source: Path, shots: Path, binary: str) -> list[str]:
    """Every problem found, as 'page: problem' lines (empty: the book passed)."""
    pages = sorted(p for p in root.rglob("*.html") if not p.relative_to(root).parts[0].startswith("_"))
    shots.mkdir(parents=True, exist_ok=True)

    @functools.lru_cache(maxsize=None)
    def ids_of(path: Path) -> frozenset[str]:
        return frozenset(parse_page(path.read_text(encoding="utf-8", errors="replace")).ids)

    problems: list[str] = []
    server, requests = serve(root)
    port = server.server_address[1]
    try:
        with tempfile.TemporaryDirectory(prefix="check-book-") as profile:
            for path in pages:
                rel = path.relative_to(root).as_posix()
                redirect = redirect_target(path)
                if redirect is not None:  # e.g. index.html -> book/intro.html, which is checked on its own
                    ok = (path.parent / redirect).exists()
                    problems += [] if ok else [f"{rel}: redirects to {redirect}, which does not exist"]
                    print(f"{'ok  ' if ok else 'FAIL'} {rel} (redirects to {redirect})")
                    continue
                url = f"http://127.0.0.1:{port}/{rel}"
                requests.clear()
                run = chromium(binary, Path(profile), f"--virtual-time-budget={VIRTUAL_TIME_MS}",
                               "--dump-dom", url)
                shot = shots / (rel.replace("/", "__").removesuffix(".html") + ".png")
                chromium(binary, Path(profile), f"--virtual-time-budget={VIRTUAL_TIME_MS}",
                         "--window-size=1280,2000", f"--screenshot={shot}", url)
                found = check_page(rel, path, run, list(requests), root, source, ids_of)
                problems += [f"{rel}: {p}" for p in found]
                print(f"{'FAIL' if found else 'ok  '} {rel}" + (f" ({len(found)} problems)" if found else ""))
    finally:
        server.shutdown()
    return problems


def check_page(rel: str, path: Path, run: subprocess.CompletedProcess, requests, root: Path, source: Path,
               ids_of) -> list[str]:
    if run.returncode != 0 or "<html" not in run.stdout:
        return [f"Chromium could not render the page (exit {run.returncode}): {run.stderr.strip()[-300:]}"]
    page = parse_page(run.stdout)
    html_source = path.read_text(encoding="utf-8", errors="replace")
    problems = [f"the browser asked for {p} and got HTTP {s}" + (" (missing image)" if re.search(
        r"\.(png|svg|jpe?g|gif)$", p) else "") for p, s in dict(requests).items()
        if s >= 400 and p not in IGNORED_PATHS]
    problems += (external_resources(page) + check_links(rel, page, root, ids_of)
                 + check_math(html_source, page))
    notebook = source / Path(rel).with_suffix(".ipynb")
    if notebook.exists():
        figures, widget_problems, executed = notebook_expectations(json.loads(notebook.read_text()))
        if not executed:
            print(f"note {rel}: {notebook.name} has no outputs (not executed); figure checks skipped")
        elif page.output_images < figures:
            problems.append(f"shows {page.output_images} figures, but the executed notebook has {figures}")
        problems += widget_problems
    return problems


COLAB_HREF = re.compile(r'href="(https://colab\.research\.google\.com/[^"]+)"')


def check_launch_buttons(root: Path, chapters: list[str]) -> list[str]:
    """Problems with the chapters' Colab buttons and the published student copies (no browser needed)."""
    problems = []
    for name in chapters:  # e.g. "book/03_exact"
        page = root / f"{name}.html"
        if not page.exists():
            problems.append(f"{name}: no page {page.name}")
            continue
        hrefs = COLAB_HREF.findall(page.read_text())
        student = f"/blob/main/{Path(name).parent}/students/{Path(name).name}.ipynb"
        if not any(h.endswith(student) for h in hrefs):
            problems.append(f"{name}: no Colab link to its student copy (*{student}); found {hrefs}")
        if not (root / "students" / f"{Path(name).name}.ipynb").exists():
            problems.append(f"{name}: the site does not publish students/{Path(name).name}.ipynb")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("html", type=Path, help="the built book, e.g. _build/html")
    parser.add_argument("--source", type=Path, help="the build's source folder with the executed notebooks "
                        "(default: the folder that holds _build)")
    parser.add_argument("--screenshots", type=Path,
                        help="where the screenshots go (default: HTML/../screenshots)")
    parser.add_argument("--chromium", default="/usr/bin/chromium", help="the Chromium binary")
    parser.add_argument("--launch-only", action="store_true",
                        help="only check the Colab buttons and the published student copies (no browser)")
    args = parser.parse_args(argv)
    root = args.html.resolve()
    if not (root / "index.html").exists():
        parser.error(f"{root} has no index.html: build the book first (jupyter-book build .)")
    if args.launch_only:
        source = (args.source or root.parent.parent).resolve()
        notebooks = sorted((source / "book").glob("*.ipynb"))
        chapters = [str(p.relative_to(source).with_suffix("")) for p in notebooks]
        problems = check_launch_buttons(root, chapters)
        if problems:
            print(f"{len(problems)} problems:", *problems, sep="\n  ")
            return 1
        print(f"{len(chapters)} Colab buttons open their student copies, published in students/")
        return 0
    if not Path(args.chromium).exists():
        parser.error(f"no Chromium at {args.chromium}: install it with `apt-get install -y chromium`")
    source = (args.source or root.parent.parent).resolve()
    shots = (args.screenshots or root.parent / "screenshots").resolve()
    problems = check_book(root, source, shots, args.chromium)
    print(f"screenshots in {shots}")
    if problems:
        print(f"\n{len(problems)} problems:", *problems, sep="\n  ")
        return 1
    print("the rendered book passed: images, links, math, figures and widgets")
    return 0


if __name__ == "__main__":
    sys.exit(main())
