"""scripts/accelerator_check.py: its parts (fused vs einsum parity, bf16 vs fp32) in
--quick mode on the CPU, and its report table."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow  # compiles several models


def test_accelerator_check_parts_run_in_quick_mode(tmp_path):
    """scripts/accelerator_check.py runs on GPUs only when one is lent: keep its parts
    working on the CPU at tiny shapes (the speed part is benchmark.py's: test_benchmark.py)."""
    from scripts import accelerator_check

    parity = accelerator_check.fused_parity(quick=True)
    agreement = accelerator_check.bf16_agreement(quick=True)
    assert parity["pass"] and agreement["pass"]
    report = {"device": "cpu:cpu", "jax": "x", "date": "today", "parts": {
        "fused_parity": parity, "bf16_agreement": agreement,
        "speed": {"error": "RuntimeError: example"}}}
    table = accelerator_check.markdown(report)
    assert "| fused_parity |" in table and "| speed | error: RuntimeError: example | no |" in table
