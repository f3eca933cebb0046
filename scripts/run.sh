#!/usr/bin/env bash
# The main job on the offline default pair: set up, then generate from a prompt with speculative
# decoding and compare with plain decoding. Extra arguments go to `python -m specdec_ref`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
python -m specdec_ref "$@"
