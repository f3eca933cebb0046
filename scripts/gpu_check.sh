#!/usr/bin/env bash
# The GPU check in one command, sized for the lent GPU machine (no network, at most 10 minutes a command,
# results back as at most 8 files no more than 2 folders deep): the whole check stops itself within
# $GPU_CHECK_BUDGET seconds (default 470, under 8 minutes), and every part has its own timeout:
#   timing        time_fn's synchronised timings against CUDA events (within 10%)                      45 s
#   tiny          tiny Qwen2 and Llama pairs loaded as Hub pairs from save_pretrained folders: float16,
#                 vocabulary slicing, and the float16 probe falling back on an overflowing target        90 s
#   offline       the offline target's one-time GGUF conversion                                          90 s
#   side-by-side  the offline pair on the GPU: plain eager against static+compiled, Hugging Face
#                 generate plain and assisted (γ set on the assistant's generation_config), ours chain
#                 and dynamic tree, eager against compiled; warm-up on the real shapes, untimed          180 s
#   chapter NN    each chapter in quick mode, one at a time (nbmake, never xdist),
#                 PAIR = "offline"                                                                150 s each
# After each part it prints one summary line and rewrites summary.json, so a check cut short still says how
# far it got. Results, under $GPU_CHECK_OUT (default $OUT/gpu_check, else a temporary folder): summary.json,
# gpu_check.log, side_by_side.json, side_by_side.png; everything else (tiny models, the chapters' copies and
# the files they write) goes to a scratch folder that does not come back. Exit 1 if a part failed or timed
# out. Without CUDA it says so and exits 0; GPU_CHECK_DRY_RUN=1 runs the parts on the CPU instead (tiny
# models, static buffers for CUDA graphs, no chapters unless GPU_CHECK_CHAPTERS names some): the tests use it.
# GPU_CHECK_CHAPTERS="04_how_much_faster 06_in_production" runs only those chapters (default: all, in order, as
# long as the budget lasts; the rest are recorded as SKIP). Python: $PYTHON, else .venv/bin/python, else python3. GPU_CHECK_TINY: a folder of tiny pairs made by
# `python -m specdec_ref.lab.gpu_check make-tiny` (gpu_stage.sh carries one); default: made here.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
dry=${GPU_CHECK_DRY_RUN:-0}
has_cuda="import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"
if [ "$dry" = 0 ] && ! "$PYTHON" -c "$has_cuda" 2>/dev/null; then
  echo "gpu_check: no CUDA device visible to $PYTHON (or no torch there): nothing to check on this machine."
  echo "Run it on a GPU machine, with a CUDA build of torch: PYTHON=/path/to/python bash scripts/gpu_check.sh"
  exit 0
fi
out=${GPU_CHECK_OUT:-${OUT:+$OUT/gpu_check}}
out=${out:-$(mktemp -d)}
mkdir -p "$out"
scratch=$(mktemp -d)
log="$out/gpu_check.log" summary="$out/summary.json"
: >"$log"
export SPECDEC_QUICK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 MPLBACKEND=Agg
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
budget=${GPU_CHECK_BUDGET:-470}
dry_flag=() && [ "$dry" != 0 ] && dry_flag=(--dry-run)
lines=() failed=0

json_escape() { sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' | tr -d '\000-\037'; }

record() {  # part, status, seconds, detail: one summary line, and summary.json rewritten
  lines+=("$(printf '%-24s %-7s %4ss  %s' "$1" "$2" "$3" "$4")")
  printf '%s\n' "${lines[-1]}" | tee -a "$log"
  [ "$2" = FAIL ] || [ "$2" = TIMEOUT ] && failed=1
  local detail; detail=$(printf '%s' "$4" | json_escape)
  entries+=("{\"part\": \"$1\", \"status\": \"$2\", \"seconds\": $3, \"detail\": \"$detail\"}")
  local ok=true && [ $failed = 1 ] && ok=false
  local dry_json=false && [ "$dry" != 0 ] && dry_json=true
  { printf '{"ok": %s, "budget_s": %s, "dry_run": %s, "parts": [\n' "$ok" "$budget" "$dry_json"
    local IFS=$'\n'; printf '%s' "${entries[*]}" | sed -e '$!s/$/,/'; printf '\n]}\n'; } >"$summary"
}
entries=()

part() {  # name, timeout (s), command...: run it under min(timeout, what is left of the budget)
  local name=$1 limit=$2 left=$((budget - SECONDS)); shift 2
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 10 ]; then record "$name" SKIP 0 "no time left in the ${budget}s budget"; return; fi
  echo "== $name (at most ${limit}s)" >>"$log"
  local start=$SECONDS rc
  timeout -k 5 "$limit" "$@" >"$scratch/part.out" 2>&1; rc=$?
  cat "$scratch/part.out" >>"$log"
  local last; last=$(grep -v '^[[:space:]]*$' "$scratch/part.out" | tail -n 1 | cut -c1-400)
  if [ $rc = 124 ] || [ $rc = 137 ]; then
    record "$name" TIMEOUT $((SECONDS - start)) "stopped after ${limit}s"
  elif [ $rc != 0 ]; then record "$name" FAIL $((SECONDS - start)) "exit $rc: $last"
  elif [[ "$last" == *SKIP* ]]; then record "$name" SKIP $((SECONDS - start)) "$last"
  else record "$name" PASS $((SECONDS - start)) "$last"; fi
}

"$PYTHON" - <<'PY' | tee -a "$log"
import sys, torch, transformers
where = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "the CPU (dry run)"
print("gpu_check on", where, "| Python", sys.version.split()[0], "| torch", torch.__version__,
      "| transformers", transformers.__version__)
PY

if [ "$dry" = 0 ]; then part timing 45 "$PYTHON" -m specdec_ref.lab.gpu_check timing
else record timing SKIP 0 "dry run: CUDA events need a GPU"; fi

tiny=${GPU_CHECK_TINY:-$scratch/tiny}  # made by the tiny part where it is missing
part tiny 90 "$PYTHON" -m specdec_ref.lab.gpu_check tiny "$tiny" "${dry_flag[@]}"

if [ "$dry" = 0 ]; then
  part offline 90 "$PYTHON" -c "from specdec_ref.models.loading import load_offline_target as load
load(); print('offline target ready')"
fi
part side-by-side 180 "$PYTHON" -m specdec_ref.lab.gpu_check side-by-side "$out/side_by_side.json" "$tiny" \
  "${dry_flag[@]}"

# Chapters: one at a time in a scratch copy of the book (what they write stays there), PAIR = "offline"
default_chapters=""
if [ "$dry" = 0 ]; then default_chapters=$(ls book/0*.ipynb | xargs -n1 basename | sed 's/\.ipynb$//'); fi
chapters=${GPU_CHECK_CHAPTERS-$default_chapters}
if [ -z "$chapters" ]; then record chapters SKIP 0 "no chapters asked for (GPU_CHECK_CHAPTERS)"; fi
if [ -n "$chapters" ]; then
  mkdir -p "$scratch/book-run" && cp -r book _config.yml _toc.yml "$scratch/book-run"/
  "$PYTHON" - "$scratch"/book-run/book/*.ipynb <<'PY'
import json, sys
for path in sys.argv[1:]:
    nb = json.load(open(path))
    for cell in nb["cells"]:
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        cell["source"] = src.replace('PAIR = "auto"', 'PAIR = "offline"')
    json.dump(nb, open(path, "w"), indent=1)
PY
  for ch in $chapters; do
    limit=${GPU_CHECK_CHAPTER_TIMEOUT:-150}
    part "chapter ${ch%%_*}" "$limit" "$PYTHON" -m pytest -q -p no:cacheprovider -p no:xdist --nbmake \
      --nbmake-timeout="$limit" "$scratch/book-run/book/$ch.ipynb"
  done
fi

echo "== summary ($out: $(ls "$out" | tr '\n' ' '))" | tee -a "$log"
printf '%s\n' "${lines[@]}"
rm -rf "$scratch"
exit $failed
