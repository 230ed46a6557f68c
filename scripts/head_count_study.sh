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
#       # pair: each row lands alone in RESULTS/rows/ROW/table.json, which
#       # scripts/compare_finetuning.py --row ROW=... reads back); two processes at once:
#       # split by HEADS, or by VARIANTS once the head count's pretraining is done (while
#       # it runs, a second train.py on it is refused)
#   bash scripts/head_count_study.sh                 # at the end: skips every finished run
#                                                    # and writes the whole table
#   DRY_RUN=1 bash scripts/head_count_study.sh       # print the commands only
#
# Talking heads trained as talking heads (docs/RESULTS.md part 9), not inserted: each of
# these variants has a pretraining of its own per head count (with INIT=scratch a 1-step
# one that only fixes its architecture), so it is trained natively from the start:
#   nat_th_identity, nat_th_fan_in   identity / fan-in mixing (th_init)
#   nat_th_ref                       the reference: Mesh TF's truncated fan-in draw
#   slip_drop_before                 the reference with attention dropout before P_w
#   slip_no_pre                      the reference without the pre-softmax mixing P_l
#   slip_model_std                   mixing drawn at the model's init stddev (0.02)
#   HEADS=48,96 VARIANTS=mh,nat_th_ref,slip_drop_before,slip_no_pre,slip_model_std \
#       bash scripts/head_count_study.sh runs/th_slips docs/results/th_slips_scratch
# PRE_LR (default 1e-3) is the pretraining's rate; another one pretrains into
# pretrain_h{H}[_VARIANT]_lr{PRE_LR} and fine-tunes into h{H}/{VARIANT}_pre{PRE_LR}, so a
# rate grid of pretrainings lives in one OUT; PRE_SEED (default 0) likewise adds _seed{S}
# to both (a second pretraining seed); PRETRAIN_ONLY=1 stops after pretraining.
# PRE_LR=best runs each row at the rate scripts/rate_bracket.py picks from OUT's seed-0
# grid (the lowest final eval loss, a lower and a higher rate both worse), refusing a row
# whose grid does not bracket it; its rows keep their rate's names, so the table pairs
# each variant at its own best rate (default table head_counts_INIT_prebest...):
#   for lr in 3e-4 1e-3 3e-3; do INIT=pretrained STEPS=4000 PRE_LR=$lr PRETRAIN_ONLY=1 \
#       HEADS=48 VARIANTS=mh,nat_th_identity bash scripts/head_count_study.sh runs/x; done
#   INIT=pretrained STEPS=4000 PRE_LR=best PRE_SEED=1 HEADS=48 ... # a second seed, then
#   INIT=pretrained STEPS=4000 PRE_LR=best SEEDS=10 HEADS=48 ...   # fine-tune and compare
# LANDED_BRACKET (comma-separated) names results files of rate_bracket.py (--json) whose
# finished runs stand in for grid workdirs OUT lacks, e.g. on a fresh clone (runs/ is not
# committed) a second seed at the landed grid's rates, without rerunning the grid:
#   LANDED_BRACKET=docs/results/native_heads/rate_bracket.json INIT=pretrained STEPS=4000 \
#       PRE_LR=best PRE_SEED=1 PRETRAIN_ONLY=1 HEADS=48 bash scripts/head_count_study.sh ...
# (a seed-0 row at its best rate is then pretrained again before it is fine-tuned).
# BRACKET_STEPS (default STEPS) is the schedule whose grid PRE_LR=best reads; a
# pretraining of other STEPS than it is named by them (_steps{N} on its folder and rows):
# multi-head at talking heads' FLOPs, 1.16x the steps at 48 heads, at its 4000-step rate:
#   INIT=pretrained STEPS=4640 BRACKET_STEPS=4000 PRE_LR=best HEADS=48 VARIANTS=mh ...
# TASK (default sst2) fine-tunes another GLUE task, e.g. a sentence pair (TASK=mrpc), into
# OUT/TASK/h{H}/... with its own default table, on the same pretrainings. A task scored
# by another metric than accuracy that has accuracy too (MRPC's and QQP's F1) lands its
# rows and table scored by accuracy beside, in RESULTS/accuracy/.
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
LANDED_BRACKET=${LANDED_BRACKET:-}
case "$INIT" in
  scratch) STEPS=${STEPS:-1} ;;
  pretrained) STEPS=${STEPS:-1000} ;;
  *) echo "error: INIT=$INIT: choose scratch or pretrained" >&2; exit 1 ;;
esac
PRE_LR=${PRE_LR:-1e-3}
BRACKET_STEPS=${BRACKET_STEPS:-$STEPS}
PRE_SEED=${PRE_SEED:-0}
# Inserted into the multi-head pretraining (the reader's swap): eval_glue.py's flags.
declare -A INSERTED=(
  [mh]=""
  [th_identity]="--config.insert_talking_heads=true --config.insert_th_init=identity"
  [th_fan_in]="--config.insert_talking_heads=true --config.insert_th_init=fan_in"
)
# Trained natively, each with its own pretraining: configs/model.py args.
TH=attention=talking_heads
declare -A NATIVE=(
  [nat_th_identity]="$TH,th_init=identity"
  [nat_th_fan_in]="$TH,th_init=fan_in"
  [nat_th_ref]="$TH,th_init=truncated_fan_in"
  [slip_drop_before]="$TH,th_init=truncated_fan_in,th_dropout_at=before_mixing"
  [slip_no_pre]="$TH,th_init=truncated_fan_in,th_projections=weights"
  [slip_model_std]="$TH,th_init=model_std"
)
KNOWN="mh, th_identity, th_fan_in, nat_th_identity, nat_th_fan_in, nat_th_ref, slip_drop_before, slip_no_pre, slip_model_std"
NEEDS_MH_PRETRAINING=""  # an inserted variant (mh included) fine-tunes the multi-head one
for name in ${VARIANTS//,/ }; do
  if [[ -n "${INSERTED[$name]+x}" ]]; then
    NEEDS_MH_PRETRAINING=1
  elif [[ -z "${NATIVE[$name]+x}" ]]; then
    echo "error: VARIANTS: $name is not one of $KNOWN" >&2; exit 1
  fi
done
RUN=()
if [[ -n "${DRY_RUN:-}" ]]; then RUN=(echo); fi
MODEL="layers=2,hidden=384,mlp=1536,max_len=64,norm=pre,init_std=0.02"
# Pretraining and fine-tuning folders of another pretraining rate than 1e-3 say so, and
# of another pretraining seed than 0.
name_suffixes() {  # name_suffixes RATE: sets PRE_DIR_SUFFIX and ROW_SUFFIX
  PRE_DIR_SUFFIX="" ROW_SUFFIX=""
  if [[ "$1" != 1e-3 ]]; then PRE_DIR_SUFFIX="_lr$1" ROW_SUFFIX="_pre$1"; fi
  if [[ "$PRE_SEED" != 0 ]]; then
    PRE_DIR_SUFFIX+="_seed$PRE_SEED" ROW_SUFFIX+="_seed$PRE_SEED"
  fi
  if [[ "$STEPS" != "$BRACKET_STEPS" ]]; then
    PRE_DIR_SUFFIX+="_steps$STEPS" ROW_SUFFIX+="_steps$STEPS"
  fi
}
# PRE_LR, or with PRE_LR=best each row's bracketed rate in OUT at BRACKET_STEPS (one
# rate_bracket.py call for every row; it prints "ROW RATE" lines or one error per row).
declare -A RATE_OF  # row (VARIANT_h{HEADS}, rate_bracket.py's name) -> pretraining rate
resolve_rates() {  # resolve_rates ROW...: fills RATE_OF; exits on a row not bracketed
  local row picks
  if [[ "$PRE_LR" != best ]]; then
    for row in "$@"; do RATE_OF[$row]=$PRE_LR; done
    return
  fi
  local args=()
  for row in "$@"; do args+=(--best "$row"); done
  local landed landed_files=()
  IFS=, read -ra landed_files <<< "$LANDED_BRACKET"  # no globbing, spaces kept
  for landed in "${landed_files[@]}"; do args+=(--landed "$landed"); done
  picks=$("$PYTHON" scripts/rate_bracket.py --study "$OUT" --steps "$BRACKET_STEPS" --seed 0 \
      "${args[@]}") || exit 1  # rate_bracket.py said why, one line per row
  for row in "$@"; do
    RATE_OF[$row]=$(awk -v want="$row" '$1 == want {print $2; exit}' <<< "$picks")
    if [[ -z "${RATE_OF[$row]}" ]]; then
      echo "error: scripts/rate_bracket.py gave no rate for $row" >&2
      exit 1
    fi
  done
}
name_suffixes "$PRE_LR"  # the default table's name: _prebest with PRE_LR=best
# Another task than SST-2 fine-tunes into OUT/TASK/.
TASK=${TASK:-sst2}
TASK_DIR="$OUT" TASK_SUFFIX=""
if [[ "$TASK" != sst2 ]]; then TASK_DIR="$OUT/$TASK" TASK_SUFFIX="_$TASK"; fi
# Rows and the default table of another pretraining rate, seed or task are named by it.
RESULTS=${2:-docs/results/head_counts_$INIT$ROW_SUFFIX$TASK_SUFFIX}
# The tables by the task's main metric, and by accuracy beside one that is not it (MRPC's
# F1 rewards always answering "paraphrase": 81 F1 at 68% accuracy).
METRICS=("")
BESIDE=$("$PYTHON" -c "import sys, glue; t = glue.get_task(sys.argv[1])
print('accuracy' if t.main_metric != 'accuracy' and 'accuracy' in t.metric_names else '')" \
    "$TASK" 2>/dev/null) || BESIDE=""  # an unknown TASK: eval_glue.py says so
if [[ -n "$BESIDE" ]]; then METRICS+=("$BESIDE"); fi
scored_by() {  # scored_by METRIC: compare_finetuning.py's flag and the results folder
  if [[ -z "$1" ]]; then METRIC_FLAG=() METRIC_RESULTS=$RESULTS
  else METRIC_FLAG=(--metric "$1") METRIC_RESULTS=$RESULTS/$1; fi
}
# A long pretraining checkpoints every 250 steps (a killed one loses at most that) and
# evaluates 8 times; a 1-step one once.
CHECKPOINT_EVERY=$(( STEPS < 250 ? STEPS : 250 ))
EVAL_EVERY=$(( STEPS >= 8 ? STEPS / 8 : STEPS ))

pretrain() {  # pretrain WORKDIR MODEL_ARGS RATE; status 1: it diverged, nothing to fine-tune
  # A finished pretraining is not opened again (no corpus check, no compile), nor one that
  # diverged (a rerun stops at the same step); train.py resumes the rest. A run that
  # diverges is a rate grid's worst point (scripts/rate_bracket.py), not the study's end.
  if [[ -n "${DRY_RUN:-}" ]]; then
    :
  elif "$PYTHON" -m training.results --is_finished "$1" --steps "$STEPS"; then
    echo "$1: finished ($STEPS steps), skipped"
    return 0
  elif "$PYTHON" -m training.results --is_diverged "$1"; then
    echo "$1: diverged (its diverged.json), skipped: nothing to fine-tune"
    return 1
  fi
  local status=0
  "${RUN[@]}" "$PYTHON" train.py \
      --config "configs/pretrain.py:$MODEL,$2,steps=$STEPS,batch=64,seq_len=64,lr=$3,preds=10,seed=$PRE_SEED" \
      --config.data.corpus="$CORPUS" --config.data.cache_dir="$OUT/data_cache" \
      --config.data.eval_fraction=0.05 --config.optimizer.warmup_steps=$(( STEPS / 10 )) \
      --config.eval_every_steps="$EVAL_EVERY" \
      --config.checkpoint_every_steps="$CHECKPOINT_EVERY" \
      --config.eval_batches=16 --workdir "$1" || status=$?
  if (( status == 0 )); then return 0; fi
  if "$PYTHON" -m training.results --is_diverged "$1"; then
    echo "$1: diverged at rate $3 (its diverged.json): nothing to fine-tune"
    return 1
  fi
  exit "$status"
}

ROWS=()
PAIRS=()
TREND=()
# Every row's rate before anything runs: a grid that does not bracket one stops the study
# here (rate_bracket.py says why), not after hours of the other rows.
WANTED=()
for heads in ${HEADS//,/ }; do
  for name in ${NEEDS_MH_PRETRAINING:+mh} ${VARIANTS//,/ }; do
    row="${name}_h$heads"
    if [[ ( -n "${NATIVE[$name]+x}" || "$name" == mh ) && " ${WANTED[*]} " != *" $row "* ]]; then
      WANTED+=("$row")  # once each: multi-head is wanted by mh and by insertions
    fi
  done
done
resolve_rates "${WANTED[@]}"
for heads in ${HEADS//,/ }; do
  declare -A ROW_OF=()  # variant -> its row at this head count (its rate, its seed); a
  # variant whose pretraining diverged has none
  mh_diverged=""
  if [[ -n "$NEEDS_MH_PRETRAINING" ]]; then
    mh_rate=${RATE_OF[mh_h$heads]}
    name_suffixes "$mh_rate"
    mh_pretraining="$OUT/pretrain_h$heads$PRE_DIR_SUFFIX" mh_suffix="$ROW_SUFFIX"
    if ! pretrain "$mh_pretraining" "heads=$heads" "$mh_rate"; then mh_diverged=1; fi
  fi
  for name in ${VARIANTS//,/ }; do
    if [[ -n "${NATIVE[$name]+x}" ]]; then
      rate=${RATE_OF[${name}_h$heads]}
      name_suffixes "$rate"
      source_dir="$OUT/pretrain_h${heads}_$name$PRE_DIR_SUFFIX" flags=""
      if ! pretrain "$source_dir" "heads=$heads,${NATIVE[$name]}" "$rate"; then continue; fi
    else
      if [[ -n "$mh_diverged" ]]; then continue; fi
      source_dir="$mh_pretraining" flags="${INSERTED[$name]}" ROW_SUFFIX="$mh_suffix"
    fi
    ROW_OF[$name]="${name}_h$heads$ROW_SUFFIX"
    if [[ -n "${PRETRAIN_ONLY:-}" ]]; then continue; fi
    # shellcheck disable=SC2086  # the variant's flags are words
    "${RUN[@]}" "$PYTHON" eval_glue.py \
        --config "configs/glue.py:task=$TASK,seeds=$SEEDS,lr=$LRS,epochs=$EPOCHS,max_train=$MAX_TRAIN,seq_len=64,group_by_length=true,buckets=32/64,init=$INIT" \
        --config.init_from="$source_dir" --config.glue_dir="$GLUE_DIR" \
        --config.write_test_predictions=false --config.save_model=none \
        $flags --workdir "$TASK_DIR/h$heads/$name$ROW_SUFFIX"
    ROWS+=(--row "${ROW_OF[$name]}=$TASK_DIR/h$heads/$name$ROW_SUFFIX")
  done
  # Multi-head against each talking-heads row, identity against fan-in, and each slip
  # against the reference it departs from (with PRE_LR=best, each at its own rate).
  for pair in mh:th_identity mh:th_fan_in th_identity:th_fan_in \
      mh:nat_th_identity mh:nat_th_fan_in nat_th_identity:nat_th_fan_in \
      mh:nat_th_ref mh:slip_drop_before mh:slip_no_pre mh:slip_model_std \
      nat_th_ref:slip_drop_before nat_th_ref:slip_no_pre nat_th_ref:slip_model_std; do
    a=${pair%:*} b=${pair#*:}
    if [[ -n "${ROW_OF[$a]+x}" && -n "${ROW_OF[$b]+x}" ]]; then
      PAIRS+=(--pairs "${ROW_OF[$a]}:${ROW_OF[$b]}")
    fi
  done
  if [[ -n "${ROW_OF[mh]+x}" && -n "${ROW_OF[th_fan_in]+x}" ]]; then
    TREND+=(--trend "${ROW_OF[mh]}:${ROW_OF[th_fan_in]}@$heads")
  fi
done
# Does the fan-in deficit grow with the head count? (a fresh draw leaves each head
# 1/heads of its own weight): one regression over the head counts, when there are two.
if (( ${#TREND[@]} < 4 )); then TREND=(); else TREND+=(--trend_label "th_fan_in - mh"); fi
if [[ -n "${PRETRAIN_ONLY:-}" ]]; then exit 0; fi
if (( ${#PAIRS[@]} == 0 )); then
  # A part of the study (one variant): each row's scores land alone in RESULTS/rows/ROW,
  # so its table can pair them later from a clone without these workdirs
  # (scripts/compare_finetuning.py --row ROW=RESULTS/rows/ROW/table.json).
  for metric in "${METRICS[@]}"; do
    scored_by "$metric"
    for (( i = 1; i < ${#ROWS[@]}; i += 2 )); do
      "${RUN[@]}" "$PYTHON" scripts/compare_finetuning.py --row "${ROWS[i]}" \
          "${METRIC_FLAG[@]}" --out "$METRIC_RESULTS/rows/${ROWS[i]%%=*}"
    done
    echo "no pair among VARIANTS=$VARIANTS: no table; each row landed alone in" \
        "$METRIC_RESULTS/rows/ (compare_finetuning.py --row" \
        "ROW=$METRIC_RESULTS/rows/ROW/table.json${metric:+ --metric $metric})" >&2
  done
  exit 0
fi
for metric in "${METRICS[@]}"; do
  scored_by "$metric"
  "${RUN[@]}" "$PYTHON" scripts/compare_finetuning.py "${ROWS[@]}" "${PAIRS[@]}" "${TREND[@]}" \
      "${METRIC_FLAG[@]}" --out "$METRIC_RESULTS"
done
