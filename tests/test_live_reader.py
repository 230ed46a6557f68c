"""Readers of a run that is still training: eval_glue.py --config.init_from=RUN and
scripts/export_hf.py against a train.py that saves every step and keeps one checkpoint,
so that every read meets steps being written and removed."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from helpers import REPO, child_xla_flags, tiny_run_args, write_run_corpus, write_sst2


def start_live_run(tmp_path) -> tuple[subprocess.Popen, str]:
    corpus = write_run_corpus(str(tmp_path), sst2_words=True)
    workdir = str(tmp_path / "run")
    args = tiny_run_args(corpus, str(tmp_path / "cache"), 100_000, checkpoint_every_steps=1,
                         keep_checkpoints=1, eval_every_steps=100_000, log_every_steps=1000)
    trainer = subprocess.Popen(
        [sys.executable, "train.py", "--config", "configs/pretrain.py:size=micro",
         f"--workdir={workdir}", *args],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "XLA_FLAGS": child_xla_flags()})
    deadline = time.monotonic() + 180
    checkpoints = os.path.join(workdir, "checkpoints")
    while not (os.path.isdir(checkpoints) and any(n.isdigit() for n in os.listdir(checkpoints))):
        assert trainer.poll() is None and time.monotonic() < deadline, "the run did not start"
        time.sleep(0.2)
    return trainer, workdir


def run_reader(command: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *command], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "XLA_FLAGS": child_xla_flags()})


def assert_clean(done: subprocess.CompletedProcess, used: str) -> int:
    """Exit 0, nothing but the reader's own lines, and the step it used; returns it."""
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "Traceback" not in output and "damaged" not in output, output[-3000:]
    for line in done.stderr.splitlines():  # only this project's own warnings
        assert ("was removed while reading it" in line or "I0000" in line
                or not line.strip()), line
    step = re.search(used, done.stdout)
    assert step, done.stdout
    return int(step.group(1))


@pytest.mark.slow
def test_readers_of_a_run_saving_every_step_never_fail_and_name_their_step(tmp_path, capfd):
    from training.checkpoint_reader import restore_run

    glue_dir = tmp_path / "glue"
    write_sst2(str(glue_dir / "SST-2"), np.random.default_rng(0))
    trainer, workdir = start_live_run(tmp_path)
    try:
        steps = []
        capfd.readouterr()
        for _ in range(60):  # in this process: many reads, each racing a save and removal
            steps.append(restore_run(workdir).step)
        noise = [line for line in capfd.readouterr().err.splitlines()
                 if line.strip() and "was removed while reading it" not in line]
        assert not noise, noise[:5]
        for i in range(2):
            done = run_reader(["scripts/export_hf.py", f"--workdir={workdir}",
                               f"--out={tmp_path / f'export{i}'}"])
            steps.append(assert_clean(done, r"exported \S+@(\d+) "))
        done = run_reader(
            ["eval_glue.py", "--config", "configs/glue.py:task=sst2",
             f"--config.init_from={workdir}", f"--config.glue_dir={glue_dir}",
             f"--workdir={tmp_path / 'glue'}", "--config.num_seeds=1",
             "--config.learning_rates=(2e-3,)", "--config.num_epochs=0.2",
             "--config.max_seq_length=16", "--config.batch_size=16",
             "--config.write_test_predictions=false"])
        steps.append(assert_clean(done, r"its checkpoint at step (\d+)"))
        assert trainer.poll() is None, "the live run stopped"
    finally:
        trainer.send_signal(signal.SIGTERM)
        trainer.wait(timeout=120)
    assert steps == sorted(steps) and steps[-1] > steps[0]  # the run moved on meanwhile
    assert not [n for n in os.listdir(workdir) if n.startswith(".reading-")]
