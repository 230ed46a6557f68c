"""Pretraining runs that die or diverge: SIGTERM and kill -9 then a rerun resume to
bit-identical parameters (the resume test), non-finite losses stop or are skipped.
(Damaged checkpoints: test_checkpoints.py; bad input: test_bad_input.py.)"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
from helpers import REPO, final_params, tiny_run_args, tiny_run_config

from training.checkpoints import Checkpointer
from training.cli import EXIT_STOPPED
from training.pretrain import train_and_evaluate
from training.pretrain_loop import TrainingError

pytestmark = pytest.mark.slow  # train.py processes and pretraining runs

STEPS = 24


def train_py(workdir: str, args: list[str]) -> subprocess.Popen:
    command = [sys.executable, "train.py", "--config", "configs/pretrain.py:size=micro",
               "--workdir", workdir, *args]
    return subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def run_to_end(workdir: str, args: list[str]) -> str:
    proc = train_py(workdir, args)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    return out


def wait_for_line(proc: subprocess.Popen, prefix: str, timeout: float = 300) -> str:
    deadline = time.time() + timeout
    seen = []
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        seen.append(line)
        if line.startswith(prefix):
            return line
    proc.kill()
    raise AssertionError(f"never saw {prefix!r}; stdout: {''.join(seen)[-2000:]}")


@pytest.fixture(scope="module")
def straight(run_corpus, tmp_path_factory):
    """Final params of an uninterrupted run, in a fresh process like the others."""
    text, cache = run_corpus
    workdir = str(tmp_path_factory.mktemp("straight"))
    run_to_end(workdir, args(text, cache))
    return final_params(workdir)


def args(text: str, cache: str) -> list[str]:
    return tiny_run_args(text, cache, steps=STEPS, log_every_steps=1, checkpoint_every_steps=5,
                     eval_every_steps=STEPS)


def assert_same_params(a, b) -> None:
    assert a[0] == b[0] == STEPS
    jax.tree.map(lambda x, y: np.testing.assert_array_equal(x, y), a[1], b[1])


def test_sigterm_saves_the_current_step_and_a_rerun_continues(run_corpus, straight, tmp_path):
    """Also the resume test: a new process continues to bit-identical final params."""
    text, cache = run_corpus
    workdir = str(tmp_path / "run")
    proc = train_py(workdir, args(text, cache))
    wait_for_line(proc, "step 7/")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    # Stopped is not finished: `train.py && eval_glue.py` must not go on.
    assert proc.returncode == EXIT_STOPPED, err[-2000:]
    saved = int(out.split("SIGTERM: saved step ")[1].split(";")[0])
    assert saved >= 7
    assert saved in Checkpointer(os.path.join(workdir, "checkpoints"), read_only=True).all_steps()
    assert not os.path.exists(os.path.join(workdir, "final_metrics.json"))
    rerun = run_to_end(workdir, args(text, cache))
    assert f"at step {saved}" in rerun
    assert_same_params(final_params(workdir), straight)


def test_kill_9_resumes_from_the_last_complete_checkpoint(run_corpus, straight, tmp_path):
    text, cache = run_corpus
    workdir = str(tmp_path / "run")
    proc = train_py(workdir, args(text, cache))
    wait_for_line(proc, "step 12/")
    proc.kill()  # SIGKILL: no handler runs
    proc.communicate(timeout=60)
    rerun = run_to_end(workdir, args(text, cache))
    assert "resumed from" in rerun and "at step 10" in rerun
    assert_same_params(final_params(workdir), straight)


def test_non_finite_loss_stops_naming_the_step_and_is_not_checkpointed(run_corpus, tmp_path):
    text, cache = run_corpus
    workdir = str(tmp_path / "run")
    # An absurd learning rate drives the parameters to inf within a few steps.
    config = tiny_run_config(text, cache, steps=30, checkpoint_every_steps=1)
    config.optimizer.learning_rate = 1e30
    config.optimizer.grad_clip_norm = 0.0
    with pytest.raises(TrainingError, match=r"non-finite loss or gradient at step \d+") as info:
        train_and_evaluate(config, workdir)
    bad_step = int(str(info.value).split("at step ")[1].split(" ")[0])
    saved = Checkpointer(os.path.join(workdir, "checkpoints"), read_only=True).all_steps()
    assert max(saved, default=0) < bad_step  # checkpoint k holds k finite steps
    # The stop is recorded, so a rate grid reads the run as finished and worst
    # (scripts/rate_bracket.py) and a study script skips it instead of stopping.
    from analysis.rate_bracket import read_pretraining
    from training import results

    record = results.Diverged.read(workdir)
    assert record.step == bad_step and record.seen_at >= bad_step
    assert results.main(["--is_diverged", workdir]) == 0
    assert results.main(["--is_finished", workdir, "--steps", "30"]) == 1
    run = read_pretraining(workdir)
    assert (run.finished, run.diverged, run.diverged_at) == (True, True, bad_step)
    # A rerun resumes, diverges at the same step and records it again; a record of an
    # earlier attempt does not outlive a run that goes on.
    os.remove(results.Diverged.path(workdir))
    with pytest.raises(TrainingError, match=f"non-finite loss or gradient at step {bad_step} "):
        train_and_evaluate(config, workdir)
    assert results.Diverged.read(workdir).step == bad_step
    fresh = str(tmp_path / "fresh")
    results.Diverged(3, 5).write(fresh)
    train_and_evaluate(tiny_run_config(text, cache, steps=2), fresh)
    assert results.Diverged.read(fresh) is None
    assert results.main(["--is_diverged", fresh]) == 1


def test_skip_mode_keeps_going_past_a_non_finite_update(run_corpus, tmp_path):
    text, cache = run_corpus
    config = tiny_run_config(text, cache, steps=12, nonfinite="skip")
    config.optimizer.learning_rate = 1e30
    config.optimizer.grad_clip_norm = 0.0
    final = train_and_evaluate(config, str(tmp_path / "run"))
    assert "eval_loss" in final  # the run completed
    step, params = final_params(str(tmp_path / "run"))
    assert step == 12
    assert all(np.all(np.isfinite(p)) for p in jax.tree.leaves(params))


def test_skip_mode_never_saves_a_non_finite_state_and_counts_every_skip(run_corpus, tmp_path):
    """An absurd learning rate makes updates non-finite: they are skipped, no checkpoint
    holds a non-finite value (parameters and optimizer state), and the skips are counted
    in TensorBoard and in final_metrics.json, which stays strict JSON (the last logged
    loss, a skipped step's NaN, is null there)."""
    import json

    from analysis.runs import scalar_curve

    text, cache = run_corpus
    workdir = str(tmp_path / "run")
    config = tiny_run_config(text, cache, steps=12, nonfinite="skip", checkpoint_every_steps=3,
                             log_every_steps=3)
    config.optimizer.learning_rate = 1e30
    config.optimizer.grad_clip_norm = 0.0
    final = train_and_evaluate(config, workdir)
    checkpointer = Checkpointer(os.path.join(workdir, "checkpoints"), read_only=True)
    for step in checkpointer.all_steps():
        state, _, _ = checkpointer.restore(step=step)
        assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(state)
                   if np.issubdtype(np.asarray(x).dtype, np.floating)), step
    logged = sum(scalar_curve(workdir, "skipped_nonfinite").values())

    def no_constants(name):
        raise ValueError(f"{name} in final_metrics.json")

    with open(os.path.join(workdir, "final_metrics.json")) as f:
        record = json.loads(f.read(), parse_constant=no_constants)
    assert record["skipped_nonfinite"] == final["skipped_nonfinite"] == logged >= 1


def test_a_learning_rate_float32_cannot_hold_is_refused_before_anything_runs(run_corpus,
                                                                             tmp_path):
    """1e39 is inf in float32: every update would be non-finite (NaN where a gradient is 0),
    and optax would store the rate itself, inf, in every checkpoint."""
    from training.optimizer import OptimizerError

    text, cache = run_corpus
    for value in (1e39, float("nan")):
        config = tiny_run_config(text, cache, steps=2)
        config.optimizer.learning_rate = value
        message = f"optimizer.learning_rate={value} is not a finite float32 number"
        with pytest.raises(OptimizerError, match=re.escape(message)):
            train_and_evaluate(config, str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()
