"""A workdir belongs to one run: its data, tokenizer and architecture are checked on
resume before anything is written, one process at a time holds it, and a rerun with
nothing left to train changes nothing."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil

import pytest
from helpers import RUN_SENTENCES, tiny_run_config, write_run_corpus

from training import run_environment
from training.checkpoints import Checkpointer
from training.pretrain import train_and_evaluate
from training.pretrain_loop import TrainingError
from training.results import RunStarts
from training.workdir import WorkdirBusy, WorkdirLock

pytestmark = pytest.mark.slow  # every test pretrains

STEPS = 10


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """(corpus, cache, workdir) of a finished 10-step run; tests work on copies."""
    root = tmp_path_factory.mktemp("finished")
    corpus, cache = write_run_corpus(str(root)), str(root / "cache")
    workdir = str(root / "run")
    train_and_evaluate(tiny_run_config(corpus, cache, steps=STEPS), workdir)
    return corpus, cache, workdir


def copy_run(finished, tmp_path) -> str:
    target = str(tmp_path / "run")
    shutil.copytree(finished[2], target, ignore=shutil.ignore_patterns(".lock"))
    return target


def snapshot(workdir: str) -> dict[str, bytes]:
    """Every file outside the data cache (and the lock), with its bytes."""
    out = {}
    for root, dirs, files in os.walk(workdir):
        dirs[:] = [d for d in dirs if d != "data_cache"]
        for name in files:
            if name == WorkdirLock.NAME:
                continue
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, workdir)] = f.read()
    return out


def other_corpus(tmp_path) -> str:
    """Other English text: the same sentences reversed word by word."""
    path = str(tmp_path / "other.txt")
    with open(path, "w") as f:
        for i in range(120):
            f.write("\n".join(" ".join(reversed(s.split()))
                               for s in RUN_SENTENCES[i % 3:]) + "\n\n")
    return path


def test_resume_on_another_corpus_is_refused_before_anything_is_written(finished, tmp_path):
    _, cache, _ = finished
    workdir = copy_run(finished, tmp_path)
    before = snapshot(workdir)
    config = tiny_run_config(other_corpus(tmp_path), cache, steps=2 * STEPS)
    with pytest.raises(TrainingError, match="another corpus"):
        train_and_evaluate(config, workdir)
    assert snapshot(workdir) == before  # tokenizer/, config.json, checkpoints untouched


def test_resume_with_another_encoding_is_refused(finished, tmp_path):
    """The same files read as latin-1 are another text (data.encoding is in the corpus
    identity)."""
    corpus, cache, _ = finished
    workdir = copy_run(finished, tmp_path)
    before = snapshot(workdir)
    config = tiny_run_config(corpus, cache, steps=STEPS, **{"data.encoding": "latin-1"})
    with pytest.raises(TrainingError, match="another corpus"):
        train_and_evaluate(config, workdir)
    assert snapshot(workdir) == before


def test_resume_with_another_tokenizer_setting_is_refused(finished, tmp_path):
    corpus, cache, _ = finished
    workdir = copy_run(finished, tmp_path)
    before = snapshot(workdir)
    config = tiny_run_config(corpus, cache, steps=2 * STEPS, **{"data.vocab_size": 150})
    with pytest.raises(TrainingError, match="data.vocab_size"):
        train_and_evaluate(config, workdir)
    assert snapshot(workdir) == before


@pytest.mark.parametrize("field,value,message", [
    ("model.talking_heads.mask_placement", "before", "talking_heads.mask_placement"),
    ("model.talking_heads.num_logit_heads", 8, "talking_heads.num_logit_heads"),
])
def test_changed_talking_heads_settings_are_a_different_architecture(
        field, value, message, tmp_path):
    corpus, cache = write_run_corpus(str(tmp_path)), str(tmp_path / "cache")
    workdir = str(tmp_path / "run")
    train_and_evaluate(tiny_run_config(corpus, cache, steps=4, **{"model.attention":
                                                                  "talking_heads"}), workdir)
    changed = tiny_run_config(corpus, cache, steps=8, **{"model.attention": "talking_heads",
                                                         field: value})
    with pytest.raises(TrainingError, match=f"different architecture .*{message}"):
        train_and_evaluate(changed, workdir)


def test_a_live_workdir_is_refused_and_a_stale_lock_file_is_not(finished, tmp_path):
    corpus, cache, _ = finished
    workdir = copy_run(finished, tmp_path)
    config = tiny_run_config(corpus, cache, steps=STEPS + 2, extend_schedule=True)
    with WorkdirLock(workdir), pytest.raises(WorkdirBusy, match=f"{workdir} is in use by pid"):
        train_and_evaluate(config, workdir)
    # The lock file stays behind (as after kill -9); only a live holder blocks.
    assert os.path.exists(os.path.join(workdir, WorkdirLock.NAME))
    train_and_evaluate(config, workdir)
    assert Checkpointer(os.path.join(workdir, "checkpoints")).latest_step() == STEPS + 2


def test_a_rerun_with_nothing_to_train_changes_nothing(finished, tmp_path):
    corpus, cache, _ = finished
    workdir = copy_run(finished, tmp_path)
    before = snapshot(workdir)
    # Other logging settings: still nothing to train, so config.json keeps the run's own.
    final = train_and_evaluate(tiny_run_config(corpus, cache, steps=STEPS, log_every_steps=1),
                               workdir)
    assert snapshot(workdir) == before
    with open(os.path.join(workdir, "final_metrics.json")) as f:
        assert final == json.load(f)


def test_a_run_resumes_on_a_copy_of_its_corpus_elsewhere_with_new_file_times(finished,
                                                                            tmp_path,
                                                                            monkeypatch):
    """The corpus moved to another disk or session (a fresh mount, a copy without -t) is
    the same text: the run is not refused as trained on another corpus. The resume reads
    the corpus's bytes for its identity once (the check's identity keys the cache)."""
    from input_pipeline import corpus as corpus_module

    hashed = []
    real_digest = corpus_module._file_digest
    monkeypatch.setattr(corpus_module, "_file_digest",
                        lambda path: hashed.append(path) or real_digest(path))
    corpus, cache, _ = finished
    workdir = copy_run(finished, tmp_path)
    before = snapshot(workdir)
    moved = tmp_path / "elsewhere" / "corpus.txt"
    moved.parent.mkdir()
    moved.write_bytes(open(corpus, "rb").read())
    os.utime(moved, ns=(1, 10**18))
    train_and_evaluate(tiny_run_config(str(moved), cache, steps=STEPS), workdir)
    assert snapshot(workdir) == before
    assert len(hashed) == 1


def test_no_eval_split_reports_no_eval_metrics(tmp_path):
    corpus, cache = write_run_corpus(str(tmp_path)), str(tmp_path / "cache")
    workdir = str(tmp_path / "run")
    final = train_and_evaluate(tiny_run_config(corpus, cache, steps=4,
                                               **{"data.eval_fraction": 0.0}), workdir)
    with open(os.path.join(workdir, "final_metrics.json")) as f:
        saved = json.load(f)
    assert saved == final and saved["step"] == 4
    assert not any(key.startswith("eval_") for key in saved)  # never a perfect 0.0 / 1.0
    assert saved["train_loss"] > 0


def test_a_changed_step_count_on_resume_says_what_the_schedule_becomes(finished, tmp_path,
                                                                     capsys):
    """A finished 20-step run rerun with 30 steps would run another schedule (linear decay
    over 30 from step 0): refused, one line naming the rates, unless extend_schedule;
    then one warning. A run past its new end says so and changes nothing."""
    corpus, cache, _ = finished
    workdir = copy_run(finished, tmp_path)
    before = snapshot(workdir)
    with pytest.raises(TrainingError, match=rf"num_train_steps={STEPS} -> {STEPS + 10}\): the "
                                            rf"learning rate at step {STEPS} becomes .* \(was "
                                            rf"0\).*extend_schedule=true"):
        train_and_evaluate(tiny_run_config(corpus, cache, steps=STEPS + 10), workdir)
    assert snapshot(workdir) == before
    capsys.readouterr()
    train_and_evaluate(tiny_run_config(corpus, cache, steps=STEPS + 10, extend_schedule=True),
                       workdir)
    out = capsys.readouterr().out
    assert f"warning: extend_schedule: num_train_steps={STEPS} -> {STEPS + 10}" in out
    assert Checkpointer(os.path.join(workdir, "checkpoints")).latest_step() == STEPS + 10

    after = snapshot(workdir)
    final = train_and_evaluate(tiny_run_config(corpus, cache, steps=STEPS), workdir)
    out = capsys.readouterr().out
    assert f"already at step {STEPS + 10}, past num_train_steps={STEPS}" in out
    assert snapshot(workdir) == after and final["step"] == STEPS + 10
    assert "final metrics: step=" in out  # the saved record, printed


def test_each_start_is_recorded_and_a_resume_elsewhere_says_what_changed(finished, tmp_path,
                                                                         capsys):
    """WORKDIR/environment.json keeps what each start ran on (training/run_environment.py),
    so a resumed run that does not repeat an uninterrupted one can be traced."""
    corpus, cache, _ = finished
    workdir = copy_run(finished, tmp_path)
    record = RunStarts.read(workdir)
    assert [s["step"] for s in record.starts] == [0]
    assert record.starts[0]["environment"] == run_environment.describe()
    # As if the first steps had run under another jaxlib on another CPU.
    with open(RunStarts.path(workdir)) as f:
        saved = json.load(f)
    saved["starts"][0]["environment"].update(jaxlib="0.0.1", host_cpu="Some Other CPU")
    with open(RunStarts.path(workdir), "w") as f:
        json.dump(saved, f)
    capsys.readouterr()
    train_and_evaluate(tiny_run_config(corpus, cache, steps=STEPS + 4, extend_schedule=True),
                       workdir)
    out = capsys.readouterr().out
    jaxlib = importlib.metadata.version("jaxlib")
    assert (f"warning: resuming at step {STEPS} in another environment than the start at "
            f"step 0 (host_cpu Some Other CPU -> {run_environment.host_cpu()}; jaxlib 0.0.1 "
            f"-> {jaxlib}): the run need not repeat an uninterrupted one bit for bit") in out
    starts = RunStarts.read(workdir).starts
    assert [s["step"] for s in starts] == [0, STEPS]
    assert starts[1]["environment"] == run_environment.describe()
