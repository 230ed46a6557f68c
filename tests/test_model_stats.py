"""scripts/model_stats.py: a table and nothing else, FLOPs to three significant figures."""

from __future__ import annotations

import pytest
from helpers import run_script

from configs import grids
from configs import model as model_configs
from models import ModelConfig
from models.flops import flop_count


@pytest.mark.slow
def test_the_table_holds_only_rows_and_small_rows_keep_their_flops():
    """A JAX backend log line was printed inside the table, and the small rows' GFLOPs
    were rounded to 0.000."""
    result = run_script("model_stats.py", ["--grid=classifier_question"])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert all(line.startswith("|") for line in lines), lines
    rows = {line.split(" | ")[0][2:]: line.strip(" |").split(" | ") for line in lines[2:]}
    assert set(rows) == {row.name for row in grids.GRIDS["classifier_question"]}
    for name, cells in rows.items():
        model = ModelConfig.from_config(model_configs.get_config(f"row={name}").model)
        expected = flop_count(model, 128).encoder_per_token / 1e9
        assert float(cells[-1]) == pytest.approx(expected, rel=5e-3)
        assert float(cells[-1]) > 0
