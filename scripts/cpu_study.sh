#!/usr/bin/env bash
# The CPU-scale study of docs/RESULTS.md, from scratch: both grids, then the tables.
#
#   bash scripts/cpu_study.sh [OUT] [RESULTS_DIR]     # defaults: runs/cpu_study, docs/results
#   DRY_RUN=1 bash scripts/cpu_study.sh               # print the rows and commands only
#
# Both grids share OUT, so they share one tokenizer and packed corpus (built once, not
# once per grid). The key-size grid uses
# pretraining seed 1: its ks_cpu_k32 row is the same model as th_cpu_mh_h8
# (seed 0), so the pair measures seed-to-seed noise instead of repeating a run.
# Rerunning skips finished runs. About 2 hours on a 2-core CPU (docs/RESULTS.md).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/cpu_study}
RESULTS=${2:-docs/results}
PYTHON=${PYTHON:-python}

COMMON=(
  --out "$OUT" --parallel 2
  --pretrain_args steps=250
  --pretrain_overrides data.corpus=../shared/data/corpus
  --pretrain_overrides data.eval_fraction=0.05
  --pretrain_overrides eval_batches=16
  --pretrain_overrides eval_every_steps=125
  --pretrain_overrides model.sparse_final_layer=false
  --glue_tasks sst2,stsb --glue_dir ../shared/data/glue
  --glue_args seeds=3,lr=2e-4,epochs=1,max_train=2000,seq_len=64
  --glue_overrides write_test_predictions=false
)
if [[ -n "${DRY_RUN:-}" ]]; then COMMON+=(--dry_run); fi
"$PYTHON" scripts/sweep.py --grid talking_heads_cpu "${COMMON[@]}"
"$PYTHON" scripts/sweep.py --grid key_size_cpu --seeds 1 "${COMMON[@]}"
if [[ -n "${DRY_RUN:-}" ]]; then exit 0; fi
for grid in talking_heads_cpu key_size_cpu; do
  "$PYTHON" scripts/tables.py --out "$OUT" --grid "$grid" --tables_dir "$RESULTS/$grid" \
      --plots "$RESULTS/$grid"
done
