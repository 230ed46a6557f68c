"""Two processes joined by jax.distributed (4 fake CPU devices each) train as one
8-device process would, only process 0 writes logs, and checkpoints move
between the two layouts in both directions."""

from __future__ import annotations

import glob
import os
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest
from helpers import (
    REPO,
    child_xla_flags,
    final_params,
    tiny_run_args,
    tiny_run_config,
    write_run_corpus,
)

from analysis.runs import scalar_curve
from training.pretrain import train_and_evaluate

pytestmark = pytest.mark.slow  # train.py processes and pretraining runs

STEPS, HALF = 12, 6


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_processes(workdir: str, args: list[str]) -> list[str]:
    port = free_port()
    procs = []
    for pid in range(2):
        env = dict(os.environ, JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}",
                   JAX_NUM_PROCESSES="2", JAX_PROCESS_ID=str(pid),
                   XLA_FLAGS=child_xla_flags(devices=4))
        command = [sys.executable, "train.py", "--config", "configs/pretrain.py:size=micro",
                   "--workdir", workdir, *args]
        procs.append(subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        outputs.append(out)
    return outputs


def losses(workdir: str) -> dict[int, float]:
    return scalar_curve(workdir, "loss")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("mp")
    text = write_run_corpus(str(root))
    cache = str(root / "cache")
    extra = dict(log_every_steps=1, checkpoint_every_steps=HALF, eval_every_steps=STEPS)
    config = tiny_run_config(text, cache, steps=STEPS, **extra)
    reference = str(root / "one_process")
    train_and_evaluate(config, reference)  # 8 devices in this process (conftest)
    return text, cache, extra, reference, root


def test_two_processes_equal_one_and_checkpoints_cross_layouts(setup):
    text, cache, extra, reference, root = setup
    args = tiny_run_args(text, cache, steps=STEPS, **extra)

    # Two processes for the first half, then one process finishes the run.
    split_a = str(root / "two_then_one")
    outputs = two_processes(split_a, args + [f"--config.stop_after_steps={HALF}"])
    assert "step 1/" in outputs[0] and "step 1/" not in outputs[1]  # only process 0 talks
    assert len(glob.glob(os.path.join(split_a, "events.out.tfevents.*"))) == 1
    ref_losses, two_losses = losses(reference), losses(split_a)
    assert sorted(two_losses) == list(range(1, HALF + 1))
    np.testing.assert_allclose([two_losses[s] for s in range(1, HALF + 1)],
                               [ref_losses[s] for s in range(1, HALF + 1)], rtol=1e-5)
    train_and_evaluate(tiny_run_config(text, cache, steps=STEPS, **extra), split_a)

    # One process for the first half, then two processes finish it.
    split_b = str(root / "one_then_two")
    train_and_evaluate(tiny_run_config(text, cache, steps=STEPS, stop_after_steps=HALF,
                                       **extra), split_b)
    outputs = two_processes(split_b, args)
    assert f"at step {HALF}" in outputs[0]
    late = losses(split_b)
    np.testing.assert_allclose([late[s] for s in range(HALF + 1, STEPS + 1)],
                               [ref_losses[s] for s in range(HALF + 1, STEPS + 1)], rtol=1e-5)

    step_ref, params_ref = final_params(reference)
    for workdir in (split_a, split_b):
        step, params = final_params(workdir)
        assert step == step_ref == STEPS
        # test_sharding.py's tolerance for a sharded run against one device: two processes
        # sum the gradients in another order, and Adam's normalisation turns a last-bit
        # difference in a near-zero gradient into an update ~1e-6 apart (2.0e-6 on 1 of
        # 16,384 weights, seen on one machine).
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5),
                     params, params_ref)
