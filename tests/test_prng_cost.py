"""scripts/prng_cost.py: the dropout PRNG's cost in the compiled train step, the table
docs/PERFORMANCE.md records and scripts/accelerator_check.py calls measure() for."""

from __future__ import annotations

import pytest

from scripts import prng_cost


@pytest.mark.slow  # compiles two train steps
def test_each_choice_is_counted_in_its_own_ops_and_tabled():
    rows = prng_cost.measure("configs/pretrain.py:size=micro,layers=1", batch=2, seq_len=16,
                             choices=["threefry", "rbg"], steps=1)
    threefry, rbg = rows
    assert [r["dropout_prng"] for r in rows] == ["threefry", "rbg"]
    assert threefry["threefry_ops"] > 0 and threefry["rng_bit_generator_ops"] == 0
    # rbg draws with the generator and still derives its keys (fold_in) with threefry
    assert rbg["rng_bit_generator_ops"] > 0 and rbg["threefry_ops"] > 0
    assert all(r["hlo_ops"] > 0 and r["compile_s"] > 0 and r["step_s"] > 0 for r in rows)
    table = prng_cost.markdown(rows, {"backend": "cpu"}).splitlines()
    assert table[0] == "backend=cpu" and table[-1].startswith("| rbg | ")
    assert table[-2].endswith("| 1.00x |")  # threefry against itself


def test_the_default_choices_add_the_gpu_kernel_lowering_on_gpu_only():
    assert prng_cost.default_choices("cpu") == ["off", "threefry", "rbg", "unsafe_rbg"]
    assert prng_cost.default_choices("gpu")[-1] == "threefry_gpu_kernel"
    with pytest.raises(ValueError, match="dropout_prng='philox' is unknown"):
        prng_cost.measure("configs/pretrain.py:size=micro", choices=["philox"])
