#!/usr/bin/env bash
# The diagnostic studies of docs/SYNTHETIC.md, from scratch: a grid of configs/grids.py
# over pretraining seeds on a synthetic task, then its tables, paired tests and plots.
#   TASK=find (default): grid synthetic_find, one position among 32 (a one-hot pattern)
#   TASK=mode: grid synthetic_mode, the most held value among a query's members (a dense
#              pattern of rank about 16; docs/SYNTHETIC.md, "a task that needs a dense
#              pattern")
#
#   bash scripts/synthetic_study.sh [OUT] [RESULTS_DIR]   # defaults: runs/synthetic_TASK,
#                                                         #   docs/results/synthetic_TASK
#   DRY_RUN=1 bash scripts/synthetic_study.sh             # print the rows and commands only
#   ROWS=syn_mh_h2,syn_mh_h8 bash scripts/synthetic_study.sh   # some rows (the rest later)
#   SEEDS=0,1,2,3,4 STEPS=400 EVAL_EVERY=10 ROWS=... bash scripts/synthetic_study.sh OUT DIR
#                                         # finer steps-to-99% (use a new OUT: other settings)
#   TASK=mode SEEDS=0,1,2,3,4 ROWS=mode_mh_h2,mode_mh_h32 bash scripts/synthetic_study.sh
#   CHECKPOINT_EVERY=500 ...              # long runs: a stop loses at most 500 steps
#                                         # (default: one checkpoint, at the end)
#
# Every run trains on the same corpus (its seed is part of the spec); the pretraining
# seed changes the initialisation, the batch order and nothing else. Only the answers
# are masked, always with [MASK], so the eval accuracy is the accuracy on the masked
# answers of held-out sequences (chance: find 1/32, mode 1/8). Rerunning skips finished
# runs.
set -euo pipefail
cd "$(dirname "$0")/.."
TASK=${TASK:-find}
case "$TASK" in
  # corpus, sequence length, answers per sequence, batch, default steps, "solved"
  find) CORPUS="synthetic:find:pairs=32:queries=6:n=60000:seed=0"; SEQ_LEN=48; ANSWERS=6
        BATCH=64; DEFAULT_STEPS=1000; SOLVED="eval_accuracy>=0.99" ;;
  mode) CORPUS="synthetic:mode:pairs=32:keys=16:values=8:n=100000:seed=0"; SEQ_LEN=40
        ANSWERS=1; BATCH=128; DEFAULT_STEPS=1500; SOLVED="eval_accuracy>=0.9" ;;
  *) echo "error: TASK=$TASK is not one of find, mode" >&2; exit 1 ;;
esac
OUT=${1:-runs/synthetic_$TASK}
RESULTS=${2:-docs/results/synthetic_$TASK}
PYTHON=${PYTHON:-python}
STEPS=${STEPS:-$DEFAULT_STEPS}
SEEDS=${SEEDS:-0,1,2}
EVAL_EVERY=${EVAL_EVERY:-$((STEPS / 20))}

COMMON=(
  --out "$OUT" --parallel 2 --seeds "$SEEDS" --glue_tasks none
  --pretrain_args "steps=$STEPS,batch=$BATCH,seq_len=$SEQ_LEN,lr=3e-3"
  --pretrain_overrides "data.corpus=$CORPUS"
  --pretrain_overrides "data.mask_targets=a[0-9]+"
  --pretrain_overrides data.mask_prob=1.0
  --pretrain_overrides data.mask_token_prob=1.0
  --pretrain_overrides data.random_token_prob=0.0
  --pretrain_overrides "data.max_predictions_per_seq=$ANSWERS"
  --pretrain_overrides data.eval_fraction=0.05
  --pretrain_overrides optimizer.warmup_steps=100
  --pretrain_overrides model.sparse_final_layer=false
  --pretrain_overrides eval_batches=8
  --pretrain_overrides "eval_every_steps=$EVAL_EVERY"
  --pretrain_overrides "log_every_steps=$((STEPS / 4))"
  --pretrain_overrides "checkpoint_every_steps=${CHECKPOINT_EVERY:-$STEPS}"
)
if [[ -n "${DRY_RUN:-}" ]]; then COMMON+=(--dry_run); fi
if [[ -n "${ROWS:-}" ]]; then COMMON+=(--rows "$ROWS"); fi
"$PYTHON" scripts/sweep.py --grid "synthetic_$TASK" "${COMMON[@]}"
if [[ -n "${DRY_RUN:-}" ]]; then exit 0; fi
# Its pairs: configs/grids.py PAIRS (each fix at the same heads, and the key size).
"$PYTHON" scripts/tables.py --out "$OUT" --grid "synthetic_$TASK" --tables_dir "$RESULTS" \
    --plots "$RESULTS" --steps_to "$SOLVED"
