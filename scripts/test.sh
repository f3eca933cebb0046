#!/usr/bin/env bash
# Set up, run the test suite, execute every chapter with nbmake (quick mode), and build the book with
# warnings as errors. Both run on a scratch copy of the book, so the committed notebooks stay output-free.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
export SPECDEC_QUICK=${SPECDEC_QUICK:-1} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
start=$(date +%s)

echo "== unit and statistical tests"
python -m pytest -q tests

echo "== chapters (nbmake, SPECDEC_QUICK=$SPECDEC_QUICK)"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cp -r book _config.yml _toc.yml "$scratch"/
python -m pytest -q -p no:cacheprovider --nbmake --nbmake-timeout=900 --overwrite "$scratch"/book

echo "== book (jupyter-book, -W -n --keep-going)"
jupyter-book build "$scratch" -W -n --keep-going
rm -rf _build && cp -r "$scratch/_build" _build
echo "book written to _build/html/index.html"
echo "== all done in $(( $(date +%s) - start )) s"
