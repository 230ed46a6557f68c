"""Warm starts (training/warm_start.py, --config.init_from): BERT's second phase from a
first phase's workdir or from a Hugging Face export of it begins exactly where the source
ended, resumes like any run, extends positions only when asked, and refuses a source it
cannot use before writing anything."""

from __future__ import annotations

import math
import os

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import final_params, init_params, tiny_model_config, tiny_run_config

from analysis.runs import scalar_curve
from training import sharding, warm_start
from training.pretrain import train_and_evaluate

pytestmark = pytest.mark.slow  # pretrains

# Phase 1 has 32 positions, so a phase 2 at 64 tokens must extend them.
PHASE_1 = {"model.max_position_embeddings": 32}


@pytest.fixture(scope="module")
def phase_1(tmp_path_factory, run_corpus):
    workdir = str(tmp_path_factory.mktemp("phase1") / "run")
    corpus, cache = run_corpus
    final = train_and_evaluate(tiny_run_config(corpus, cache, steps=30, **PHASE_1), workdir)
    return workdir, final


def phase_2(run_corpus, init_from, steps=10, **extra):
    corpus, cache = run_corpus
    return tiny_run_config(corpus, cache, steps=steps, init_from=init_from,
                           **{"model.num_layers": 3, **extra})  # 3: not used, the source's is


def assert_nothing_written(workdir) -> None:
    """No record, tokenizer, config or checkpoint: only the lock file and the empty
    checkpoints/ that every run's start leaves."""
    left = set(os.listdir(workdir)) if workdir.exists() else set()
    assert left <= {"checkpoints", ".lock"}, left
    assert "checkpoints" not in left or not os.listdir(workdir / "checkpoints")


def first_eval_loss(workdir: str) -> float:
    return scalar_curve(workdir, "eval_loss")[0]


def test_phase_two_begins_where_phase_one_ended_and_resumes_like_any_run(phase_1, run_corpus,
                                                                         tmp_path):
    source, final = phase_1
    # Worth testing: phase 1 learnt something a fresh model does not know.
    assert final["eval_loss"] < math.log(200) - 0.5
    straight = str(tmp_path / "straight")
    train_and_evaluate(phase_2(run_corpus, source), straight)
    # Same corpus, tokenizer and length: the step-0 eval scores phase 1's model on phase
    # 1's eval batches.
    assert first_eval_loss(straight) == pytest.approx(final["eval_loss"], abs=1e-6)
    _, before = final_params(source)
    _, after = final_params(straight)
    assert after["bert"]["encoder"].keys() == before["bert"]["encoder"].keys()  # 1 layer
    assert not np.allclose(after["bert"]["embeddings"]["word"]["embedding"],
                           before["bert"]["embeddings"]["word"]["embedding"])

    # Stopped halfway, then rerun without the flag: the workdir's record suffices.
    resumed = str(tmp_path / "resumed")
    train_and_evaluate(phase_2(run_corpus, source, stop_after_steps=5), resumed)
    assert sorted(os.listdir(os.path.join(resumed, "checkpoints"))) == ["5"]
    train_and_evaluate(phase_2(run_corpus, None), resumed)
    _, again = final_params(resumed)
    for a, b in zip(jax.tree.leaves(again), jax.tree.leaves(after), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(warm_start.WarmStartError, match=f"started from init_from={source}, "
                                                        f"not {straight}"):
        train_and_evaluate(phase_2(run_corpus, straight, steps=12), resumed)


def test_a_hugging_face_export_warm_starts_to_the_same_loss(phase_1, run_corpus, tmp_path):
    from training.export import export

    source, final = phase_1
    exported = str(tmp_path / "export")
    export(source, exported)
    workdir = str(tmp_path / "from_hf")
    train_and_evaluate(phase_2(run_corpus, exported, steps=1), workdir)
    assert first_eval_loss(workdir) == pytest.approx(final["eval_loss"], abs=1e-5)


def test_longer_sequences_extend_positions_only_when_asked(phase_1, run_corpus, tmp_path,
                                                           capsys):
    source, _ = phase_1
    longer = {"data.max_seq_length": 64}
    refused = tmp_path / "refused"
    with pytest.raises(warm_start.WarmStartError,
                       match=f"data.max_seq_length=64 exceeds the max_position_embeddings=32 "
                             f"of init_from={source}; set data.extend_positions=true"):
        train_and_evaluate(phase_2(run_corpus, source, **longer), str(refused))
    assert_nothing_written(refused)

    workdir = str(tmp_path / "extended")
    train_and_evaluate(phase_2(run_corpus, source, steps=2, **longer,
                               **{"data.extend_positions": True}), workdir)
    assert "positions 32..63 are new" in capsys.readouterr().out
    _, params = final_params(workdir)
    assert params["bert"]["embeddings"]["position"]["embedding"].shape == (64, 32)


def test_extended_positions_keep_the_source_rows_and_init_the_new_ones_as_bert():
    config = tiny_model_config(max_position_embeddings=64)
    from models import BertForMaskedLM

    mesh = sharding.make_mesh({"data": -1})
    fresh = init_params(BertForMaskedLM(config), jnp.zeros((1, 4), jnp.int32), seed=1)
    old = init_params(BertForMaskedLM(config.replace(max_position_embeddings=32)),
                      jnp.zeros((1, 4), jnp.int32), seed=2)
    source = warm_start.Source("src", "src@1", config, old, "")
    shardings = jax.tree.map(lambda _: sharding.replicated(mesh), fresh)
    merged = warm_start.with_source(fresh, source, shardings)
    rows = np.asarray(merged["bert"]["embeddings"]["position"]["embedding"])
    np.testing.assert_array_equal(rows[:32], old["bert"]["embeddings"]["position"]["embedding"])
    np.testing.assert_array_equal(rows[32:],
                                  fresh["bert"]["embeddings"]["position"]["embedding"][32:])
    assert np.std(rows[32:]) == pytest.approx(config.initializer_range, rel=0.2)
    flat = flax.traverse_util.flatten_dict(merged, sep="/")
    for name, value in flax.traverse_util.flatten_dict(old, sep="/").items():
        if "position" not in name:
            np.testing.assert_array_equal(np.asarray(flat[name]), np.asarray(value))


def test_sources_that_cannot_start_the_run_are_refused_before_anything_is_written(
        phase_1, run_corpus, tmp_path):
    from input_pipeline import train_tokenizer

    source, _ = phase_1
    other = tmp_path / "other_tokenizer"
    train_tokenizer(["the cat sat on the mat"] * 20, 60, other)
    cases = {
        "tokenizer": (phase_2(run_corpus, source, **{"data.tokenizer": str(other)}),
                      f"data.tokenizer={other} is not the tokenizer of init_from={source}"),
        "not a model": (phase_2(run_corpus, str(other)),
                        f"init_from={other}: neither a pretraining workdir"),
        "no such path": (phase_2(run_corpus, str(tmp_path / "missing")),
                                   "missing: no such directory or file"),
    }
    for name, (config, message) in cases.items():
        workdir = tmp_path / name.replace(" ", "_")
        with pytest.raises(ValueError, match=message):
            train_and_evaluate(config, str(workdir))
        assert_nothing_written(workdir)


def test_a_record_left_without_a_checkpoint_does_not_make_a_later_run_warm(phase_1,
                                                                         run_corpus, tmp_path):
    """Killed after its start but before its first checkpoint, a warm start leaves no
    checkpoint: rerun without init_from, the workdir trains from random weights, and the
    old record must not make its resumes load another architecture."""
    import json

    source, _ = phase_1
    workdir = tmp_path / "run"
    workdir.mkdir()
    (workdir / warm_start.RECORD).write_text(json.dumps(
        {"init_from": source, "init_from_step": None, "source": f"{source}@30",
         "tokenizer": source, "model": {"num_layers": 3}}))
    corpus, cache = run_corpus
    train_and_evaluate(tiny_run_config(corpus, cache, steps=2), str(workdir))
    assert not (workdir / warm_start.RECORD).exists()
    train_and_evaluate(tiny_run_config(corpus, cache, steps=4, extend_schedule=True),
                       str(workdir))  # resumes
    _, params = final_params(str(workdir))
    assert list(params["bert"]["encoder"]) == ["layer_0"]


def test_a_damaged_warm_start_record_is_one_error_naming_it(tmp_path, run_corpus):
    from training import results

    (tmp_path / warm_start.RECORD).write_text('{"init_from": ')
    corpus, cache = run_corpus
    with pytest.raises(results.ResultsError, match=f"{tmp_path / warm_start.RECORD}: cannot "
                                                   f"be read"):
        warm_start.resume(tiny_run_config(corpus, cache, steps=2), str(tmp_path))


def test_warm_starts_convert_between_the_unrolled_and_scanned_layouts(phase_1, run_corpus,
                                                                      tmp_path):
    """model.scan_layers is the new run's choice: an unrolled source starts a scanned run
    where it ended, and that run starts an unrolled one where it ended; resuming a run in
    the other layout is refused in one line that says how to resume it."""
    from training.pretrain_loop import TrainingError

    source, final = phase_1  # unrolled
    scanned = str(tmp_path / "scanned")
    scanned_final = train_and_evaluate(
        phase_2(run_corpus, source, steps=2, **{"model.scan_layers": True}), scanned)
    assert first_eval_loss(scanned) == pytest.approx(final["eval_loss"], abs=1e-5)
    _, params = final_params(scanned)
    assert list(params["bert"]["encoder"]) == ["layers"]
    with pytest.raises(TrainingError, match=r"scanned \(stacked layers\) parameters .* resume "
                                            r"it with scan=true"):
        train_and_evaluate(phase_2(run_corpus, None, steps=4, extend_schedule=True), scanned)
    assert sorted(os.listdir(os.path.join(scanned, "checkpoints"))) == ["2"]

    unrolled = str(tmp_path / "unrolled_again")
    train_and_evaluate(phase_2(run_corpus, scanned, steps=1), unrolled)
    assert first_eval_loss(unrolled) == pytest.approx(scanned_final["eval_loss"], abs=1e-5)
    _, params = final_params(unrolled)
    assert list(params["bert"]["encoder"]) == ["layer_0"]
