"""scripts/benchmark.py end to end on a one-layer model: fields, finiteness, FLOPs. No timing."""

from __future__ import annotations

import json
import math

import pytest

from configs import pretrain
from models import ModelConfig
from models.flops import flop_count
from scripts import benchmark

# One layer, width 32, a 128-word vocabulary: compiles in seconds on CPU.
CONFIG = "configs/pretrain.py:size=micro,vocab=128"
BATCH, SEQ_LEN, PREDICTIONS = 2, 16, 3


@pytest.fixture
def run_main(tmp_path):
    """Runs benchmark.main with the given flags; returns the JSON it wrote."""

    def run(*flags: str) -> dict:
        out = tmp_path / "bench.json"
        argv = ["benchmark", f"--config={CONFIG}", f"--batch={BATCH}", f"--seq_len={SEQ_LEN}",
                f"--predictions={PREDICTIONS}", "--steps=2", "--warmup=1",
                "--peak_flops=1e11",  # skips the matmul measurement; MFU is checked below
                f"--json={out}", f"--markdown={tmp_path / 'bench.md'}", *flags]
        benchmark.FLAGS(argv)
        try:
            benchmark.main(["benchmark"])
        finally:
            benchmark.FLAGS.unparse_flags()
        return json.loads(out.read_text())

    return run


def test_main_writes_finite_results_and_flops_from_models_flops(run_main, tmp_path):
    result = run_main("--compare=attention=talking_heads", "--dense_mlm")
    assert [e["name"] for e in result["entries"]] == [
        "ours", "ours[attention=talking_heads]", "ours_dense_mlm"]
    assert result["tokens_per_step"] == BATCH * SEQ_LEN
    for entry in result["entries"]:
        for key in ("step_time_median_s", "tokens_per_s", "mfu", "achieved_flops_per_s",
                    "step_time_ratio", "paired_step_time_ratio", "xla_flops"):
            assert math.isfinite(entry[key]) and entry[key] > 0, (entry["name"], key)
        assert len(entry["step_times_s"]) == 2
        assert entry["memory"]["compiled_bytes"] > 0
        assert entry["hlo_op_counts"]["dots"] > 0
        assert entry["mfu"] == pytest.approx(entry["flops_per_step"]
                                             / entry["step_time_median_s"] / 1e11)
    assert result["entries"][0]["step_time_ratio"] == 1.0

    # The FLOPs are models/flops.py's for the same config: sparse head over B*P targets,
    # the dense variant over every token.
    base = ModelConfig.from_config(pretrain.get_config("size=micro,vocab=128").model)
    th = ModelConfig.from_config(
        pretrain.get_config("size=micro,vocab=128,attention=talking_heads").model)
    tokens, targets = BATCH * SEQ_LEN, BATCH * PREDICTIONS
    expected = [flop_count(base, SEQ_LEN).train_step(tokens, targets),
                flop_count(th, SEQ_LEN).train_step(tokens, targets),
                flop_count(base, SEQ_LEN).train_step(tokens, tokens)]
    assert [e["flops_per_step"] for e in result["entries"]] == expected
    assert expected[1] > expected[0]  # talking heads' mixing is counted
    assert "| ours[attention=talking_heads] |" in (tmp_path / "bench.md").read_text()


def test_synthetic_batch_dense_labels_match_sparse_targets():
    shapes = benchmark.Shapes(batch=3, seq_len=10, predictions=4)
    batch = benchmark.synthetic_batch(shapes, vocab_size=50, seed=1)
    for row in range(3):
        positions = batch["masked_positions"][row]
        assert len(set(positions.tolist())) == 4  # distinct positions
        assert (batch["labels"][row, positions] == batch["masked_ids"][row]).all()
        assert batch["label_weights"][row].sum() == 4
        assert batch["label_weights"][row, positions].all()


def test_compare_args_append_to_the_config_or_replace_it():
    assert benchmark.entry_specs("configs/pretrain.py:size=base", [
        "attention=talking_heads", "configs/model.py:size=mini"]) == [
        "configs/pretrain.py:size=base", "configs/pretrain.py:size=base,attention=talking_heads",
        "configs/model.py:size=mini"]
    assert benchmark.entry_specs("configs/model.py", ["heads=6"]) == [
        "configs/model.py", "configs/model.py:heads=6"]


def test_bad_settings_fail_with_one_clear_error(run_main, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_main("--seq_len=1024")
    assert exit_info.value.code == 1
    assert "max_position_embeddings" in capsys.readouterr().err
