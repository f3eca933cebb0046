#!/usr/bin/env bash
# Set up, run the test suite, execute every chapter once with nbmake (quick mode) in a reader's runtime
# (the package and its runtime dependencies only: no myst-nb, no jupyter-book, as on Colab), then build
# the book from those executed copies with warnings as errors. The committed notebooks stay output-free.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
export SPECDEC_QUICK=${SPECDEC_QUICK:-1} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
start=$(date +%s)

echo "== unit and statistical tests"
python -m pytest -q -n 2 -m "not kernel" tests  # two workers: every test runs single-threaded (tests/conftest.py)
python -m pytest -q -m kernel tests  # tests that start a Jupyter kernel, outside the workers

echo "== a reader's runtime: the package and its runtime dependencies only (.venv-reader)"
bash scripts/setup_reader.sh
if .venv-reader/bin/python -c "import myst_nb" 2>/dev/null || .venv-reader/bin/python -c "import jupyter_book" 2>/dev/null; then
  echo "the reader's runtime must not have myst-nb or jupyter-book" >&2; exit 1
fi

echo "== chapters (nbmake in the reader's runtime, SPECDEC_QUICK=$SPECDEC_QUICK)"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cp -r book _config.yml _toc.yml "$scratch"/
OMP_NUM_THREADS=1 .venv-reader/bin/python -m pytest -q -n 2 -p no:cacheprovider --nbmake --nbmake-timeout=900 --overwrite "$scratch"/book

echo "== book (jupyter-book, -W -n --keep-going, from the executed chapters)"
# The chapters ran once, above; the book renders their outputs (glued numbers included) without re-running them.
sed -i 's/^  execute_notebooks: .*/  execute_notebooks: "off"/' "$scratch/_config.yml"
jupyter-book build "$scratch" -W -n --keep-going
rm -rf _build && cp -r "$scratch/_build" _build
echo "book written to _build/html/index.html"
if [ -x /usr/bin/chromium ]; then  # the rendered pages in a real browser (apt-get install -y chromium)
  echo "== the rendered book in headless Chromium (images, links, math, figures, widgets)"
  python scripts/check_book.py _build/html --source "$scratch" --screenshots _build/screenshots
fi
echo "== all done in $(( $(date +%s) - start )) s"
