#!/usr/bin/env bash
# Retrain the feature head on the whole corpus (seeds 0, 1 and 2: 2.1M answer tokens), one design per run folder,
# all sharing one copy of the corpus and of its final-layer features (stage 3, made once in runs/eagle_full).
#
#   bash scripts/train_designs.sh features           # stage 3 only: the target's features of every shard
#   bash scripts/train_designs.sh a1 [a3 b d ...]    # train and export these designs (resumable: rerun to go on)
#
# Designs (each fine-tunes the shipped head unless it says otherwise; the same data, seed and schedule):
#   a1  EAGLE-1's loss (one pass on the target's features)          --ttt-steps 1
#   a3  training-time test, three passes (EAGLE-3, HASS)            --ttt-steps 3
#   e   a1 for longer: STEPS more steps from the shipped head (a1's export after 600 steps)  --ttt-steps 1
#   b   two decoder layers, grown from the shipped one               --n-layers 2 --ttt-steps 1
#   d   a feed-forward block twice as wide, grown from the shipped one --ffn-size 3072 --ttt-steps 1
#   c   a3 with the token loss weighted 1.0 instead of EAGLE's 0.1     --ttt-steps 3 --ce-weight 1.0
#   t   a3's loss plus 0.5 x the total variation 1 - Σ min(p, q) (acceptance at T = 1), from the shipped a3
#                                                                    --ttt-steps 3 --tv-weight 0.5
#   u   t's control: a3's loss alone, the same steps from the shipped a3  --ttt-steps 3
# (b and d use a1's loss, so each differs from a1 in one thing.)
# (A head that fuses target layers reads features 3-4 times as wide: for 3.8M tokens that is 13-17 GB in
# float16, more than a 24 GB machine can train from in memory; it needs its own, smaller run.)
#
# Environment: THREADS (default 2; 1 while anything else runs), STEPS (default 900, about one epoch of 4,096-token
# batches), LR (3e-4), SEEDS (default "1 2": the generation runs joined to seed 0's; SEEDS=1 trains on seeds 0
# and 1 only, 1.6M tokens, whose features take a third of the time, into runs/d_<design>_seeds01). Logs: runs/d_<design>/train.log; exports: runs/d_<design>/export. Then compare them with
# `python scripts/compare_heads.py shipped runs/d_a1/export ... --json runs/heads_full.json`.
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
THREADS=${THREADS:-2} STEPS=${STEPS:-900} LR=${LR:-3e-4}
C=specdec_ref/distill/corpus
SEED0=(--n-generated 1200 --n-grounded 240 --n-template 700 --max-prompts 0)  # stage 1 as the seed-0 run made it
SEEDS=${SEEDS:-1 2}
EXTRA_RUNS=$(for s in $SEEDS; do printf 'runs/corpus_seed%s,' "$s"; done)
EXTRA=(--extra-runs "${EXTRA_RUNS%,}")
SUFFIX=$([ "$SEEDS" = "1 2" ] && echo "" || echo "_seeds0${SEEDS// /}")

corpus() {  # the committed corpus, copied into run folders once
  mkdir -p runs/eagle_full
  [ -f runs/eagle_full/prompts.json ] || cp -r $C/prompts $C/prompts.json $C/answers runs/eagle_full/
  [ -d runs/corpus_seed1 ] || cp -r $C/seed1 runs/corpus_seed1
  [ -d runs/corpus_seed2 ] || cp -r $C/seed2 runs/corpus_seed2
}

features() {
  corpus
  python -m specdec_ref.distill.eagle --out runs/eagle_full "${SEED0[@]}" "${EXTRA[@]}" --threads "$THREADS" \
    --stop-after features
}

design() {  # design name -> its flags
  case $1 in
    a1) echo "--ttt-steps 1 --init specdec_ref/models/weights/feature_draft" ;;
    a3) echo "--ttt-steps 3 --init specdec_ref/models/weights/feature_draft" ;;
    e) echo "--ttt-steps 1 --init specdec_ref/models/weights/feature_draft" ;;
    b) echo "--n-layers 2 --ttt-steps 1 --init specdec_ref/models/weights/feature_draft" ;;
    d) echo "--ffn-size 3072 --ttt-steps 1 --init specdec_ref/models/weights/feature_draft" ;;
    c) echo "--ttt-steps 3 --ce-weight 1.0 --init specdec_ref/models/weights/feature_draft" ;;
    t) echo "--ttt-steps 3 --tv-weight 0.5 --init specdec_ref/models/weights/feature_draft" ;;
    u) echo "--ttt-steps 3 --init specdec_ref/models/weights/feature_draft" ;;
    *) echo "unknown design $1 (a1, a3, e, b, d, c, t, u)" >&2; return 1 ;;
  esac
}

train() {
  local name=$1 flags out=runs/d_$1$SUFFIX
  flags=$(design "$name")
  features
  mkdir -p "$out"
  for f in prompts.json prompts answers features; do  # the shared corpus and features, linked
    [ -e "$out/$f" ] || ln -s "$(pwd)/runs/eagle_full/$f" "$out/$f"
  done
  # shellcheck disable=SC2086
  python -m specdec_ref.distill.eagle --out "$out" "${SEED0[@]}" "${EXTRA[@]}" --threads "$THREADS" $flags \
    --steps "$STEPS" --lr "$LR" --warmup 50 --eval-every 100 --eval-prompts 6 --eval-tokens 96 \
    --export "$out/export"
}

[ $# -gt 0 ] || { sed -n 2,21p "$0"; exit 2; }
for what in "$@"; do
  if [ "$what" = features ]; then features; else train "$what"; fi
done
