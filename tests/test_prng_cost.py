"""scripts/prng_cost.py: the dropout PRNG's cost in the compiled train step, the table
docs/PERFORMANCE.md records and scripts/accelerator_check.py calls measure() for."""

from __future__ import annotations

import pytest

from scripts import prng_cost

HLO = """\
HloModule jit_train_step
%fused_computation.1 (param_0: u32[4]) -> u32[4] {
  %param_0 = u32[4]{0} parameter(0)
  ROOT %xor.1 = u32[4]{0} xor(%param_0, %param_0), metadata={op_name="jit(train_step)/\
bert/embeddings/dropout/jit(_threefry_fold_in)/while"}
}
ENTRY %main (state: u64[2]) -> f32[] {
  %state = u64[2]{0} parameter(0)
  %rng = (u64[2], u32[8]) rng-bit-generator(%state), algorithm=rng_default
  %bits = u32[4]{0} fusion(%state), kind=kLoop, calls=%fused_computation.1, metadata={\
op_name="jit(train_step)/Dropout_0/jit(_bernoulli)/jit(_uniform)/rng_bit_generator"}
  ROOT %loss = f32[] constant(0), metadata={op_name="jit(train_step)/mlm_sums/reduce_sum"}
}
"""


def test_instructions_are_counted_by_where_they_came_from():
    """Every instruction, fusion bodies included; threefry's by jax's threefry functions in
    op_name; the generator's by its opcode or its op_name (XLA's CPU and GPU backends
    expand it into instructions of their own)."""
    counts = prng_cost.hlo_counts(HLO)
    assert counts == {"hlo_chars": len(HLO), "hlo_ops": 6, "threefry_ops": 1,
                      "rng_bit_generator_ops": 2}


@pytest.mark.slow  # compiles a train step
def test_a_choice_is_measured_and_tabled():
    rows = prng_cost.measure("configs/pretrain.py:size=micro,layers=1", batch=2, seq_len=16,
                             choices=["rbg"], steps=1)
    assert [r["dropout_prng"] for r in rows] == ["rbg"]
    # rbg draws with the generator and still derives its keys (fold_in) with threefry
    assert rows[0]["rng_bit_generator_ops"] > 0 and rows[0]["threefry_ops"] > 0
    assert rows[0]["compile_s"] > 0 and rows[0]["step_s"] > 0 and rows[0]["temp_bytes"] > 0
    assert rows[0]["step_vs_threefry"] is None  # no threefry row to pair with
    table = prng_cost.markdown(rows, {"backend": "cpu"}).splitlines()
    assert table[0] == "backend=cpu" and table[-1].startswith("| rbg | 1")
    assert table[-1].endswith("| - |")


def test_the_default_choices_add_the_gpu_kernel_lowering_on_gpu_only():
    assert prng_cost.default_choices("cpu") == ["off", "threefry", "rbg", "unsafe_rbg"]
    assert prng_cost.default_choices("gpu")[-1] == "threefry_gpu_kernel"
    with pytest.raises(ValueError, match="dropout_prng='philox' is unknown"):
        prng_cost.measure("configs/pretrain.py:size=micro", choices=["philox"])
