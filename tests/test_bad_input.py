"""Bad input to pretraining: one clear error naming the file or field, a non-zero exit,
nothing half-written that looks complete. (GLUE TSV cases: test_glue_readers.py;
model-config cases: test_configs.py; corpus decoding: test_input_pipeline.py.)"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import REPO, tiny_run_args, tiny_run_config

from training.pretrain import TrainingError, train_and_evaluate


def empty_dir(tmp_path):
    path = tmp_path / "empty"
    path.mkdir()
    return str(path)


def blank_file(tmp_path):
    path = tmp_path / "blank.txt"
    path.write_text("\n\n   \n")
    return str(path)


CASES = {
    # name: (config changes, expected message fragment)
    "empty corpus directory": (lambda c, t: c.data.update(corpus=empty_dir(t)), "no text"),
    "corpus of blank lines": (lambda c, t: c.data.update(corpus=blank_file(t)), "no text"),
    "missing corpus path": (lambda c, t: c.data.update(corpus=str(t / "nope" / "*.txt")),
                            "nope"),
    "zero steps": (lambda c, t: c.update(num_train_steps=0), "num_train_steps=0"),
    "accumulation not dividing batch": (lambda c, t: c.update(grad_accum_steps=3),
                                        "grad_accum_steps=3 must divide batch_size=16"),
    "sequence longer than positions": (lambda c, t: c.data.update(max_seq_length=4096),
                                       "exceeds model.max_position_embeddings"),
    "unknown optimizer": (lambda c, t: c.optimizer.update(name="sgd"), "optimizer.name='sgd'"),
    "negative warmup": (lambda c, t: c.optimizer.update(warmup_steps=-1),
                        "optimizer.warmup_steps=-1"),
    "mesh larger than the machine": (lambda c, t: c.mesh.update(tensor=16), "does not fit"),
    "heads not dividing width": (lambda c, t: c.model.update(num_heads=5),
                                 "model.num_heads=5 does not divide model.hidden_size=32"),
    "zero key size": (lambda c, t: c.model.update(key_size=0), "model.key_size=0"),
    "zero log interval": (lambda c, t: c.update(log_every_steps=0), "log_every_steps=0"),
    "zero eval interval": (lambda c, t: c.update(eval_every_steps=0), "eval_every_steps=0"),
    "zero checkpoint interval": (lambda c, t: c.update(checkpoint_every_steps=0),
                                 "checkpoint_every_steps=0"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_pretraining_input_is_one_clear_error(case, run_corpus, tmp_path):
    change, message = CASES[case]
    config = tiny_run_config(*run_corpus, steps=4)
    change(config, tmp_path)
    workdir = tmp_path / "run"
    with pytest.raises(ValueError) as info:
        train_and_evaluate(config, str(workdir))
    text = str(info.value)
    assert message in text and "\n" not in text.strip()
    assert not (workdir / "checkpoints").exists() or not os.listdir(workdir / "checkpoints")
    assert not (workdir / "final_metrics.json").exists()


@pytest.mark.slow
def test_workdir_with_another_architecture_is_refused(run_corpus, tmp_path):
    workdir = str(tmp_path / "run")
    train_and_evaluate(tiny_run_config(*run_corpus, steps=2), workdir)
    config = tiny_run_config(*run_corpus, steps=4)
    config.model.mlp_dim = 128
    with pytest.raises(TrainingError, match=r"different architecture \(model.mlp_dim: "
                                            r"checkpoint 64, config 128\)"):
        train_and_evaluate(config, workdir)


@pytest.mark.slow
@pytest.mark.parametrize("script,config,args,message", [
    ("train.py", "configs/pretrain.py:size=micro", ["--config.model.colour=blue"], "colour"),
    ("train.py", "configs/pretrain.py:size=micro", ["--config.nope=3"], "config.nope"),
    ("train.py", "configs/pretrain.py:size=micro", ["--config.num_train_steps=many"],
     "num_train_steps"),
    ("train.py", "configs/pretrain.py:size=nope", [], "model.size='nope' is unknown"),
    ("train.py", "configs/pretrain.py:colour=blue", [], "unknown config arg(s) ['colour']"),
    ("train.py", "configs/pretrain.py:size", [], "'size' is not of the form key=value"),
    ("train.py", "configs/pretrain.py:size=micro", ["--config.log_every_steps=0"],
     "log_every_steps=0"),
    ("train.py", "configs/pretrain.py:size=micro", ["--config.data.corpus=/no/such/dir/*.txt"],
     "/no/such/dir"),
    ("eval_glue.py", "configs/glue.py:task=rte", ["--config.colour=blue"], "config.colour"),
    ("eval_glue.py", "configs/glue.py:colour=blue", [], "unknown config arg(s) ['colour']"),
])
def test_command_line_errors_exit_non_zero_with_one_line(script, config, args, message,
                                                         tmp_path):
    command = [sys.executable, script, "--config", config, "--workdir", str(tmp_path / "run"),
               *args]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and message in last, result.stderr[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]


@pytest.fixture
def small_disk(tmp_path):
    """A 700 KiB filesystem (tmpfs; needs root): room for the run's small files, not
    for a checkpoint."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=700k", "tmpfs", str(mount)],
                          capture_output=True)
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (not root?)")
    yield str(mount)
    subprocess.run(["umount", str(mount)], check=False)


@pytest.mark.slow
def test_a_full_disk_is_one_error_line(run_corpus, small_disk):
    text, cache = run_corpus
    command = [sys.executable, "train.py", "--config", "configs/pretrain.py:size=micro",
               "--workdir", os.path.join(small_disk, "run"), *tiny_run_args(text, cache, steps=10),
               "--config.model.hidden_size=128", "--config.model.mlp_dim=512"]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and "no space left" in last.lower(), result.stderr[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert not os.path.exists(os.path.join(small_disk, "run", "final_metrics.json"))
