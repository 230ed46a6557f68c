"""Checkpoints under damage: verified on restore, damaged ones set aside (never deleted),
intact ones that do not fit refused without moving them."""

from __future__ import annotations

import glob
import os
import shutil

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
    directory = two_checkpoints(tmp_path / "ckpt")
    with open(os.path.join(directory, "2", "config", "metadata"), "w") as f:
        f.write("{not json")
    reader = Checkpointer(directory, read_only=True)
    with caplog.at_level("WARNING"):
        _, config, step = reader.restore()  # as eval_glue.py reads a pretraining run
    assert (step, config) == (1, {"run": 1})
    assert any(f"{directory}/2" in r.getMessage() for r in caplog.records)
    assert reader.all_steps() == [1, 2] and not os.path.exists(f"{directory}-damaged")
    with pytest.raises(CheckpointError, match=f"{directory}/2/config/metadata"):
        reader.restore(step=2)


def test_an_intact_checkpoint_that_does_not_fit_is_refused_not_moved(tmp_path):
    directory = two_checkpoints(tmp_path / "ckpt")
    other = {"step": jax.ShapeDtypeStruct((), jnp.int32),
             "w": jax.ShapeDtypeStruct((SIZE + 1,), jnp.float32)}
    checkpointer = Checkpointer(directory)
    with pytest.raises(CheckpointError, match=f"{directory}/2 does not fit"):
        checkpointer.restore(other)
    assert checkpointer.all_steps() == [1, 2]


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


@pytest.mark.slow
def test_a_reader_of_a_live_run_takes_complete_checkpoints_only(tmp_path, monkeypatch):
    """eval_glue.py --config.init_from=RUN while RUN trains: a checkpoint whose checksums
    are not written yet is still being saved, and one that vanishes while it is read was
    removed by the live run's retention; both give way to the newest complete one, and
    neither is an error."""
    import orbax.checkpoint as ocp

    from training.checkpoints import restore_run

    corpus = write_run_corpus(str(tmp_path))
    workdir = str(tmp_path / "run")
    train_and_evaluate(tiny_run_config(corpus, str(tmp_path / "cache"), steps=30,
                                       keep_checkpoints=3), workdir)
    newest = os.path.join(workdir, "checkpoints", "30")
    manifest = os.path.join(newest, CHECKSUMS)
    os.rename(manifest, manifest + ".later")  # 30 is being saved
    assert restore_run(workdir).step == 20
    os.rename(manifest + ".later", manifest)

    real_restore = ocp.CheckpointManager.restore

    def retention_removes_20(self, step, *args, **kwargs):
        if step == 20 and "state" in dict(kwargs.get("args") or {}):
            shutil.rmtree(os.path.join(workdir, "checkpoints", "20"))  # as the run would
        return real_restore(self, step, *args, **kwargs)

    shutil.rmtree(newest)  # the run saved 30 (gone here) and now removes 20 mid-read
    monkeypatch.setattr(ocp.CheckpointManager, "restore", retention_removes_20)
    restored = restore_run(workdir)
    assert restored.step == 10 and restored.state["params"]


def test_the_best_checkpoint_is_kept_beside_the_latest_and_found_by_readers(tmp_path):
    """keep_last=2 with best_metric=eval_loss keeps the two newest and the lowest loss.
    Orbax wrote no metrics (its best_fn was unset) and BestN kept the highest loss, so
    "best" (export, fine-tuning from a run) silently meant the newest, and the best
    checkpoint was deleted."""
    from training.checkpoints import restore_run

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
