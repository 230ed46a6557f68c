#!/usr/bin/env bash
# The accelerator checks in one command (scripts/accelerator_check.py): fused vs einsum
# attention, bf16 vs fp32 loss, the base/128 bf16 speed entries against transformers'
# PyTorch BERT (eager and torch.compile'd) with MFU, cold compile seconds scanned vs
# unrolled, talking-heads memory. For a GPU/TPU machine that has jax/flax/optax/orbax
# (and torch/transformers for the peer) but not this project's other needs: wheels in
# .whl/ (docs/PERFORMANCE.md says which and how to download them; carry .whl to the
# machine) are installed into /tmp/site first.
#
#   bash scripts/accelerator_check.sh OUT_DIR [--quick]      # BUDGET_S=300 by default
#
# Six minutes in all on one H200: the installs (seconds), the Python part's budget
# (BUDGET_S, imports and every compile included; its parts share it) and a hard stop
# 40 s after it, so a compile that overruns is cut while every finished part is already
# on disk. Writes at most 5 files, all in OUT_DIR: check.json, check.md (after every
# part), speed.json, speed.md (after every speed entry), log.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-accelerator_check}"
shift || true
start=$(date +%s)
mkdir -p "$out"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
# Unbuffered: a cut-short run's log has every line printed. JAX must not take 75% of the
# GPU at its start: the PyTorch peer shares the device.
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
budget="${BUDGET_S:-300}"
echo "accelerator_check.sh: installs done in $(( $(date +%s) - start ))s; budget ${budget}s" \
  | tee "$out/log.txt"
timeout -k 5 "$((budget + 40))" python3 scripts/accelerator_check.py --out "$out" \
  --budget_s "$budget" "$@" 2>&1 | tee -a "$out/log.txt"
status=${PIPESTATUS[0]}
echo "accelerator_check.sh: exit $status after $(( $(date +%s) - start ))s" | tee -a "$out/log.txt"
exit "$status"
