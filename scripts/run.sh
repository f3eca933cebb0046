#!/usr/bin/env bash
# The main job on the offline default pair: set up, compile the target's CPU pass once per machine
# (`python -m specdec_ref compile`: a few minutes the first time, skipped afterwards; SPECDEC_AOT=0 skips it and
# runs the eager path), then generate from a prompt with speculative decoding and compare with plain decoding.
# Extra arguments go to `python -m specdec_ref`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
if [ "${SPECDEC_AOT:-1}" != 0 ]; then  # the compiled pass is an optimisation: if it cannot be built, say so, go on
  python -m specdec_ref compile || echo "run.sh: the compiled pass could not be built here; running the eager path"
fi
python -m specdec_ref "$@"
