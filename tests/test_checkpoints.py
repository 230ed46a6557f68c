"""Checkpoints under damage: verified on restore, damaged ones set aside (never deleted),
intact ones that do not fit refused without moving them."""

from __future__ import annotations

import errno
import glob
import os
import shutil
import socket

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import tiny_run_config, write_run_corpus

from training.checkpoints import CHECKSUMS, Checkpointer, CheckpointError
from training.pretrain import train_and_evaluate

SIZE = 100_000  # large enough that orbax stores the array as raw, unchecked chunks


def state_at(step: int):
    return {"step": jnp.asarray(step), "w": jnp.arange(float(SIZE)) * step}


ABSTRACT = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), state_at(0))


def two_checkpoints(directory) -> str:
    checkpointer = Checkpointer(str(directory), keep_last=3)
    checkpointer.save(1, state_at(1), {"run": 1})
    checkpointer.save(2, state_at(2), {"run": 2})
    checkpointer.close()
    return str(directory)


def data_files(step_dir: str) -> list[str]:
    return sorted(p for p in glob.glob(os.path.join(step_dir, "state", "**", "*"),
                                       recursive=True)
                  if os.path.isfile(p) and "/d/" in p)


def test_a_flipped_bit_is_found_named_and_the_previous_checkpoint_used(tmp_path, caplog):
    directory = two_checkpoints(tmp_path / "ckpt")
    # The largest file holds the array's bytes: orbax itself reads a flip there silently.
    victim = max(data_files(os.path.join(directory, "2")), key=os.path.getsize)
    with open(victim, "r+b") as f:
        data = bytearray(f.read())
        data[len(data) // 2] ^= 0x01
        f.seek(0)
        f.write(data)
    checkpointer = Checkpointer(directory)
    with caplog.at_level("WARNING"):
        state, config, step = checkpointer.restore(ABSTRACT)
    assert step == 1 and config == {"run": 1}
    np.testing.assert_array_equal(state["w"], np.arange(float(SIZE)))
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert os.path.relpath(victim, os.path.join(directory, "2")) in warned
    # Set aside, not deleted: the step can be saved again, the damaged copy stays.
    assert checkpointer.all_steps() == [1]
    aside = glob.glob(f"{directory}-damaged/2-*")
    assert len(aside) == 1 and os.path.exists(os.path.join(aside[0], CHECKSUMS))
    checkpointer.save(2, state_at(2), {"run": "again"})
    assert checkpointer.restore(ABSTRACT)[1:] == ({"run": "again"}, 2)


def test_a_damaged_config_falls_back_and_a_read_only_reader_moves_nothing(tmp_path, caplog):
    from training.checkpoint_reader import restore_run

    directory = two_checkpoints(tmp_path / "checkpoints")
    with open(os.path.join(directory, "2", "config", "metadata"), "w") as f:
        f.write("{not json")
    with caplog.at_level("WARNING"):
        restored = restore_run(str(tmp_path))  # as eval_glue.py reads a pretraining run
    assert (restored.step, restored.config) == (1, {"run": 1})
    assert any(f"{directory}/2 is damaged" in r.getMessage() for r in caplog.records)
    assert sorted(os.listdir(directory)) == ["1", "2"]
    assert not os.path.exists(f"{directory}-damaged")
    with pytest.raises(CheckpointError, match=f"{directory}/2/config/metadata"):
        restore_run(str(tmp_path), step=2)
    # The reader's snapshots (hard links beside the run's folders) are gone again.
    assert sorted(os.listdir(tmp_path)) == ["checkpoints"]


def test_an_intact_checkpoint_that_does_not_fit_is_refused_not_moved(tmp_path, monkeypatch):
    directory = two_checkpoints(tmp_path / "ckpt")
    other = {"step": jax.ShapeDtypeStruct((), jnp.int32),
             "w": jax.ShapeDtypeStruct((SIZE + 1,), jnp.float32)}
    checkpointer = Checkpointer(directory)
    # Refused from the saved shapes, before orbax reads an array: its failed read left
    # callbacks firing into a closed event loop ('Event loop is closed' tracebacks).
    real_restore = checkpointer.manager.restore
    state_reads = []

    def restore(step, args=None, **kwargs):
        state_reads.extend(["state"] if args is not None and "state" in dict(args) else [])
        return real_restore(step, args=args, **kwargs)

    monkeypatch.setattr(checkpointer.manager, "restore", restore)
    with pytest.raises(CheckpointError, match=f"{directory}/2 does not fit .* 2 arrays saved, "
                                              r"2 expected; shapes saved only \[\(100000,\)\]"):
        checkpointer.restore(other)
    assert checkpointer.all_steps() == [1, 2] and state_reads == []


@pytest.mark.slow
def test_a_run_continues_past_its_damaged_latest_checkpoint(tmp_path):
    corpus = write_run_corpus(str(tmp_path))
    workdir = str(tmp_path / "run")
    config = tiny_run_config(corpus, str(tmp_path / "cache"), steps=20)
    train_and_evaluate(config, workdir)
    for path in data_files(os.path.join(workdir, "checkpoints", "20")):
        with open(path, "wb") as f:
            f.write(b"\0garbage")
    # Longer run: restores step 10, trains through step 20 again and saves it.
    train_and_evaluate(tiny_run_config(corpus, str(tmp_path / "cache"), steps=30,
                                       extend_schedule=True), workdir)
    assert Checkpointer(os.path.join(workdir, "checkpoints")).latest_step() == 30
    assert len(glob.glob(os.path.join(workdir, "checkpoints-damaged", "20-*"))) == 1


@pytest.mark.slow
def test_a_finished_record_whose_checkpoint_is_gone_no_longer_counts(tmp_path, capsys):
    """final_metrics.json vouches for checkpoints/20: once that is deleted by hand (or set
    aside as damaged), the run is not finished for sweeps, and a rerun moves the stale
    record aside, trains step 20 again and writes a new one."""
    from training import results

    corpus = write_run_corpus(str(tmp_path))
    workdir = str(tmp_path / "run")
    config = tiny_run_config(corpus, str(tmp_path / "cache"), steps=20)
    train_and_evaluate(config, workdir)
    target = results.PretrainTarget(workdir, 20)
    assert target.finished()
    shutil.rmtree(os.path.join(workdir, "checkpoints", "20"))
    assert not target.finished()
    capsys.readouterr()
    final = train_and_evaluate(config, workdir)
    assert "reported a checkpoint that is gone" in capsys.readouterr().out
    assert final["step"] == 20 and target.finished()
    assert len(glob.glob(os.path.join(workdir, "final_metrics.stale-*.json"))) == 1


def test_a_reader_of_a_live_run_takes_complete_checkpoints_only(tmp_path, monkeypatch, caplog):
    """eval_glue.py --config.init_from=RUN while RUN trains: a checkpoint whose checksums
    are not written yet is still being saved, and one removed before the reader has
    linked its files was removed by the live run's retention; both give way to the
    newest complete one, and neither is called damaged. One removed after the reader
    linked its files is read whole from the links."""
    import orbax.checkpoint as ocp

    from training import checkpoint_reader
    from training.checkpoint_reader import restore_run

    directory = str(tmp_path / "checkpoints")
    checkpointer = Checkpointer(directory, keep_last=3)
    for step in (10, 20, 30):
        checkpointer.save(step, state_at(step), {"run": step})
    checkpointer.close()
    manifest = os.path.join(directory, "30", CHECKSUMS)
    os.rename(manifest, manifest + ".later")  # 30 is being saved
    assert restore_run(str(tmp_path)).step == 20
    os.rename(manifest + ".later", manifest)

    real_link = checkpoint_reader._link_or_copy

    def retention_removes_30(source, target):
        if f"{os.sep}30{os.sep}state" in source and os.path.isdir(os.path.dirname(manifest)):
            shutil.rmtree(os.path.dirname(manifest))  # as the run would, mid-link
        real_link(source, target)

    monkeypatch.setattr(checkpoint_reader, "_link_or_copy", retention_removes_30)
    with caplog.at_level("WARNING"):
        assert restore_run(str(tmp_path)).step == 20
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert f"{directory}/30 was removed while reading it" in warned
    assert "damaged" not in warned
    monkeypatch.setattr(checkpoint_reader, "_link_or_copy", real_link)

    real_restore = ocp.CheckpointManager.restore

    def retention_removes_20(self, step, *args, **kwargs):
        if step == 20 and os.path.isdir(os.path.join(directory, "20")):
            shutil.rmtree(os.path.join(directory, "20"))  # after the reader linked it
        return real_restore(self, step, *args, **kwargs)

    monkeypatch.setattr(ocp.CheckpointManager, "restore", retention_removes_20)
    restored = restore_run(str(tmp_path))
    assert restored.step == 20 and restored.config == {"run": 20}
    np.testing.assert_array_equal(restored.state["w"], np.arange(float(SIZE)) * 20)
    assert sorted(os.listdir(tmp_path)) == ["checkpoints"]


def test_a_reader_that_cannot_link_copies_and_an_abandoned_snapshot_is_removed(
        tmp_path, monkeypatch):
    """Hard links fail across file systems: the reader copies then. A snapshot left by
    a reader killed with -9 (its process gone) is removed by the next reader."""
    from training import checkpoint_reader
    from training.checkpoint_reader import restore_run

    two_checkpoints(tmp_path / "checkpoints")
    with open("/proc/sys/kernel/pid_max") as f:
        no_process = int(f.read()) + 1  # above every pid: never alive
    abandoned = tmp_path / f".reading-{socket.gethostname()}-{no_process}-x"
    abandoned.mkdir()
    linked = []

    def cross_device(source, target):
        linked.append(source)
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(checkpoint_reader.os, "link", cross_device)
    restored = restore_run(str(tmp_path))
    assert restored.step == 2 and linked
    np.testing.assert_array_equal(restored.state["w"], np.arange(float(SIZE)) * 2)
    assert sorted(os.listdir(tmp_path)) == ["checkpoints"]


def test_the_best_checkpoint_is_kept_beside_the_latest_and_found_by_readers(tmp_path):
    """keep_last=2 with best_metric=eval_loss keeps the two newest and the lowest loss.
    Orbax wrote no metrics (its best_fn was unset) and BestN kept the highest loss, so
    "best" (export, fine-tuning from a run) silently meant the newest, and the best
    checkpoint was deleted."""
    from training.checkpoint_reader import restore_run

    workdir = tmp_path / "run"
    checkpointer = Checkpointer(str(workdir / "checkpoints"), keep_last=2,
                                best_metric="eval_loss")
    for step, loss in [(1, 3.0), (2, 1.0), (3, 2.0), (4, 2.5), (5, 2.7)]:
        checkpointer.save(step, {"w": jnp.full(3, float(step))}, {"step": step},
                          metrics={"eval_loss": loss})
    assert checkpointer.all_steps() == [2, 4, 5]
    assert checkpointer.best_step("eval_loss") == 2
    checkpointer.close()
    restored = restore_run(str(workdir), step="best")
    assert restored.step == 2 and float(restored.state["w"][0]) == 2.0
    assert restore_run(str(workdir)).step == 5
