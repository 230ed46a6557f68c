#!/usr/bin/env bash
# The accelerator checks in one command (scripts/accelerator_check.py): fused vs einsum
# attention, bf16 vs fp32 loss, the base/128 bf16 benchmark with MFU, talking-heads
# memory. For a GPU/TPU machine that has jax/flax/optax/orbax but not this project's
# other needs: wheels in .whl/ (see docs/PERFORMANCE.md for how to download them) are
# installed into /tmp/site first. Writes OUT_DIR/check.json and OUT_DIR/check.md.
#
#   bash scripts/accelerator_check.sh OUT_DIR [--quick]
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-accelerator_check}"
shift || true
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1
mkdir -p "$out"
# The whole check is sized to finish well inside 8 minutes on one H200.
timeout 470 python3 scripts/accelerator_check.py --out "$out" "$@" 2>&1 | tee "$out/log.txt"
