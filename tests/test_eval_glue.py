"""GLUE fine-tuning end to end (eval_glue.py, finetuning/, tasks/glue_tasks.py) from a tiny
pretrained run: accuracy, results and submission files, skipping finished runs, resume after
preemption, refused setups, 8 devices against one."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest
from helpers import SST2_FILLER, SST2_POSITIVE, tiny_run_config, write_run_corpus, write_sst2

import finetuning
from configs import glue as glue_configs
from finetuning import batching, suite
from finetuning import pretrained as starts
from finetuning import runs as one_run
from models.hf_import import CheckpointError
from training.cli import Stopped
from training.pretrain import train_and_evaluate


@pytest.fixture(scope="module")
def pretrained_workdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("pretrain")
    corpus = write_run_corpus(str(root), sst2_words=True)  # the tokenizer knows the task
    workdir = str(root / "run")
    train_and_evaluate(tiny_run_config(corpus, str(root / "cache"), steps=10), workdir)
    return workdir


def glue_config(**overrides):
    config = glue_configs.get_config("task=sst2")
    config.update(dict(num_seeds=2, learning_rates=(2e-3,), batch_size=16, num_epochs=3.0,
                       max_seq_length=16, log_every_steps=10, dropout_rate=0.0,
                       attention_dropout_rate=0.0))
    config.update(overrides)
    return config


@pytest.mark.slow
def test_learnable_task_reaches_high_accuracy_and_writes_results(pretrained_workdir, tmp_path,
                                                                 capsys):
    glue_dir = tmp_path / "glue"
    write_sst2(str(glue_dir / "SST-2"), np.random.default_rng(0))
    workdir = str(tmp_path / "glue_run")
    config = glue_config(init_from=pretrained_workdir, glue_dir=str(glue_dir))
    results = finetuning.run(config, workdir)
    summary = results["tasks"]["SST-2"]
    assert summary["main"]["SST-2"] > 90.0
    train, dev = ([int(line.split("\t")[1]) for line in
                   (glue_dir / "SST-2" / f"{split}.tsv").read_text().splitlines()[1:]]
                  for split in ("train", "dev"))
    majority = np.bincount(train).argmax()  # dev accuracy of always predicting it
    assert summary["majority"]["SST-2"] == pytest.approx(100.0 * np.mean(np.equal(dev, majority)))
    assert summary["majority"]["SST-2"] < summary["main"]["SST-2"]
    printed = capsys.readouterr().out.splitlines()
    # Progress as train.py's (every log_every_steps=10 and the last step), then the score.
    for seed in (0, 1):
        run = f"SST-2 lr=0.002 seed={seed}: "
        steps = [line for line in printed if line.startswith(run + "step ")]
        assert [line.split()[4] for line in steps] == [f"{s}/75" for s in
                                                      (10, 20, 30, 40, 50, 60, 70, 75)]
        assert "first 10 steps with compilation" in steps[0]
        assert all(re.search(r"loss=\S+ \(\d+\.\d+ steps/s, \d+\.\d examples/s, "
                             r"ETA \d\d:\d\d:\d\d\)$", line) for line in steps[1:])
        score = [line for line in printed if line.startswith(f"SST-2 [{seed + 1}/2] "
                                                             f"lr=0.002 seed={seed}: dev:")]
        assert len(score) == 1 and printed.index(score[0]) > printed.index(steps[-1])
    assert printed[-1] == (f"wrote {workdir}/results.json and {workdir}/results.md; GLUE "
                           f"submission files in {workdir}/submission/; export a fine-tuned "
                           f"model: python scripts/export_hf.py --workdir {workdir} --task sst2 "
                           f"--out {workdir}_SST-2_hf")
    assert len(summary["scores"]["SST-2/accuracy"]["per_seed"]) == 2
    table = (tmp_path / "glue_run" / "results.md").read_text()
    assert "| SST-2 |" in table.splitlines()[2] or "SST-2" in table
    submission = (tmp_path / "glue_run" / "submission" / "SST-2.tsv").read_text().splitlines()
    assert submission[0] == "index\tprediction" and len(submission) == 21

    # A rerun skips the finished (lr, seed) runs: their results are read back unchanged.
    run_dir = tmp_path / "glue_run" / "SST-2" / "lr0.002_seed0"
    before = (run_dir / "result.json").read_text()
    again = finetuning.run(config, workdir)
    assert (run_dir / "result.json").read_text() == before
    assert again["tasks"]["SST-2"]["main"] == summary["main"]
    assert json.loads(before)["steps"] == 75  # 400 / 16 per epoch, 3 epochs

    # save_model=best: the best run keeps its fine-tuned model, the other one's is gone.
    best = tmp_path / "glue_run" / "SST-2" / f"lr0.002_seed{summary['best_run']}"
    assert [p.parent for p in (tmp_path / "glue_run").glob("SST-2/*/model")] == [best]
    assert_export_scores_the_run_in_transformers(workdir, best, glue_dir / "SST-2" / "dev.tsv",
                                                 tmp_path / "export")


def assert_export_scores_the_run_in_transformers(workdir, run_dir, dev_tsv, out):
    """The GLUE workdir's export is a BertForSequenceClassification with SST-2's label names
    whose dev accuracy, computed by transformers alone, is the run's own."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from training.export import export

    export(str(workdir), str(out), task="sst2")
    model = transformers.AutoModelForSequenceClassification.from_pretrained(out).eval()
    assert model.config.id2label == {0: "negative", 1: "positive"}
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    rows = [line.split("\t") for line in dev_tsv.read_text().splitlines()[1:]]
    inputs = tokenizer([text for text, _ in rows], padding=True, return_tensors="pt")
    with torch.no_grad():
        predicted = model(**inputs).logits.argmax(-1).numpy()
    accuracy = 100.0 * np.mean(predicted == np.asarray([int(label) for _, label in rows]))
    result = json.loads((run_dir / "result.json").read_text())
    assert accuracy == pytest.approx(result["dev"]["dev"]["accuracy"], abs=1e-9)


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    config = glue_config(init_from=str(tmp_path / "nothing"), glue_dir=str(tmp_path))
    with pytest.raises(CheckpointError, match="no checkpoints/"):
        finetuning.run(config, str(tmp_path / "out"))


@pytest.mark.slow
def test_workdir_of_a_different_checkpoint_is_refused(pretrained_workdir, tmp_path):
    glue_dir = tmp_path / "glue"
    write_sst2(str(glue_dir / "SST-2"), np.random.default_rng(1))
    workdir = tmp_path / "glue_run"
    workdir.mkdir()
    (workdir / "glue_identity.json").write_text(json.dumps({"init": "elsewhere@5"}))
    config = glue_config(init_from=pretrained_workdir, glue_dir=str(glue_dir))
    with pytest.raises(ValueError, match="different setup"):
        finetuning.run(config, str(workdir))


@pytest.mark.slow
@pytest.mark.parametrize("grouped", [False, True])
def test_preempted_fine_tuning_resumes_to_the_same_result(pretrained_workdir, tmp_path,
                                                          monkeypatch, grouped):
    """In length buckets (16/24/32 here), with batches grouped by length or not."""
    from training import preemption

    glue_dir = tmp_path / "glue"
    write_sst2(str(glue_dir / "SST-2"), np.random.default_rng(2))
    config = glue_config(init_from=pretrained_workdir, glue_dir=str(glue_dir), num_seeds=1,
                         max_train_examples=96, log_every_steps=1, dropout_rate=0.1,
                         max_seq_length=32, group_by_length=grouped)
    pretrained = starts.load_pretrained(config)
    task = finetuning.get("sst2")
    data = task.load(config, pretrained.tokenizer)
    straight = one_run.finetune_run(task, pretrained, data, 2e-3, 0, config,
                                     str(tmp_path / "straight"))

    calls = {"n": 0}

    def stop_at_step_7(self):
        calls["n"] += 1
        self.signal_name = "SIGTERM"
        return calls["n"] == 7

    monkeypatch.setattr(preemption.PreemptionFlag, "requested", stop_at_step_7)
    run_dir = tmp_path / "resumed"
    with pytest.raises(Stopped, match="at step 7"):
        one_run.finetune_run(task, pretrained, data, 2e-3, 0, config, str(run_dir))
    assert not (run_dir / "result.json").exists()
    monkeypatch.undo()
    resumed = one_run.finetune_run(task, pretrained, data, 2e-3, 0, config, str(run_dir))
    assert resumed["steps"] == straight["steps"] == 18  # 96 / 16 per epoch, 3 epochs
    assert resumed["dev"] == straight["dev"]
    assert resumed["final_train_loss"] == pytest.approx(straight["final_train_loss"], abs=1e-6)
    assert not (run_dir / "checkpoints").exists()


@pytest.mark.slow
def test_a_grids_seeds_at_one_rate_share_one_compiled_train_step(pretrained_workdir, tmp_path):
    """The dropout seed travels with the batch, so two runs that differ only in their seed
    lower to the same program (the compilation cache then serves the second); the rate is
    still part of the program."""
    from training import steps
    from training.preemption import PreemptionFlag

    glue_dir = tmp_path / "glue"
    write_sst2(str(glue_dir / "SST-2"), np.random.default_rng(2))
    config = glue_config(init_from=pretrained_workdir, glue_dir=str(glue_dir),
                         max_train_examples=32, dropout_rate=0.1)
    pretrained = starts.load_pretrained(config)
    task = finetuning.get("sst2")
    data = task.load(config, pretrained.tokenizer)
    mesh, rules = one_run.make_mesh(config)

    def lowered(lr: float, seed: int) -> str:
        run = one_run.compile_run(task, pretrained, data.num_train, lr, seed, config,
                                  str(tmp_path / f"run{lr}_{seed}"), mesh, rules,
                                  PreemptionFlag())
        state = one_run.restore_or_init_run(run)
        order = batching.epoch_order(data["train"]["attention_mask"].sum(axis=1), seed, 0,
                                     config.batch_size)
        batch = next(batching.batches(data["train"], order, config.batch_size, run.buckets,
                                      task.label_keys))
        with mesh:
            return run.train_step.lower(
                state.train_state, {**batching.on_mesh(batch, mesh, rules),
                                    steps.DROPOUT_SEED: run.dropout_seed}).as_text()

    assert lowered(2e-3, 0) == lowered(2e-3, 1)
    assert lowered(2e-3, 0) != lowered(1e-3, 0)


def test_a_signal_while_evaluating_stops_resumably_and_the_rerun_only_evaluates(
        pretrained_workdir, tmp_path, monkeypatch):
    """SIGTERM after training, while the dev set is predicted: the state is saved, the
    run stops (eval_glue.py exits 75), and the rerun evaluates without training again."""
    import signal

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


    glue_dir = tmp_path / "glue"
    write_sst2(str(glue_dir / "SST-2"), np.random.default_rng(2))
    config = glue_config(init_from=pretrained_workdir, glue_dir=str(glue_dir), num_seeds=1,
                         max_train_examples=96, log_every_steps=1, dropout_rate=0.1)
    pretrained = starts.load_pretrained(config)
    task = finetuning.get("sst2")
    data = task.load(config, pretrained.tokenizer)
    straight = one_run.finetune_run(task, pretrained, data, 2e-3, 0, config,
                                     str(tmp_path / "straight"))

    def default_handler(signum, frame):  # what SIGTERM would do with no handler in force
        raise AssertionError("SIGTERM reached the default handler while evaluating")

    real_predict = one_run.predict_split

    def predict_and_signal(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        return real_predict(*args, **kwargs)

    run_dir = tmp_path / "stopped"
    previous = signal.signal(signal.SIGTERM, default_handler)
    try:
        monkeypatch.setattr(one_run, "predict_split", predict_and_signal)
        with pytest.raises(Stopped, match=r"SIGTERM: saved SST-2 .* at step 18 \(predicting"):
            one_run.finetune_run(task, pretrained, data, 2e-3, 0, config, str(run_dir))
    finally:
        signal.signal(signal.SIGTERM, previous)
    monkeypatch.undo()
    assert not (run_dir / "result.json").exists()
    resumed = one_run.finetune_run(task, pretrained, data, 2e-3, 0, config, str(run_dir))
    assert resumed == straight  # the same dev scores, steps and last train loss

    events = EventAccumulator(str(run_dir))
    events.Reload()
    assert len(events.Scalars("train_loss")) == 18  # trained once: the rerun only evaluated


def test_length_buckets_cut_only_padding():
    assert batching.length_buckets("auto", 128) == (16, 24, 32, 48, 64, 96, 128)
    assert batching.length_buckets("none", 128) == (128,)
    assert batching.length_buckets("32/64", 128) == (32, 64, 128)
    with pytest.raises(ValueError, match="length_buckets='32/256': 256 is not in 1..max"):
        batching.length_buckets("32/256", 128)
    mask = np.zeros((5, 128), np.int32)
    for row, length in enumerate((3, 20, 9, 40, 2)):
        mask[row, :length] = 1
    arrays = {"input_ids": mask * 7, "token_type_ids": mask * 0, "attention_mask": mask,
              "labels": np.arange(5)}
    cut = list(batching.batches(arrays, np.arange(5), 2, (16, 24, 48, 128)))
    assert [b["input_ids"].shape[1] for b in cut] == [24, 48, 16]
    assert [int(b["weights"].sum()) for b in cut] == [2, 2, 1]
    np.testing.assert_array_equal(cut[1]["attention_mask"].sum(1), [9, 40])  # nothing real cut


def test_grouped_epochs_see_every_example_once_in_length_homogeneous_batches():
    lengths = np.random.default_rng(0).integers(3, 60, 1000)
    plain = batching.epoch_order(lengths, seed=3, epoch=1, batch_size=32)
    np.testing.assert_array_equal(plain, np.random.default_rng([3, 1]).permutation(1000))
    grouped = batching.epoch_order(lengths, 3, 1, 32, group_by_length=True)
    assert sorted(grouped) == list(range(1000))  # each example once
    np.testing.assert_array_equal(grouped, batching.epoch_order(lengths, 3, 1, 32, True))
    spread = [np.ptp(lengths[b]) for b in grouped[:31 * 32].reshape(31, 32)]
    assert max(spread) <= 4 < np.mean([np.ptp(lengths[b]) for b in plain[:992].reshape(31, 32)])
    assert not np.array_equal(grouped, batching.epoch_order(lengths, 3, 2, 32, True))


@pytest.mark.slow
def test_length_buckets_change_the_time_not_the_predictions(pretrained_workdir, tmp_path):
    """Fine-tuning with batches cut to length buckets gives the dev predictions of the
    padded path to 1e-4 (dropout off: it draws by shape)."""

    glue_dir = tmp_path / "glue"
    write_sst2(str(glue_dir / "SST-2"), np.random.default_rng(6))
    task = finetuning.get("sst2")
    runs = {}
    for buckets in ("none", "auto"):
        config = glue_config(init_from=pretrained_workdir, glue_dir=str(glue_dir), num_seeds=1,
                             max_train_examples=96, max_seq_length=64, length_buckets=buckets)
        pretrained = starts.load_pretrained(config)
        data = task.load(config, pretrained.tokenizer)
        run_dir = tmp_path / buckets
        runs[buckets] = one_run.finetune_run(task, pretrained, data, 2e-3, 0, config,
                                              str(run_dir))
        runs[buckets]["dev_scores"] = np.load(run_dir / "dev_predictions.npy")
    assert data["train"]["attention_mask"].sum(1).max() <= 16  # every batch cut to 16 of 64
    np.testing.assert_allclose(runs["auto"]["dev_scores"], runs["none"]["dev_scores"],
                               atol=1e-4)
    assert runs["auto"]["dev"] == runs["none"]["dev"]
    assert runs["auto"]["final_train_loss"] == pytest.approx(runs["none"]["final_train_loss"],
                                                             abs=1e-4)


@pytest.mark.slow
def test_sequence_longer_than_the_positions_is_refused_up_front(pretrained_workdir, tmp_path):
    glue_dir = tmp_path / "glue"
    write_sst2(str(glue_dir / "SST-2"), np.random.default_rng(3))
    config = glue_config(init_from=pretrained_workdir, glue_dir=str(glue_dir),
                         max_seq_length=4096)
    with pytest.raises(ValueError, match="max_seq_length=4096 exceeds the model's "
                                         "max_position_embeddings=512"):
        finetuning.run(config, str(tmp_path / "out"))
    assert not (tmp_path / "out" / "SST-2").exists()


@pytest.mark.slow
def test_a_damaged_init_checkpoint_is_one_error_naming_it_and_left_in_place(
        pretrained_workdir, tmp_path):
    import shutil

    copy = tmp_path / "pretrained"
    shutil.copytree(pretrained_workdir, copy, ignore=shutil.ignore_patterns(".lock"))
    (step,) = [d for d in os.listdir(copy / "checkpoints") if d.isdigit()]
    metadata = copy / "checkpoints" / step / "config" / "metadata"
    metadata.write_text("{not json")
    config = glue_config(init_from=str(copy), glue_dir=str(tmp_path))
    with pytest.raises(CheckpointError, match=f"{metadata}"):
        finetuning.run(config, str(tmp_path / "out"))
    assert metadata.exists()  # a reader never moves another run's files


@pytest.mark.slow
def test_duplicate_test_ids_are_found_before_fine_tuning(pretrained_workdir, tmp_path):
    import glue

    glue_dir = tmp_path / "glue"
    write_sst2(str(glue_dir / "SST-2"), np.random.default_rng(4))
    test_file = glue_dir / "SST-2" / "test.tsv"
    lines = test_file.read_text().splitlines()
    lines[5] = "2\t" + lines[5].split("\t", 1)[1]  # id 2 twice
    test_file.write_text("\n".join(lines) + "\n")
    config = glue_config(init_from=pretrained_workdir, glue_dir=str(glue_dir))
    with pytest.raises(glue.GlueDataError, match=f"{test_file}: id '2' .*twice"):
        finetuning.run(config, str(tmp_path / "out"))
    assert not (tmp_path / "out" / "SST-2").exists()


def test_without_test_predictions_the_test_split_is_neither_read_nor_scored(
        pretrained_workdir, tmp_path):
    """write_test_predictions=false (studies): no submission, so the test split (here with
    a duplicate id that would be refused) is not read, and no run scores it."""
    glue_dir = tmp_path / "glue"
    write_sst2(str(glue_dir / "SST-2"), np.random.default_rng(6))
    test_file = glue_dir / "SST-2" / "test.tsv"
    lines = test_file.read_text().splitlines()
    test_file.write_text("\n".join([*lines, lines[-1]]) + "\n")  # the last id twice
    config = glue_config(init_from=pretrained_workdir, glue_dir=str(glue_dir), num_seeds=1,
                         max_train_examples=32, num_epochs=1.0, write_test_predictions=False)
    results = finetuning.run(config, str(tmp_path / "out"))
    assert "SST-2" in results["tasks"] and not results.get("no_submission")
    run_dir = tmp_path / "out" / "SST-2" / "lr0.002_seed0"
    assert sorted(p.name for p in run_dir.glob("*_predictions.npy")) == ["dev_predictions.npy"]
    assert not (tmp_path / "out" / "submission").exists()


@pytest.mark.slow
def test_a_missing_test_file_is_reported_not_silently_skipped(pretrained_workdir, tmp_path,
                                                             capsys):
    glue_dir = tmp_path / "glue"
    write_sst2(str(glue_dir / "SST-2"), np.random.default_rng(5))
    os.remove(glue_dir / "SST-2" / "test.tsv")
    config = glue_config(init_from=pretrained_workdir, glue_dir=str(glue_dir), num_seeds=1,
                         max_train_examples=32, num_epochs=1.0)
    results = finetuning.run(config, str(tmp_path / "out"))
    missing = str(glue_dir / "SST-2" / "test.tsv")
    assert missing in capsys.readouterr().out
    assert results["no_submission"] == {"SST-2": f"{missing} is missing"}
    # A later invocation on other tasks (here: absent, so skipped) keeps what the
    # earlier one said of SST-2, and says why it skipped the others.
    config.task = "RTE/WNLI"
    later = finetuning.run(config, str(tmp_path / "out"))
    assert later["no_submission"] == {"SST-2": f"{missing} is missing"}
    assert sorted(later["skipped"]) == ["RTE", "WNLI"] and "SST-2" in later["tasks"]


def write_stsb(directory: str, rng: np.random.Generator) -> None:
    """STS-B layout: the score counts the positive words in the pair (a regression)."""
    os.makedirs(directory, exist_ok=True)
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
    for split, size in (("train", 320), ("dev", 64), ("test", 24)):
        lines = [header + ("" if split == "test" else "\tscore")]
        for i in range(size):
            words = [list(rng.choice(SST2_FILLER, size=4)) for _ in range(2)]
            positives = int(rng.integers(0, 3))
            for _ in range(positives):
                words[int(rng.integers(2))].append(str(rng.choice(SST2_POSITIVE)))
            row = f"{i}\tmain\tx\t2012\t{i:04d}\tnone\tnone\t{' '.join(words[0])}\t" \
                  f"{' '.join(words[1])}"
            lines.append(row if split == "test" else f"{row}\t{2.5 * positives:.3f}")
        with open(os.path.join(directory, f"{split}.tsv"), "w") as f:
            f.write("\n".join(lines) + "\n")


@pytest.mark.slow
def test_eight_devices_give_the_one_device_result(pretrained_workdir, tmp_path):
    """Data parallel over 8 (fake CPU) devices: the same 20 steps, the same scores."""
    import jax

    glue_dir = tmp_path / "glue"
    write_stsb(str(glue_dir / "STS-B"), np.random.default_rng(6))
    config = glue_config(init_from=pretrained_workdir, glue_dir=str(glue_dir), task="stsb",
                         num_seeds=1, num_epochs=1.0, dropout_rate=0.1, learning_rates=(1e-2,))
    assert 320 // config.batch_size == 20
    one = finetuning.run(config, str(tmp_path / "one"), devices=jax.devices()[:1])
    eight = finetuning.run(config, str(tmp_path / "eight"), devices=jax.devices())
    run = "STS-B/lr0.01_seed0/test_predictions.npy"
    a, b = np.load(tmp_path / "one" / run), np.load(tmp_path / "eight" / run)
    assert a.mean() > 1.0  # 20 steps moved the head from ~0 towards the mean score 2.5
    np.testing.assert_allclose(a, b, atol=1e-4)
    losses = [json.loads((tmp_path / d / "STS-B/lr0.01_seed0/result.json").read_text())
              ["final_train_loss"] for d in ("one", "eight")]
    assert losses[0] == pytest.approx(losses[1], rel=1e-4)
    # (The correlations of such near-constant predictions are too sensitive to compare;
    # the SST-2 test above runs its lr x seed grid on all 8 devices.)
    assert set(one["tasks"]) == set(eight["tasks"]) == {"STS-B"}


# -- the classifier question's fine-tuning variants (docs/RESULTS.md, part 3) ---------------
@pytest.mark.slow
def test_talking_heads_inserted_at_identity_compute_the_checkpoints_function(
        pretrained_workdir):
    """P_l = P_w = I make talking heads multi-head exactly, so the converted model's
    encoder output equals the checkpoint's."""
    import jax
    import jax.numpy as jnp

    from models import BertModel

    plain = starts.load_pretrained(glue_config(init_from=pretrained_workdir))
    inserted = starts.load_pretrained(glue_config(init_from=pretrained_workdir,
                                                    insert_talking_heads=True))
    assert plain.model_config.attention == "multi_head"
    assert inserted.model_config.attention == "talking_heads"
    assert inserted.source.startswith("talking heads inserted at identity: ")
    ids = jax.random.randint(jax.random.key(0), (3, 12), 5, plain.model_config.vocab_size)
    mask = jnp.ones_like(ids).at[0, 8:].set(0)
    outputs = [BertModel(p.model_config).apply({"params": p.bert_params}, ids, None, mask)
               for p in (plain, inserted)]
    np.testing.assert_allclose(np.asarray(outputs[1][0]), np.asarray(outputs[0][0]),
                               atol=1e-5)
    th = inserted.bert_params["encoder"]["layer_0"]["attention"]
    np.testing.assert_array_equal(th["logits_mixing"], np.eye(plain.model_config.num_heads))

    # (Fine-tuning such a model end to end: test_sweep.py's local sweep, row mh_th.)


def test_talking_heads_inserted_into_a_pre_ln_encoder_keep_its_function():
    """A pre-LN encoder holds a final norm beside its layers; only layers get mixing."""
    import jax
    import jax.numpy as jnp

    from models import BertModel, ModelConfig

    config = ModelConfig(num_layers=2, hidden_size=32, num_heads=4, mlp_dim=64,
                         vocab_size=50, max_position_embeddings=16, norm_placement="pre",
                         dropout_rate=0.0, attention_dropout_rate=0.0)
    ids = jax.random.randint(jax.random.key(0), (2, 10), 5, 50)
    bert = BertModel(config).init(jax.random.key(1), ids)["params"]
    assert "final_norm" in bert["encoder"]
    converted, params = starts.with_inserted("talking_heads", config, bert, "ckpt")
    outputs = [BertModel(c).apply({"params": p}, ids, None, jnp.ones_like(ids))[0]
               for c, p in ((config, bert), (converted, params))]
    np.testing.assert_allclose(np.asarray(outputs[1]), np.asarray(outputs[0]), atol=1e-5)


def test_inserted_talking_heads_take_no_leftover_settings_from_the_checkpoint():
    """A multi-head checkpoint's config may hold talking-heads settings it never used
    (dynamic projections, groups): the inserted layers are plain identity mixing, so the
    model is still the checkpoint's function, not one with fresh dynamic maps."""
    from attention.talking_heads import TalkingHeadsConfig
    from models import ModelConfig

    leftover = TalkingHeadsConfig(dynamic_projections="x2l+m2w", groups=2, impl="chunked")
    config = ModelConfig(num_layers=1, hidden_size=32, num_heads=4, mlp_dim=64,
                         talking_heads=leftover)
    converted, _ = starts.with_inserted("talking_heads",
        config, {"encoder": {"layer_0": {"attention": {}}}}, "ckpt")
    assert converted.talking_heads == TalkingHeadsConfig(init="identity", impl="chunked")


def test_talking_heads_inserted_with_fan_in_mixing_draw_it_per_fine_tuning_seed(tmp_path):
    """insert_th_init=fan_in is what a user who swaps the class into a trained model
    gets: the checkpoint's weights with fresh mixing, N(0, 1/h) per entry, drawn from
    the fine-tuning seed (another seed, another draw); identity keeps P = I."""
    import flax.linen as nn
    import jax

    from models import BertModel, ModelConfig

    config = ModelConfig(num_layers=2, hidden_size=32, num_heads=16, mlp_dim=64,
                         vocab_size=50, max_position_embeddings=16)
    ids = jax.random.randint(jax.random.key(0), (2, 10), 5, 50)
    bert = nn.unbox(BertModel(config).init(jax.random.key(1), ids)["params"])
    converted, params = starts.with_inserted("talking_heads", config, bert, "ckpt", "fan_in")
    assert converted.attention == "talking_heads"
    assert converted.talking_heads.init == "fan_in"
    assert "logits_mixing" not in params["encoder"]["layer_0"]["attention"]
    # A run's start: its fresh params (drawn from the fine-tuning seed) with the
    # checkpoint put in, as restore_or_init_run does.
    draws = []
    for seed in (0, 1):
        fresh = {"bert": nn.unbox(BertModel(converted).init(jax.random.key(seed), ids)["params"])}
        on_device = jax.tree.map(lambda _: jax.sharding.SingleDeviceSharding(jax.devices()[0]),
                                 fresh)
        start = one_run.with_pretrained_encoder(fresh, params, on_device)["bert"]
        draws.append(np.asarray(start["encoder"]["layer_0"]["attention"]["logits_mixing"]))
        np.testing.assert_array_equal(start["encoder"]["layer_1"]["attention"]["query"]["kernel"],
                                      bert["encoder"]["layer_1"]["attention"]["query"]["kernel"])
    assert not np.allclose(draws[0], draws[1])
    assert np.std(np.concatenate(draws)) == pytest.approx(1 / 4, rel=0.15)  # 1/sqrt(16)
    _, identity = starts.with_inserted("talking_heads", config, bert, "ckpt", "identity")
    np.testing.assert_array_equal(identity["encoder"]["layer_0"]["attention"]["weights_mixing"],
                                  np.eye(16))
    with pytest.raises(ValueError, match="insert_th_init='orthogonal' is unknown"):
        starts.with_inserted("talking_heads", config, bert, "ckpt", "orthogonal")


@pytest.mark.slow
def test_a_fan_in_insertion_fine_tunes_and_names_its_init(pretrained_workdir, tmp_path):
    """The end to end route: eval_glue's config arg, its source line and workdir
    identity (a changed insertion init is another setup)."""
    config = glue_config(init_from=pretrained_workdir, insert_talking_heads=True,
                         insert_th_init="fan_in")
    pretrained = starts.load_pretrained(config)
    assert pretrained.source.startswith("talking heads inserted with fan_in mixing: ")
    assert pretrained.model_config.talking_heads.init == "fan_in"
    workdir = str(tmp_path / "glue")
    suite.check_workdir_identity(workdir, pretrained, config)
    identity = starts.load_pretrained(glue_config(init_from=pretrained_workdir,
                                                    insert_talking_heads=True))
    with pytest.raises(ValueError, match="different setup .*init"):
        suite.check_workdir_identity(workdir, identity, config)


def test_insert_talking_heads_refuses_a_talking_heads_checkpoint():
    from models import ModelConfig

    config = ModelConfig(attention="talking_heads", num_layers=1, hidden_size=32,
                         num_heads=2, mlp_dim=64)
    with pytest.raises(ValueError, match="needs a multi_head checkpoint; ckpt is talking"):
        starts.with_inserted("talking_heads", config, {}, "ckpt")


@pytest.mark.slow
def test_pretrained_fine_tuning_starts_from_exactly_the_checkpoints_encoder(
        pretrained_workdir, tmp_path):
    """The start of docs/RESULTS.md's "why pretraining hurts" question: at lr 1e-12 the
    (regression) predictions are those of the checkpoint's encoder, every leaf as the
    checkpoint holds it, with the classifier (and a pooler the checkpoint lacks) drawn
    from the run's seed; so a pretrained start that scores below scratch is not a
    loading defect."""
    import flax
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    from helpers import final_params

    from models import BertForSequenceClassification

    glue_dir = tmp_path / "glue"
    write_stsb(str(glue_dir / "STS-B"), np.random.default_rng(8))
    config = glue_config(init_from=pretrained_workdir, glue_dir=str(glue_dir), num_seeds=1,
                         task="stsb", max_train_examples=32, num_epochs=1.0,
                         learning_rates=(1e-12,))
    pretrained = starts.load_pretrained(config)
    task = finetuning.get("stsb")
    data = task.load(config, pretrained.tokenizer)
    one_run.finetune_run(task, pretrained, data, 1e-12, 2, config, str(tmp_path / "run"))
    got = np.load(tmp_path / "run" / "test_predictions.npy")

    _, checkpoint = final_params(pretrained_workdir)
    model = BertForSequenceClassification(pretrained.model_config, task.num_labels)
    ids = jnp.zeros((1, config.max_seq_length), jnp.int32)
    fresh = flax.traverse_util.flatten_dict(
        nn.unbox(model.init(jax.random.key(2), ids, ids, ids)["params"]))
    saved = flax.traverse_util.flatten_dict({"bert": nn.unbox(checkpoint["bert"])})
    assert set(saved) <= set(fresh) and len(saved) > 10
    params = flax.traverse_util.unflatten_dict({**fresh, **saved})
    test = data["test"]
    want = np.asarray(model.apply({"params": params}, test["input_ids"],
                                  test["token_type_ids"], test["attention_mask"]))[:, 0]
    np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.slow
def test_from_scratch_fine_tuning_starts_from_a_fresh_encoder(pretrained_workdir, tmp_path):
    """init=scratch keeps the architecture and tokenizer and draws the encoder per seed:
    at lr 1e-12 its (regression) predictions are those of the freshly initialised
    classifier, drawn from the run's seed and the source's pretraining seed, not of the
    pretrained encoder's. Another pretraining seed draws another encoder: a sweep's
    scratch row at pretraining seeds 0, 1, 2 is three samples, not one repeated."""
    import dataclasses

    import jax
    import jax.numpy as jnp

    from models import BertForSequenceClassification

    glue_dir = tmp_path / "glue"
    write_stsb(str(glue_dir / "STS-B"), np.random.default_rng(8))
    config = glue_config(init_from=pretrained_workdir, glue_dir=str(glue_dir), num_seeds=1,
                         task="stsb",
                         max_train_examples=32, num_epochs=1.0, learning_rates=(1e-12,),
                         init="scratch")
    scratch = starts.load_pretrained(config)
    assert scratch.bert_params is None and scratch.source.startswith("scratch: ")
    with open(os.path.join(pretrained_workdir, "config.json")) as f:
        assert scratch.init_stream == json.load(f)["seed"]
    task = finetuning.get("stsb")
    data = task.load(config, scratch.tokenizer)
    # A stream other than this run's own seed: the draw must follow init_stream.
    other = dataclasses.replace(scratch, init_stream=scratch.init_stream + 7)
    one_run.finetune_run(task, other, data, 1e-12, 3, config, str(tmp_path / "scratch"))
    got = np.load(tmp_path / "scratch" / "test_predictions.npy")
    model = BertForSequenceClassification(scratch.model_config, task.num_labels)
    ids = jnp.zeros((1, config.max_seq_length), jnp.int32)
    test = data["test"]

    def fresh_predictions(stream: int) -> np.ndarray:
        key = jax.random.fold_in(jax.random.key(3), stream)  # fine-tuning seed 3
        params = model.init(key, ids, ids, ids)["params"]
        scores = model.apply({"params": params}, test["input_ids"], test["token_type_ids"],
                             test["attention_mask"])
        return np.asarray(scores)[:, 0]  # STS-B: a score

    np.testing.assert_allclose(got, fresh_predictions(other.init_stream), atol=1e-5)
    assert np.abs(got - fresh_predictions(scratch.init_stream)).max() > 1e-3

    config.init = "random"
    with pytest.raises(ValueError, match="init='random' is unknown"):
        starts.load_pretrained(config)


@pytest.mark.slow
def test_fine_tuning_in_the_scanned_layout_computes_the_unrolled_result(pretrained_workdir,
                                                                        tmp_path):
    """scan_layers=true restacks the pretrained (unrolled) encoder: without dropout the
    fine-tuning computes the same losses and predictions, and the workdir's identity
    keeps the layout (a rerun in the other one is refused)."""
    glue_dir = tmp_path / "glue"
    write_stsb(str(glue_dir / "STS-B"), np.random.default_rng(7))
    config = glue_config(init_from=pretrained_workdir, glue_dir=str(glue_dir), task="stsb",
                         num_seeds=1, num_epochs=1.0, learning_rates=(1e-2,))
    finetuning.run(config, str(tmp_path / "unrolled"))
    scanned = glue_config(**{**config.to_dict(), "scan_layers": True})
    finetuning.run(scanned, str(tmp_path / "scanned"))
    run = "STS-B/lr0.01_seed0"
    a, b = (np.load(tmp_path / d / run / "test_predictions.npy") for d in ("unrolled", "scanned"))
    np.testing.assert_allclose(a, b, atol=1e-5)
    losses = [json.loads((tmp_path / d / run / "result.json").read_text())["final_train_loss"]
              for d in ("unrolled", "scanned")]
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)
    with pytest.raises(ValueError, match=r"different setup \(model changed\)"):
        finetuning.run(scanned, str(tmp_path / "unrolled"))
