"""scripts/benchmark.py end to end on a one-layer model: fields, finiteness, FLOPs. No timing."""

from __future__ import annotations

import json
import math

import jax
import pytest

from configs import pretrain
from models import ModelConfig
from models.flops import flop_count
from scripts import benchmark

# One layer, width 32, a 128-word vocabulary and no dropout (its RNG doubles the compile
# time): each entry compiles in a few seconds on CPU, which is most of this file's time.
ARGS = "size=micro,vocab=128,dropout=0,attention_dropout=0"
CONFIG = f"configs/pretrain.py:{ARGS}"
BATCH, SEQ_LEN, PREDICTIONS = 2, 16, 3
SHAPES = benchmark.Shapes(BATCH, SEQ_LEN, PREDICTIONS)


def model_config(extra: str = "") -> ModelConfig:
    return ModelConfig.from_config(pretrain.get_config(",".join(filter(None, (ARGS, extra)))).model)


@pytest.fixture(scope="module")
def benchmark_flags():
    """The script's absl flags, defined once in this process (python scripts/benchmark.py
    defines them itself; importing the module defines none)."""
    benchmark.define_flags()
    return benchmark.FLAGS


@pytest.fixture
def run_main(tmp_path, benchmark_flags):
    """Runs benchmark.main with the given flags; returns the JSON it wrote."""

    def run(*flags: str) -> dict:
        out = tmp_path / "bench.json"
        argv = ["benchmark", f"--config={CONFIG}", f"--batch={BATCH}", f"--seq_len={SEQ_LEN}",
                f"--predictions={PREDICTIONS}", "--steps=2", "--warmup=1",
                "--peak_flops=1e11",  # skips the matmul measurement; MFU is checked below
                f"--json={out}", f"--markdown={tmp_path / 'bench.md'}", *flags]
        benchmark_flags(argv)
        try:
            benchmark.main(["benchmark"])
        finally:
            benchmark_flags.unparse_flags()
        return json.loads(out.read_text())

    return run


@pytest.mark.slow
def test_main_writes_finite_results_and_flops_from_models_flops(run_main, tmp_path):
    result = run_main("--compare=attention=talking_heads")
    assert [e["name"] for e in result["entries"]] == ["ours", "ours[attention=talking_heads]"]
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

    # The FLOPs are models/flops.py's for the same config, the MLM head over B*P targets.
    tokens, targets = BATCH * SEQ_LEN, BATCH * PREDICTIONS
    expected = [flop_count(model_config(), SEQ_LEN).train_step(tokens, targets),
                flop_count(model_config("attention=talking_heads"), SEQ_LEN).train_step(
                    tokens, targets)]
    assert [e["flops_per_step"] for e in result["entries"]] == expected
    assert expected[1] > expected[0]  # talking heads' mixing is counted
    assert "| ours[attention=talking_heads] |" in (tmp_path / "bench.md").read_text()


@pytest.mark.slow
def test_dense_mlm_entry_scores_every_position_and_counts_its_flops():
    cfg = model_config()
    batch = benchmark.synthetic_batch(SHAPES, cfg.vocab_size, seed=0)
    opt = benchmark.optimizer_config(pretrain.get_config(ARGS))
    entry = benchmark.our_entry("dense", CONFIG, cfg, opt, SHAPES, batch, 0, dense=True)
    tokens = BATCH * SEQ_LEN
    assert entry.mlm_predictions == tokens
    assert entry.flops == flop_count(cfg, SEQ_LEN).train_step(tokens, tokens)
    # Traced, not compiled: the (B, T) labels go through training/steps.py unchanged.
    _, metrics = jax.eval_shape(entry.step, entry.state, entry.batch)
    assert metrics["loss_sum"].shape == ()


def test_vs_hf_needs_flax_bert_or_says_how_to_get_it():
    cfg = model_config()
    batch = benchmark.synthetic_batch(SHAPES, cfg.vocab_size, seed=0)
    opt = benchmark.optimizer_config(pretrain.get_config(ARGS))
    try:
        from transformers import FlaxBertForMaskedLM  # noqa: F401
    except ImportError:
        with pytest.raises(benchmark.BenchmarkError, match="transformers 4"):
            benchmark.hf_entry(cfg, opt, SHAPES, batch, 0)
        return
    # In the HF venv (docs/PERFORMANCE.md): the HF step traces on the same batch and its
    # FLOPs count the MLM head at every position, as its head computes them.
    entry = benchmark.hf_entry(cfg, opt, SHAPES, batch, 0)
    assert entry.flops == flop_count(cfg, SEQ_LEN).train_step(BATCH * SEQ_LEN, BATCH * SEQ_LEN)
    _, metrics = jax.eval_shape(entry.step, entry.state, entry.batch)
    assert metrics["loss"].shape == ()


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
