#!/usr/bin/env bash
# Parts 2 and 3 of docs/RESULTS.md, from scratch: real text past the unigram stage
# (grid text_small), then the classifier question (grid classifier_question), both at
# five pretraining seeds (the bar for a verdict in docs/RESULTS.md) into one OUT, then
# their tables, paired tests and plots.
#
#   bash scripts/text_study.sh [OUT] [RESULTS_DIR]   # defaults: runs/text_study, docs/results
#   DRY_RUN=1 bash scripts/text_study.sh             # print the rows and commands only
#   GRIDS=text_small bash scripts/text_study.sh      # one part (the other later)
#   ROWS=txt_mh_h8,txt_th_h8 GRIDS=text_small bash scripts/text_study.sh   # some rows
#   STEPS=6000 bash scripts/text_study.sh runs/text_6000   # a longer budget, elsewhere
#   SEEDS=0,1,2 bash scripts/text_study.sh runs/text_3    # fewer seeds: quicker, weaker tests
#
# STEPS=3000 (12.3M tokens, 1.4 passes over the 137,509 training sequences) is what
# docs/RESULTS.md ran: about 12 minutes per pretraining alone on 2 cores, 15-17 with two
# at a time; the whole study at five seeds took 5 hours of wall time on a 2-core machine
# (times there).
#
# One OUT: one tokenizer and packed corpus for every row, and the classifier grid's
# txt_mh_h8 / txt_th_h8 are part 2's runs (finished ones are skipped), whose
# checkpoints its cls_* rows fine-tune (configs/grids.py: pretrained_by).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/text_study}
RESULTS=${2:-docs/results}
PYTHON=${PYTHON:-python}
STEPS=${STEPS:-3000}
GRIDS=${GRIDS:-text_small,classifier_question}
SEEDS=${SEEDS:-0,1,2,3,4}

COMMON=(
  --out "$OUT" --parallel 2 --seeds "$SEEDS"
  --pretrain_args "steps=$STEPS,batch=64,seq_len=64,lr=5e-3"
  --pretrain_overrides data.corpus=../shared/data/corpus
  --pretrain_overrides data.eval_fraction=0.05
  --pretrain_overrides data.max_predictions_per_seq=10
  --pretrain_overrides optimizer.warmup_steps=200
  --pretrain_overrides eval_batches=16
  --pretrain_overrides "eval_every_steps=$((STEPS / 6))"
  --pretrain_overrides "checkpoint_every_steps=$((STEPS / 3))"
  --glue_tasks sst2 --glue_dir ../shared/data/glue
  --glue_args seeds=3,lr=3e-4,epochs=2,max_train=4000,seq_len=64
  --glue_overrides write_test_predictions=false
)
if [[ -n "${DRY_RUN:-}" ]]; then COMMON+=(--dry_run); fi
if [[ -n "${ROWS:-}" ]]; then COMMON+=(--rows "$ROWS"); fi
for grid in ${GRIDS//,/ }; do
  "$PYTHON" scripts/sweep.py --grid "$grid" "${COMMON[@]}"
done
if [[ -n "${DRY_RUN:-}" ]]; then exit 0; fi
for grid in ${GRIDS//,/ }; do
  "$PYTHON" scripts/tables.py --out "$OUT" --grid "$grid" --tables_dir "$RESULTS/$grid" \
      --plots "$RESULTS/$grid"
done
