"""scripts/benchmark.py end to end on a one-layer model: fields, finiteness, FLOPs, one
entry at a time (its JSON written before the next starts), --budget_s, and the PyTorch
peer (scripts/torch_peer.py) at tiny size on the CPU. No timing is asserted."""

from __future__ import annotations

import json
import math
import os

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


@pytest.fixture
def one_torch_thread():
    """The peer's steps are ~3 ms with one thread; with two on a loaded 2-core machine
    OpenMP's spinning makes them 100x slower."""
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.slow
def test_main_writes_finite_results_and_flops_from_models_flops(run_main, tmp_path,
                                                                one_torch_thread):
    result = run_main("--compare=attention=talking_heads", "--vs_torch")
    # The torch peer comes right after the first entry (the anchor of the vs-torch ratios).
    assert [e["name"] for e in result["entries"]] == [
        "ours", "torch_eager", "ours[attention=talking_heads]"]
    assert result["tokens_per_step"] == BATCH * SEQ_LEN
    assert result["skipped"] == [] and result["failed"] == []
    for entry in result["entries"]:
        for key in ("step_time_median_s", "tokens_per_s", "mfu", "achieved_flops_per_s",
                    "step_time_ratio", "paired_step_time_ratio", "build_s", "first_step_s",
                    "total_s", "throughput_vs_torch_eager"):
            assert math.isfinite(entry[key]) and entry[key] > 0, (entry["name"], key)
        assert len(entry["step_times_s"]) == 2
        assert entry["mfu"] == pytest.approx(entry["flops_per_step"]
                                             / entry["step_time_median_s"] / 1e11)
    ours, peer, talking = result["entries"]
    assert ours["step_time_ratio"] == 1.0 and ours["first_entry_step_times_s"] == []
    for entry in (ours, talking):  # AOT: lowering and compiling timed apart from the 1st step
        assert entry["lower_s"] > 0 and entry["compile_s"] > 0 and entry["xla_flops"] > 0
        assert entry["memory"]["compiled_bytes"] > 0
        assert entry["hlo_op_counts"]["dots"] > 0
    # Paired: each later entry's steps alternate with the first entry's.
    assert len(talking["first_entry_step_times_s"]) == len(peer["first_entry_step_times_s"]) == 2

    # The FLOPs are models/flops.py's for the same config, the MLM head over B*P targets;
    # the peer's head scores all B*T positions, and its FLOPs (its MFU) count that.
    tokens, targets = BATCH * SEQ_LEN, BATCH * PREDICTIONS
    assert ours["flops_per_step"] == flop_count(model_config(), SEQ_LEN).train_step(
        tokens, targets)
    assert talking["flops_per_step"] == flop_count(
        model_config("attention=talking_heads"), SEQ_LEN).train_step(tokens, targets)
    assert talking["flops_per_step"] > ours["flops_per_step"]  # talking heads' mixing counted
    assert peer["flops_per_step"] == flop_count(model_config(), SEQ_LEN).train_step(
        tokens, tokens)
    assert peer["flops_basis"].endswith("all positions") and peer["compile_s"] is None
    # Both sides start from BERT's init on the same targets: the loss is near ln(vocab).
    for entry in (ours, peer):
        assert abs(entry["loss_first_step"] - math.log(128)) < 0.3, entry["name"]
    assert result["vs_torch"]["torch_eager"]["ours"] == pytest.approx(
        peer["step_time_median_s"] / ours["step_time_median_s"])
    table = (tmp_path / "bench.md").read_text()
    assert "| ours[attention=talking_heads] | B*P=6 (sparse head) |" in table
    assert "| torch_eager | B*T=32 (all positions) |" in table


def test_each_entry_is_written_before_the_next_starts_and_the_budget_skips(tmp_path,
                                                                        monkeypatch):
    """Three entries of one program (the later two compile from the test session's
    cache): when the second starts, --json already holds the first; the second is then
    made to look expensive, and the third, estimated not to fit, is skipped and recorded."""
    out = tmp_path / "bench.json"
    seen = []
    run_entry = benchmark.run_entry

    def watched(run, planned):
        on_disk = json.loads(out.read_text())
        seen.append((planned.name, [e["name"] for e in on_disk["entries"]]))
        entry = run_entry(run, planned)
        if planned.name == "ours[vocab=128]":
            entry.info["total_s"] = 1e6  # the estimate for the next "ours" entry
        return entry

    monkeypatch.setattr(benchmark, "run_entry", watched)
    result = benchmark.benchmark(
        CONFIG, ["vocab=128", "dropout=0"], batch=BATCH, seq_len=SEQ_LEN,
        predictions=PREDICTIONS, num_steps=2, warmup=1, peak_flops=1e11, budget_s=3600,
        json_path=str(out), markdown_path=str(tmp_path / "bench.md"))
    assert seen == [("ours", []), ("ours[vocab=128]", ["ours"])]
    on_disk = json.loads(out.read_text())
    assert [e["name"] for e in on_disk["entries"]] == ["ours", "ours[vocab=128]"]
    assert on_disk["planned"] == ["ours", "ours[vocab=128]", "ours[dropout=0]"]
    [skipped] = on_disk["skipped"]
    assert skipped["name"] == "ours[dropout=0]" and "exceeds" in skipped["reason"]
    assert "--budget_s" in skipped["reason"]
    assert on_disk == result
    assert "skipped ours[dropout=0]: estimated" in (tmp_path / "bench.md").read_text()
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".")]  # no temporary left


def test_budget_estimates_come_from_finished_entries_of_the_same_kind():
    run = benchmark.Run(shapes=SHAPES, num_steps=2, warmup=1, device=jax.devices()[0],
                        paired=True, measure_peak=None, deadline=None)
    assert run.estimate_s("ours") is None  # nothing finished: nothing to go by
    run.entries.append(benchmark.Entry(
        name="ours", spec="", kind="ours", runner=None, flops=1.0, flops_basis="ours",
        mlm_predictions=1, num_params=1,
        info={"total_s": 50.0, "lower_s": 3.0, "compile_s": 37.0}))
    assert run.estimate_s("ours") == 50.0
    assert run.estimate_s(benchmark.TORCH_COMPILED) == 50.0  # none of its kind yet
    assert run.estimate_s(benchmark.TORCH_EAGER) == 10.0  # eager compiles nothing
    run.entries.append(benchmark.Entry(
        name="torch_eager", spec="", kind=benchmark.TORCH_EAGER, runner=None, flops=1.0,
        flops_basis="dense", mlm_predictions=1, num_params=1, info={"total_s": 12.0}))
    assert run.estimate_s(benchmark.TORCH_EAGER) == 12.0


def test_torch_peer_trains_on_our_positions_and_starts_near_ln_vocab(one_torch_thread):
    from scripts import torch_peer

    cfg = model_config()
    batch = benchmark.synthetic_batch(SHAPES, cfg.vocab_size, seed=0)
    opt = benchmark.optimizer_config(pretrain.get_config(ARGS))
    peer = torch_peer.TorchPeer(cfg, opt, batch, seed=0)
    labels = peer.inputs["labels"].numpy()
    for row in range(BATCH):  # targets exactly at our masked positions, -100 elsewhere
        positions = batch["masked_positions"][row]
        assert (labels[row, positions] == batch["masked_ids"][row]).all()
        assert (labels[row] != -100).sum() == PREDICTIONS
    assert peer.info()["attn_implementation"] == "sdpa" and not peer.info()["autocast_bf16"]
    config = peer.model.config
    assert (config.vocab_size, config.hidden_size, config.num_hidden_layers,
            config.num_attention_heads, config.intermediate_size, config.hidden_act) == (
        cfg.vocab_size, cfg.hidden_size, cfg.num_layers, cfg.num_heads, cfg.mlp_dim, "gelu")
    seconds = [peer.step() for _ in range(3)]
    assert all(s > 0 for s in seconds)
    assert abs(peer.loss() - math.log(cfg.vocab_size)) < 0.3  # BERT's init: near uniform
    peer.close()


def test_vs_torch_refuses_a_config_that_is_not_multi_head(run_main, capsys):
    for extra in ("attention=talking_heads", "key_size=8"):
        with pytest.raises(benchmark.BenchmarkError, match="multi_head"):
            benchmark.benchmark(f"{CONFIG},{extra}", vs_torch=True, batch=BATCH,
                                seq_len=SEQ_LEN, predictions=PREDICTIONS)
    with pytest.raises(SystemExit) as exit_info:
        run_main("--torch_compile", f"--config={CONFIG},attention=talking_heads")
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "attention=multi_head" in errors[0]
    assert "Traceback" not in err and "[benchmark] ours" not in err  # nothing was built


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
    runner = entry.runner
    _, metrics = jax.eval_shape(runner.step_fn, runner.state, runner.batch)
    assert metrics["loss_sum"].shape == ()


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


def test_compile_depth_compiles_each_depth_in_both_layouts_and_tables_them(tmp_path):
    """scripts/compile_depth.py: a row per (depth, layout), the scanned one holding the
    stacked layout, written as JSON after every row."""
    import json

    from scripts import compile_depth

    path = tmp_path / "depth.json"
    rows = compile_depth.measure("configs/pretrain.py:size=micro,vocab=64", [2], batch=2,
                                 seq_len=8, predictions=2, json_path=str(path))
    assert [(r["layers"], r["scan_layers"]) for r in rows] == [(2, True), (2, False)]
    assert all(r["compile_s"] > 0 and r["lower_s"] > 0 for r in rows)
    assert json.loads(path.read_text())["rows"][-1]["scan_layers"] is False
    table = compile_depth.markdown(rows).splitlines()
    assert table[2].startswith("| 2 | ") and table[2].endswith("x |")
