#!/usr/bin/env bash
# The diagnostic study of docs/SYNTHETIC.md, from scratch: the synthetic_find grid
# (configs/grids.py) over three pretraining seeds on the `find` task, then its tables,
# paired tests and plots.
#
#   bash scripts/synthetic_study.sh [OUT] [RESULTS_DIR]   # defaults: runs/synthetic_find,
#                                                         #   docs/results/synthetic_find
#   DRY_RUN=1 bash scripts/synthetic_study.sh             # print the rows and commands only
#   ROWS=syn_mh_h2,syn_mh_h8 bash scripts/synthetic_study.sh   # some rows (the rest later)
#   SEEDS=0,1,2,3,4 STEPS=400 EVAL_EVERY=10 ROWS=... bash scripts/synthetic_study.sh OUT DIR
#                                         # finer steps-to-99% (use a new OUT: other settings)
#
# Every run trains on the same corpus (its seed is part of the spec); the pretraining
# seed changes the initialisation, the batch order and nothing else. Only the answers
# are masked, always with [MASK], so the eval accuracy is the accuracy on the masked
# answers of held-out sequences (chance 1/32). Rerunning skips finished runs.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/synthetic_find}
RESULTS=${2:-docs/results/synthetic_find}
PYTHON=${PYTHON:-python}
STEPS=${STEPS:-1000}
SEEDS=${SEEDS:-0,1,2}
EVAL_EVERY=${EVAL_EVERY:-$((STEPS / 20))}

COMMON=(
  --out "$OUT" --parallel 2 --seeds "$SEEDS" --glue_tasks none
  --pretrain_args "steps=$STEPS,batch=64,seq_len=48,lr=3e-3"
  --pretrain_overrides "data.corpus=synthetic:find:pairs=32:queries=6:n=60000:seed=0"
  --pretrain_overrides "data.mask_targets=a[0-9]+"
  --pretrain_overrides data.mask_prob=1.0
  --pretrain_overrides data.mask_token_prob=1.0
  --pretrain_overrides data.random_token_prob=0.0
  --pretrain_overrides data.max_predictions_per_seq=6
  --pretrain_overrides data.eval_fraction=0.05
  --pretrain_overrides optimizer.warmup_steps=100
  --pretrain_overrides model.sparse_final_layer=false
  --pretrain_overrides eval_batches=8
  --pretrain_overrides "eval_every_steps=$EVAL_EVERY"
  --pretrain_overrides "log_every_steps=$((STEPS / 4))"
  --pretrain_overrides "checkpoint_every_steps=$STEPS"
)
if [[ -n "${DRY_RUN:-}" ]]; then COMMON+=(--dry_run); fi
if [[ -n "${ROWS:-}" ]]; then COMMON+=(--rows "$ROWS"); fi
"$PYTHON" scripts/sweep.py --grid synthetic_find "${COMMON[@]}"
if [[ -n "${DRY_RUN:-}" ]]; then exit 0; fi
# Its pairs: configs/grids.py PAIRS (each fix at the same heads, and the key size).
"$PYTHON" scripts/tables.py --out "$OUT" --grid synthetic_find --tables_dir "$RESULTS" \
    --plots "$RESULTS" --steps_to "eval_accuracy>=0.99"
