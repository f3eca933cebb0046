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
python -m pytest -q -m kernel tests -k "not segment_runs_alone"  # tests that start a Jupyter kernel, outside the workers
# The workshop plan's segments, each alone in a fresh kernel (book/workshop_plan.yml): two processes, one core each
seg() { OMP_NUM_THREADS=1 python -m pytest -q -p no:cacheprovider -m kernel tests/test_workshop_plan.py -k "$1"; }
seglogs=$(mktemp -d)
seg "segment_runs_alone and (ch1 or ch2 or ch3)" > "$seglogs/a.log" 2>&1 & s1=$!
seg "segment_runs_alone and not (ch1 or ch2 or ch3)" > "$seglogs/b.log" 2>&1 & s2=$!
r1=0 r2=0
wait $s1 || r1=$?
wait $s2 || r2=$?
cat "$seglogs/a.log" "$seglogs/b.log" && rm -rf "$seglogs"
[ $r1 = 0 ] && [ $r2 = 0 ] || { echo "a workshop segment failed (see above)" >&2; exit 1; }

echo "== a reader's runtime: the package and its runtime dependencies only (.venv-reader)"
bash scripts/setup_reader.sh
if .venv-reader/bin/python -c "import myst_nb" 2>/dev/null || .venv-reader/bin/python -c "import jupyter_book" 2>/dev/null; then
  echo "the reader's runtime must not have myst-nb or jupyter-book" >&2; exit 1
fi

echo "== chapters (nbmake in the reader's runtime, SPECDEC_QUICK=$SPECDEC_QUICK)"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cp -r book _config.yml _toc.yml "$scratch"/
# Two pytest processes, one core each, with the chapters split into two bins of about equal time (quick mode:
# chapters 5 + 6 take about as long as all the others together). A fixed split keeps both cores busy to the end;
# a new chapter lands in the first bin.
heavy=(05_choosing_a_draft 06_in_production)
first=() second=()
for name in "${heavy[@]}"; do second+=("$scratch/book/$name.ipynb"); done
for nb in "$scratch"/book/*.ipynb; do
  [[ " ${heavy[*]} " == *" $(basename "$nb" .ipynb) "* ]] || first+=("$nb")
done
cell_timeout=$([ "$SPECDEC_QUICK" = 0 ] && echo 900 || echo 300)  # quick-mode cells take a minute at most
chapters() { OMP_NUM_THREADS=1 .venv-reader/bin/python -m pytest -q -p no:cacheprovider --nbmake --nbmake-timeout=$cell_timeout --overwrite "$@"; }
chapters "${first[@]}" > "$scratch/first.log" 2>&1 & p1=$!
chapters "${second[@]}" > "$scratch/second.log" 2>&1 & p2=$!
r1=0 r2=0
wait $p1 || r1=$?
wait $p2 || r2=$?
cat "$scratch/first.log" "$scratch/second.log"
[ $r1 = 0 ] && [ $r2 = 0 ] || { echo "a chapter failed (see above)" >&2; exit 1; }

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
