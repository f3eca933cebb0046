#!/usr/bin/env bash
# Set up, run the test suite, execute every chapter once with nbmake (quick mode) in a reader's runtime
# (the package and its runtime dependencies only: no myst-nb, no jupyter-book, as on Colab), then build
# the book from those executed copies with warnings as errors. The committed notebooks stay output-free.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
export SPECDEC_QUICK=${SPECDEC_QUICK:-1} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# a compiled pass this machine built (python -m specdec_ref compile) stays out of the tests and chapters, so
# they run the same everywhere; tests/test_aot.py builds and attaches its own
export SPECDEC_AOT=0
start=$(date +%s)

echo "== lint: ruff (pyflakes, pycodestyle, lines <= 110) and the import layers (lint-imports, pyproject.toml)"
ruff check specdec_ref tests scripts book/_ext
lint-imports

echo "== unit and statistical tests"
# two workers: every test runs single-threaded (tests/conftest.py); a module marked xdist_group stays on one
python -m pytest -q -n 2 --dist loadgroup -m "not kernel" tests

echo "== a reader's runtime: the package and its runtime dependencies only (.venv-reader)"
bash scripts/setup_reader.sh
if .venv-reader/bin/python -c "import myst_nb" 2>/dev/null || .venv-reader/bin/python -c "import jupyter_book" 2>/dev/null; then
  echo "the reader's runtime must not have myst-nb or jupyter-book" >&2; exit 1
fi

echo "== chapters (nbmake in the reader's runtime, SPECDEC_QUICK=$SPECDEC_QUICK), the workshop plan's segments" \
     "(book/workshop_plan.yml: each alone in a fresh kernel) and the other kernel tests: two at a time"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cp -r book _config.yml _toc.yml "$scratch"/
cell_timeout=$([ "$SPECDEC_QUICK" = 0 ] && echo 900 || echo 300)  # quick-mode cells take a minute at most
# One list of jobs, one core each, the longest first (quick mode on 2 cores: chapters 3, 5 and 6 take minutes,
# a chapter's segments one to four, the other chapters one or two), so both cores stay busy to the end.
# scripts/nbclient_poll.py runs nbmake with kernel messages read in slices of a second: after a widget cell
# nbclient could otherwise sit out a whole cell timeout (jupyter/nbclient#312; the kernel tests use the same).
chapter() {
  printf 'chapter %s\tOMP_NUM_THREADS=1 .venv-reader/bin/python scripts/nbclient_poll.py -q -p no:cacheprovider --nbmake --nbmake-timeout=%s --overwrite %s\n' \
    "$1" "$cell_timeout" "$scratch/book/$1.ipynb"
}
segments() {
  printf 'segments of %s\tOMP_NUM_THREADS=1 python -m pytest -q -p no:cacheprovider -m kernel tests/test_workshop_plan.py -k "segment_runs_alone and %s"\n' \
    "$1" "$1"
}
heavy=(03_exact 05_choosing_a_draft 06_in_production)
{
  for name in "${heavy[@]}"; do chapter "$name"; done
  for ch in ch5 ch6 ch4 ch3 ch1; do segments "$ch"; done
  for nb in "$scratch"/book/*.ipynb; do
    name=$(basename "$nb" .ipynb)
    [[ " ${heavy[*]} " == *" $name "* ]] || chapter "$name"
  done
  printf 'kernel tests\tOMP_NUM_THREADS=1 python -m pytest -q -p no:cacheprovider -m kernel tests -k "not segment_runs_alone"\n'
  segments ch2
} > "$scratch/jobs.txt"
python scripts/run_jobs.py --parallel 2 "$scratch/jobs.txt" || { echo "a chapter, segment or kernel test failed (see above)" >&2; exit 1; }

echo "== book (jupyter-book, -W -n --keep-going, from the executed chapters)"
# The chapters ran once, above; the book renders their outputs (glued numbers included) without re-running them.
sed -i.orig 's/^  execute_notebooks: .*/  execute_notebooks: "off"/' "$scratch/_config.yml"  # -i.orig: GNU and BSD sed
rm "$scratch/_config.yml.orig"
jupyter-book build "$scratch" -W -n --keep-going
rm -rf _build && cp -r "$scratch/_build" _build
python scripts/check_book.py _build/html --source "$scratch" --launch-only  # Colab opens the student copies
echo "book written to _build/html/index.html"
if [ -x /usr/bin/chromium ]; then  # the rendered pages in a real browser (apt-get install -y chromium)
  echo "== the rendered book in headless Chromium (images, links, math, figures, widgets)"
  python scripts/check_book.py _build/html --source "$scratch" --screenshots _build/screenshots
fi
echo "== all done in $(( $(date +%s) - start )) s"
