#!/usr/bin/env bash
# docs/RESULTS.md part 7: the reader's head counts. A 2-layer encoder of width 384 (FFN
# 1536, pre-LN) with 8, 48, 64 and 96 heads (key sizes 48, 8, 6, 4) fine-tuned on SST-2
# as multi-head, as talking heads with identity mixing and as talking heads with fan-in
# mixing (N(0, 1/heads): what a fresh talking-heads layer draws), on one learning-rate
# grid and the same fine-tuning seeds; then one paired table over every head count
# (scripts/compare_finetuning.py: paired t by fine-tuning seed, Holm over the table) and
# the fan-in deficit's trend with the head count (--trend).
#
#   bash scripts/head_count_study.sh [OUT] [RESULTS_DIR]
#       # from scratch: runs/head_counts_scratch, docs/results/head_counts_scratch
#   INIT=pretrained STEPS=1000 bash scripts/head_count_study.sh runs/head_counts_pre \
#       docs/results/head_counts_pretrained   # multi-head pretrained per head count,
#       # then fine-tuned as is / with talking heads inserted at the identity / fan-in
#   HEADS=8,96 bash scripts/head_count_study.sh      # some head counts (the rest later)
#   HEADS=64 VARIANTS=th_fan_in bash scripts/...     # some variants (no table without a
#       # pair); two processes at once: split by HEADS, or by VARIANTS once the head
#       # count's pretraining is done (while it runs, a second train.py on it is refused)
#   bash scripts/head_count_study.sh                 # at the end: skips every finished run
#                                                    # and writes the whole table
#   DRY_RUN=1 bash scripts/head_count_study.sh       # print the commands only
#
# A finished pretraining (training.results --is_finished) is reused as it is, without
# train.py's checks: another CORPUS needs another OUT (other STEPS go to train.py).
#
# INIT=scratch trains every weight on the task: the multi-head "pretraining" per head
# count is then one step, kept only for its architecture and tokenizer (eval_glue.py's
# init=scratch draws all weights per fine-tuning seed; insert_th gives the same
# architecture as talking heads with the chosen mixing init). INIT=pretrained pretrains
# STEPS steps of 64 x 64 tokens on ../shared/data/corpus (about 1 step/s on 2 cores at
# 96 heads) and inserts talking heads into that multi-head checkpoint, the reader's swap.
# Every command skips what its workdir has finished, so rerunning continues the study.
set -euo pipefail
cd "$(dirname "$0")/.."
INIT=${INIT:-scratch}
OUT=${1:-runs/head_counts_$INIT}
RESULTS=${2:-docs/results/head_counts_$INIT}
PYTHON=${PYTHON:-python}
HEADS=${HEADS:-8,48,64,96}
VARIANTS=${VARIANTS:-mh,th_identity,th_fan_in}
VARIANTS=${VARIANTS// /,}
SEEDS=${SEEDS:-5}
LRS=${LRS:-3e-4/1e-3/3e-3}
MAX_TRAIN=${MAX_TRAIN:-2000}
EPOCHS=${EPOCHS:-2}
CORPUS=${CORPUS:-../shared/data/corpus}
GLUE_DIR=${GLUE_DIR:-../shared/data/glue}
case "$INIT" in
  scratch) STEPS=${STEPS:-1} ;;
  pretrained) STEPS=${STEPS:-1000} ;;
  *) echo "error: INIT=$INIT: choose scratch or pretrained" >&2; exit 1 ;;
esac
for name in ${VARIANTS//,/ }; do
  case "$name" in
    mh|th_identity|th_fan_in) ;;
    *) echo "error: VARIANTS: $name is not one of mh, th_identity, th_fan_in" >&2; exit 1 ;;
  esac
done
RUN=()
if [[ -n "${DRY_RUN:-}" ]]; then RUN=(echo); fi
MODEL="layers=2,hidden=384,mlp=1536,max_len=64,norm=pre,init_std=0.02"

declare -A VARIANT=(
  [mh]=""
  [th_identity]="--config.insert_talking_heads=true --config.insert_th_init=identity"
  [th_fan_in]="--config.insert_talking_heads=true --config.insert_th_init=fan_in"
)
ROWS=()
PAIRS=()
TREND=()
for heads in ${HEADS//,/ }; do
  # A finished pretraining is not opened again (no corpus check, no compile); train.py
  # resumes an unfinished one.
  if [[ -z "${DRY_RUN:-}" ]] && "$PYTHON" -m training.results --is_finished \
      "$OUT/pretrain_h$heads" --steps "$STEPS"; then
    echo "$OUT/pretrain_h$heads: finished ($STEPS steps), skipped"
  else
    "${RUN[@]}" "$PYTHON" train.py \
        --config "configs/pretrain.py:$MODEL,heads=$heads,steps=$STEPS,batch=64,seq_len=64,lr=1e-3,preds=10" \
        --config.data.corpus="$CORPUS" --config.data.cache_dir="$OUT/data_cache" \
        --config.data.eval_fraction=0.05 --config.optimizer.warmup_steps=$(( STEPS / 10 )) \
        --config.eval_every_steps="$STEPS" --config.checkpoint_every_steps="$STEPS" \
        --config.eval_batches=16 --workdir "$OUT/pretrain_h$heads"
  fi
  for name in ${VARIANTS//,/ }; do
    # shellcheck disable=SC2086  # the variant's flags are words
    "${RUN[@]}" "$PYTHON" eval_glue.py \
        --config "configs/glue.py:task=sst2,seeds=$SEEDS,lr=$LRS,epochs=$EPOCHS,max_train=$MAX_TRAIN,seq_len=64,group_by_length=true,buckets=32/64,init=$INIT" \
        --config.init_from="$OUT/pretrain_h$heads" --config.glue_dir="$GLUE_DIR" \
        --config.write_test_predictions=false --config.save_model=none \
        ${VARIANT[$name]} --workdir "$OUT/h$heads/$name"
    ROWS+=(--row "${name}_h$heads=$OUT/h$heads/$name")
  done
  for pair in mh:th_identity mh:th_fan_in th_identity:th_fan_in; do
    a=${pair%:*} b=${pair#*:}
    if [[ ",$VARIANTS," == *",$a,"* && ",$VARIANTS," == *",$b,"* ]]; then
      PAIRS+=(--pairs "${a}_h$heads:${b}_h$heads")
    fi
  done
  if [[ ",$VARIANTS," == *",mh,"* && ",$VARIANTS," == *",th_fan_in,"* ]]; then
    TREND+=(--trend "mh_h$heads:th_fan_in_h$heads@$heads")
  fi
done
# Does the fan-in deficit grow with the head count? (a fresh draw leaves each head
# 1/heads of its own weight): one regression over the head counts, when there are two.
if (( ${#TREND[@]} < 4 )); then TREND=(); else TREND+=(--trend_label "th_fan_in - mh"); fi
if (( ${#PAIRS[@]} == 0 )); then
  # A part of the study (one variant): its table comes from a run over all of them.
  echo "no pair among VARIANTS=$VARIANTS: no table; rerun with every variant for it" >&2
  exit 0
fi
"${RUN[@]}" "$PYTHON" scripts/compare_finetuning.py "${ROWS[@]}" "${PAIRS[@]}" "${TREND[@]}" \
    --out "$RESULTS"
