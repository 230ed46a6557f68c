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


@pytest.mark.slow
def test_the_attention_family_rows_count_as_by_hand():
    """BERT-base 12 heads: each dynamic map adds D x 12 x 12 per layer; general bilinear
    attention at 2 heads has multi-head's attention parameters exactly (2 h D^2 = 4 D^2,
    biases h D + D = 2 D + D vs 3 D + D: one D fewer per layer)."""
    from models.flops import parameter_counts

    def params(name):
        cfg = ModelConfig.from_config(model_configs.get_config(f"row={name}").model)
        return parameter_counts(cfg)[0], cfg

    base, _ = params("fam_base_mh_h12")
    assert base == 109_482_240  # BERT-base, as the papers count it
    assert params("fam_base_th_h12")[0] - base == 12 * 2 * 12 * 12  # P_l, P_w
    for subset in grids.DYNAMIC_SUBSETS:
        name = f"fam_base_th_{subset.replace('+', '_')}_h12"
        count, cfg = params(name)
        assert cfg.talking_heads.dynamic_projections == subset
        assert count - params("fam_base_th_h12")[0] == \
            12 * len(subset.split("+")) * 768 * 12 * 12, name
    d = 768
    gb2, cfg = params("fam_base_gb_h2")
    assert cfg.attention == "general_bilinear" and cfg.head_key_size == d
    # multi-head per layer: 4 D^2 + 4 D; general bilinear: 2 h D^2 + h D + D
    assert gb2 - base == 12 * ((2 * 2 * d * d + 2 * d + d) - (4 * d * d + 4 * d))
    assert params("fam_base_gb_h12")[0] - base == \
        12 * ((2 * 12 * d * d + 12 * d + d) - (4 * d * d + 4 * d))
    assert [pair for pair in grids.PAIRS["general_bilinear"]][0] == \
        ("fam_base_mh_h12", "fam_base_gb_h2")
