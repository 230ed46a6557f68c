"""SQuAD v1.1 fine-tuning end to end (eval_squad.py, finetuning/, tasks/squad_task.py) from a
tiny pretrained run on a tiny SQuAD-format directory whose rule is learnable (the answer
is the word after "is"): EM and F1, results and predictions files, skipping finished
runs, resume after preemption, the hub path, bad input from the command line."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from helpers import (
    REPO,
    run_script,
    tiny_model_config,
    tiny_run_config,
    write_run_corpus,
    write_squad_dir,
)

import finetuning
from configs import squad as squad_configs
from training.cli import Stopped
from training.pretrain import train_and_evaluate


@pytest.fixture(scope="module")
def pretrained_workdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("pretrain")
    corpus = write_run_corpus(str(root), squad_words=True)  # the tokenizer knows them
    workdir = str(root / "run")
    train_and_evaluate(tiny_run_config(corpus, str(root / "cache"), steps=10, **{
        "model.num_layers": 2, "model.hidden_size": 64, "model.mlp_dim": 128}), workdir)
    return workdir


def squad_config(**overrides):
    config = squad_configs.get_config()
    config.update(dict(num_seeds=2, learning_rates=(3e-3,), batch_size=16, num_epochs=5.0,
                       max_seq_length=64, doc_stride=16, max_query_length=12,
                       log_every_steps=20, dropout_rate=0.0, attention_dropout_rate=0.0,
                       eval_batch_size=32))
    config.update(overrides)
    return config


@pytest.mark.slow
def test_a_learnable_rule_reaches_high_exact_match_and_writes_results(pretrained_workdir,
                                                                      tmp_path, capsys):
    # 360 training questions, most of whose contexts span two or three 64-token windows
    squad_dir = write_squad_dir(tmp_path / "squad", np.random.default_rng(0), 120, 16, filler=2)
    workdir = str(tmp_path / "squad_run")
    config = squad_config(init_from=pretrained_workdir, squad_dir=squad_dir)
    results = finetuning.run(config, workdir)
    summary = results["tasks"]["SQuAD"]
    em, f1 = summary["scores"]["SQuAD/exact_match"], summary["scores"]["SQuAD/f1"]
    assert em["mean"] > 90.0 and f1["mean"] >= em["mean"]
    printed = capsys.readouterr().out.splitlines()
    for seed in (0, 1):  # progress lines, the last at the last step, then the run's score
        steps = [line for line in printed if line.startswith(f"SQuAD lr=0.003 seed={seed}: "
                                                             f"step ")]
        total = steps[-1].split()[4].split("/")[1]
        assert len(steps) >= 2 and steps[-1].split()[4] == f"{total}/{total}"
        assert "examples/s, ETA" in steps[-1]
        score = [line for line in printed if line.startswith(f"SQuAD [{seed + 1}/2] "
                                                             f"lr=0.003 seed={seed}: ")]
        assert len(score) == 1 and printed.index(score[0]) > printed.index(steps[-1])
    assert len(em["per_seed"]) == 2 and summary["main"]["SQuAD"] == f1["mean"]
    # predictions.json: the official format, an answer for every dev question
    dev = json.loads((tmp_path / "squad" / "dev-v1.1.json").read_text())
    ids = {qa["id"] for a in dev["data"] for p in a["paragraphs"] for qa in p["qas"]}
    predictions = json.loads((tmp_path / "squad_run" / "predictions.json").read_text())
    assert set(predictions) == ids and all(isinstance(v, str) for v in predictions.values())
    best = tmp_path / "squad_run" / "SQuAD" / f"lr0.003_seed{summary['best_run']}"
    assert json.loads((best / "predictions.json").read_text()) == predictions
    table = (tmp_path / "squad_run" / "results.md").read_text()
    assert "| SQuAD v1.1 EM | SQuAD v1.1 F1 |" in table

    # A rerun skips the finished runs: their results are read back unchanged.
    before = (best / "result.json").read_text()
    again = finetuning.run(config, workdir)
    assert (best / "result.json").read_text() == before
    assert again["tasks"]["SQuAD"]["scores"] == summary["scores"]


@pytest.mark.slow
def test_preempted_squad_fine_tuning_resumes_to_the_same_result(pretrained_workdir, tmp_path,
                                                                monkeypatch):
    from training import preemption

    squad_dir = write_squad_dir(tmp_path / "squad", np.random.default_rng(2), 8, 4)
    config = squad_config(init_from=pretrained_workdir, squad_dir=squad_dir, num_seeds=1,
                          num_epochs=2.0, log_every_steps=1, dropout_rate=0.1)
    straight = finetuning.run(config, str(tmp_path / "straight"))

    calls = {"n": 0}

    def stop_at_call_5(self):
        calls["n"] += 1
        self.signal_name = "SIGTERM"
        return calls["n"] == 5

    monkeypatch.setattr(preemption.PreemptionFlag, "requested", stop_at_call_5)
    workdir = tmp_path / "resumed"
    with pytest.raises(Stopped, match="SIGTERM: saved SQuAD"):
        finetuning.run(config, str(workdir))
    assert not (workdir / "results.json").exists()
    monkeypatch.undo()
    resumed = finetuning.run(config, str(workdir))
    assert resumed["tasks"] == straight["tasks"]


@pytest.mark.slow
def test_the_span_loss_does_not_depend_on_how_far_a_batch_is_padded():
    """Padding is masked out of the start/end softmax, so a length bucket that cuts a
    batch's padding gives the same loss (BERT's softmax runs over all positions)."""
    import jax
    import jax.numpy as jnp

    from models import BertForQuestionAnswering
    from training import steps

    model = BertForQuestionAnswering(tiny_model_config())
    rng = np.random.default_rng(0)
    ids = np.zeros((2, 16), np.int32)
    ids[:, :10] = rng.integers(5, 97, (2, 10))
    batch = {"input_ids": ids, "token_type_ids": np.zeros_like(ids),
             "attention_mask": (ids > 0).astype(np.int32),
             "start_positions": np.array([3, 0]), "end_positions": np.array([4, 0]),
             "weights": np.ones(2, np.float32)}
    params = model.init(jax.random.key(0), jnp.asarray(ids))["params"]
    objective = steps.SpanObjective()
    padded = objective.sums(model, params, batch, deterministic=True)
    cut = {k: v[:, :12] if v.ndim == 2 else v for k, v in batch.items()}
    assert float(objective.sums(model, params, cut, deterministic=True)["loss_sum"]) == \
        pytest.approx(float(padded["loss_sum"]), rel=1e-6)


def test_the_hub_split_is_read_through_datasets(monkeypatch):
    """No --config.squad_dir: rajpurkar/squad through datasets.load_dataset, the rows in
    the hub's layout (here a local in-memory dataset, as the hub returns it)."""
    import datasets

    import squad

    asked = []

    def fake_load_dataset(path, split, **kwargs):
        asked.append((path, split))
        return datasets.Dataset.from_dict({
            "id": ["h1"], "title": ["Rome"], "context": ["the river of rome is wide ."],
            "question": ["how is it ?"], "answers": [{"text": ["wide"], "answer_start": [21]}]})

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    assert squad.load_split("dev", None).examples[0].qid == "h1"
    assert squad.load_split("train", None).examples[0].answer == squad.Answer("wide", 21)
    assert asked == [("rajpurkar/squad", "validation"), ("rajpurkar/squad", "train")]


@pytest.mark.slow
def test_a_broken_squad_file_is_one_error_line_and_no_results(tmp_path):
    squad_dir = tmp_path / "squad"
    squad_dir.mkdir()
    (squad_dir / "train-v1.1.json").write_text('{"data": [')
    workdir = tmp_path / "out"
    done = run_script("../eval_squad.py", [
        "--config", str(REPO / "configs" / "squad.py"), "--workdir", str(workdir),
        f"--config.init_from_hf={tmp_path / 'no_model'}",
        f"--config.squad_dir={squad_dir}"])
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr[-2000:]
    assert f"{squad_dir / 'train-v1.1.json'}: not a JSON file" in errors[0]  # before the model
    assert not os.path.exists(workdir)  # a failed start leaves no workdir
