#!/usr/bin/env bash
# docs/RESULTS.md "why pretraining hurts": fine-tune every kept checkpoint of one
# pretraining run, and the same architecture from scratch, on one protocol (the same
# learning rates, fine-tuning seeds and examples), then the paired table: scratch
# against each pretraining step. A score that dips and recovers with the steps says
# "too few tokens"; one that keeps falling says "the recipe".
#
#   bash scripts/pretraining_curve.sh RUN [OUT] [RESULTS_DIR]
#       # OUT defaults to RUN/../curve, RESULTS_DIR to docs/results/why_pretraining
#   TASK=sst2 SEEDS=3 LRS=1e-3/3e-3 GLUE_ARGS=epochs=2,max_train=4000,seq_len=64 ...
#   SCRATCH_LRS=3e-4/1e-3 ...   # scratch's own grid (default LRS): a pretrained start
#       # wants a 3-10x higher rate, so one grid that brackets both wastes runs at its ends
#   DRY_RUN=1 bash scripts/pretraining_curve.sh RUN       # print the commands only
#   REFERENCE=DIR_OR_HUB_ID REFERENCE_LRS=5e-5/2e-4/5e-4 ...
#       # also a well-trained Hugging Face BERT on the same protocol, pretrained and from
#       # scratch (OUT/reference, OUT/reference_scratch), and RESULTS_DIR/reference/: does
#       # pretraining help on this protocol when the encoder is well trained?
#   REFERENCE_ONLY=1 ...   # only the reference's fine-tunings (a second process beside
#       # the curve), no table; rerun without it for the tables
#   REFERENCE_SCRATCH=0 ...  # the reference pretrained only (its scratch twin costs as
#       # many runs of a 22.7M model again); its table then pairs it with this curve's rows
#
# Keep several checkpoints when pretraining (--config.keep_checkpoints=7
# --config.checkpoint_every_steps=500). Rerunning skips finished fine-tuning runs.
set -euo pipefail
cd "$(dirname "$0")/.."
RUN=${1:?usage: bash scripts/pretraining_curve.sh PRETRAIN_WORKDIR [OUT] [RESULTS_DIR]}
OUT=${2:-$(dirname "$RUN")/curve}
RESULTS=${3:-docs/results/why_pretraining}
PYTHON=${PYTHON:-python}
TASK=${TASK:-sst2}
SEEDS=${SEEDS:-3}
LRS=${LRS:-1e-3/3e-3}
GLUE_ARGS=${GLUE_ARGS:-epochs=2,max_train=4000,seq_len=64}
GLUE_DIR=${GLUE_DIR:-../shared/data/glue}
# The kept checkpoints' steps (listing them needs no accelerator).
STEPS=$(JAX_PLATFORMS=cpu "$PYTHON" -c "
import sys
from training.checkpoints import Checkpointer
c = Checkpointer(sys.argv[1] + '/checkpoints', read_only=True)
print(' '.join(map(str, sorted(c.all_steps()))))
c.close()" "$RUN")
if [[ -z "$STEPS" ]]; then echo "error: $RUN/checkpoints holds no checkpoint" >&2; exit 1; fi
RUN_CMD=()
if [[ -n "${DRY_RUN:-}" ]]; then RUN_CMD=(echo); fi
CONFIG="configs/glue.py:task=$TASK,seeds=$SEEDS,lr=$LRS,$GLUE_ARGS"
SCRATCH_CONFIG="configs/glue.py:task=$TASK,seeds=$SEEDS,lr=${SCRATCH_LRS:-$LRS},$GLUE_ARGS"
COMMON=(--config.init_from="$RUN" --config.glue_dir="$GLUE_DIR"
        --config.write_test_predictions=false --config.save_model=none)
if [[ -n "${REFERENCE_ONLY:-}" && -z "${REFERENCE:-}" ]]; then
  echo "error: REFERENCE_ONLY=1 needs REFERENCE=DIR_OR_HUB_ID" >&2; exit 1
fi
if [[ -n "${REFERENCE:-}" ]]; then
  # The same task, seeds and examples; its own grid (a 22.7M encoder from a real
  # pretraining wants other rates than a small one) and its own tokenizer.
  REFERENCE_CONFIG="configs/glue.py:task=$TASK,seeds=$SEEDS,lr=${REFERENCE_LRS:-5e-5/2e-4/5e-4},$GLUE_ARGS"
  REFERENCE_NAMES=(reference reference_scratch)
  if [[ ${REFERENCE_SCRATCH:-1} == 0 ]]; then REFERENCE_NAMES=(reference); fi
  for name in "${REFERENCE_NAMES[@]}"; do
    init=pretrained
    if [[ $name == reference_scratch ]]; then init=scratch; fi
    "${RUN_CMD[@]}" "$PYTHON" eval_glue.py --config "$REFERENCE_CONFIG" \
        --config.init_from_hf="$REFERENCE" --config.glue_dir="$GLUE_DIR" \
        --config.write_test_predictions=false --config.save_model=none \
        --config.init="$init" --workdir "$OUT/$name"
  done
  if [[ -n "${REFERENCE_ONLY:-}" ]]; then exit 0; fi
fi
ROWS=(--row "scratch=$OUT/scratch")
TREND=(--trend_label "checkpoint - scratch")
"${RUN_CMD[@]}" "$PYTHON" eval_glue.py --config "$SCRATCH_CONFIG" "${COMMON[@]}" --config.init=scratch \
    --workdir "$OUT/scratch"
for step in $STEPS; do
  "${RUN_CMD[@]}" "$PYTHON" eval_glue.py --config "$CONFIG" "${COMMON[@]}" \
      --config.checkpoint_step="$step" --workdir "$OUT/step$step"
  ROWS+=(--row "step$step=$OUT/step$step")
  # "Too few tokens" predicts the gap to scratch closes as pretraining goes on: the
  # checkpoint - scratch difference regressed on log2(steps).
  TREND+=(--trend "scratch:step$step@$step")
  LAST=$step
done
"${RUN_CMD[@]}" "$PYTHON" scripts/compare_finetuning.py "${ROWS[@]}" "${TREND[@]}" --out "$RESULTS"
if [[ -n "${REFERENCE:-}" ]]; then
  # Pretraining at the reference's architecture (its scratch vs its checkpoint), and the
  # reference against this protocol's scratch model and the last checkpoint here.
  REFERENCE_ROWS=(--row "reference=$OUT/reference" --pairs scratch:reference
                  --pairs "step$LAST:reference")
  if [[ ${REFERENCE_SCRATCH:-1} != 0 ]]; then
    REFERENCE_ROWS=(--row "reference_scratch=$OUT/reference_scratch"
                    --row "reference=$OUT/reference" --pairs reference_scratch:reference
                    --pairs scratch:reference --pairs "step$LAST:reference")
  fi
  "${RUN_CMD[@]}" "$PYTHON" scripts/compare_finetuning.py --row "scratch=$OUT/scratch" \
      --row "step$LAST=$OUT/step$LAST" "${REFERENCE_ROWS[@]}" --out "$RESULTS/reference"
fi
