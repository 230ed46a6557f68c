"""Bad input to pretraining: one clear error naming the file or field, a non-zero exit,
nothing half-written that looks complete. (GLUE TSV cases: test_glue_readers.py;
model-config cases: test_configs.py; corpus decoding: test_input_pipeline.py.)"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import REPO, tiny_run_args, tiny_run_config

from training.pretrain import train_and_evaluate
from training.pretrain_loop import TrainingError


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
    # A typo in a nested field: the suggestion, without literal \\' and \\n.
    ("train.py", "configs/pretrain.py:size=micro", ["--config.modle.num_heads=2"],
     '--config.modle.num_heads=2: the config has no field modle (did you mean "model"?)'),
    # The task names the config takes, not the display names.
    ("eval_glue.py", "configs/glue.py:task=sst3", [], "use all or a list of cola, "),
    ("train.py", "configs/pretrain.py:size=micro", ["--workdir={file}"],
     "--workdir={file} is a file, not a directory"),
])
def test_command_line_errors_exit_non_zero_with_one_line(script, config, args, message,
                                                         tmp_path):
    """One line on stderr (it was two: absl's E... log line, then ours), exit 1 or 2,
    and nothing left behind."""
    file = tmp_path / "a_file"
    file.write_text("not a workdir")
    args, message = [a.format(file=file) for a in args], message.format(file=file)
    command = [sys.executable, script, "--config", config, "--workdir", str(tmp_path / "run"),
               *args]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode in (1, 2)
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error:") and message in line, result.stderr[-2000:]
    assert "\\" not in line and "SST-2" not in line
    assert not os.path.exists(tmp_path / "run")  # a failed start leaves no workdir behind


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


def test_an_unreachable_hub_is_one_warning_free_error_that_says_what_to_do(monkeypatch, capsys,
                                                                           caplog):
    """huggingface_hub logs each retry at WARNING, and absl printed each twice; the
    failure said nothing about running offline."""
    import logging

    import datasets

    from input_pipeline.corpus import HubDataset
    from input_pipeline.errors import CorpusError

    def unreachable(*args, **kwargs):
        for attempt in range(1, 6):
            logging.getLogger("huggingface_hub.utils._http").warning(
                "'Connection refused' thrown while requesting HEAD ... [Retry %d/5]", attempt)
        raise ConnectionError("Couldn't reach 'wikitext' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", unreachable)
    with caplog.at_level(logging.WARNING), pytest.raises(CorpusError) as error:
        HubDataset("wikitext", "wikitext-2-raw-v1").dataset  # noqa: B018
    assert not [r for r in caplog.records if "Retry" in r.getMessage()]
    assert "Retry" not in capsys.readouterr().err
    message = str(error.value)
    assert "Couldn't reach 'wikitext'" in message
    assert "--config.data.corpus=FILES_OR_DIR" in message and "HF_HUB_OFFLINE=1" in message

    import glue
    from glue import hub

    monkeypatch.setattr(hub, "datasets", datasets, raising=False)
    with pytest.raises(glue.GlueDataError, match=r"nyu-mll/glue/sst2 split 'train': cannot "
                                                 r"load .*--config.glue_dir=DIR"):
        glue.load_hub_split("sst2", "train")


@pytest.mark.slow
@pytest.mark.parametrize("script,config", [("train.py", "configs/pretrain.py:size=micro"),
                                           ("eval_glue.py", "configs/glue.py:task=rte")])
def test_help_exits_zero_and_print_config_shows_the_resolved_config(script, config):
    """--help exited 1 and said nothing about the config; --print_config prints it with
    the overrides applied, needs no --workdir, writes nothing and exits 0."""
    helped = subprocess.run([sys.executable, script, "--help"], cwd=REPO, capture_output=True,
                            text=True, timeout=300)
    assert helped.returncode == 0 and "--print_config" in helped.stdout, helped.stderr
    printed = subprocess.run([sys.executable, script, "--config", config, "--print_config",
                              "--config.batch_size=24"], cwd=REPO, capture_output=True,
                             text=True, timeout=300)
    assert printed.returncode == 0, printed.stderr
    assert "batch_size: 24\n" in printed.stdout and "max_seq_length: " in printed.stdout
    missing = subprocess.run([sys.executable, script, "--config", config], cwd=REPO,
                             capture_output=True, text=True, timeout=300)
    assert missing.returncode == 2
    assert missing.stderr.strip() == ("error: --workdir is required: the run's directory "
                                      "(--print_config needs none)")
