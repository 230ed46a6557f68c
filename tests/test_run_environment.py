"""A pretraining records what it ran on at each start (WORKDIR/environment.json), and a
resume in another environment says which fields changed: a rerun that does not repeat
its numbers can then be traced."""

from __future__ import annotations

import importlib.metadata
import os

import jax

from training import run_environment
from training.results import RunStarts


def test_the_description_names_this_process_packages_and_devices():
    env = run_environment.describe()
    assert env["jax"] == jax.__version__
    assert env["flax"] == importlib.metadata.version("flax")
    assert env["backend"] == jax.default_backend()
    assert env["devices"].startswith(f"{jax.device_count()} x ")
    assert all(isinstance(v, str) and v for k, v in env.items() if k != "xla_flags")
    assert run_environment.package_version("no-such-package-here") == "not installed"


def test_the_code_digest_follows_the_model_code_and_nothing_else(tmp_path):
    for name in ("train.py", "models/bert.py", "scripts/plot.py", "docs/notes.py"):
        os.makedirs(tmp_path / os.path.dirname(name), exist_ok=True)
        (tmp_path / name).write_text("x = 1\n")
    first = run_environment.code_digest(str(tmp_path))
    (tmp_path / "scripts/plot.py").write_text("x = 2\n")  # not a training module
    (tmp_path / "models/__pycache__").mkdir()
    (tmp_path / "models/__pycache__/bert.py").write_text("cached\n")
    assert run_environment.code_digest(str(tmp_path)) == first
    (tmp_path / "models/bert.py").write_text("x = 2\n")
    assert run_environment.code_digest(str(tmp_path)) != first
    assert run_environment.git_commit(str(tmp_path)) == "not a git checkout"


def test_differences_name_each_changed_field_but_not_the_commit():
    before = {"jax": "0.10.1", "host_cpu": "A", "commit": "abc", "code": "1"}
    now = {"jax": "0.10.2", "host_cpu": "A", "commit": "def", "code": "1", "cpus": "2"}
    assert run_environment.differences(before, now) == [
        "cpus (not recorded) -> 2", "jax 0.10.1 -> 0.10.2"]
    assert run_environment.differences(now, dict(now)) == []


def test_a_damaged_record_is_set_aside_in_one_line_and_a_new_one_begun(tmp_path):
    """A diagnostic file never stops a run; a resume with no record says so."""
    workdir = str(tmp_path)
    with open(RunStarts.path(workdir), "w") as f:
        f.write('{"starts": [')
    warnings = run_environment.record_start(workdir, 10)
    assert len(warnings) == 2
    assert "environment.json: cannot be read" in warnings[0]
    assert "a new record begun" in warnings[0]
    assert warnings[1] == (f"warning: resuming at step 10; the environment of the steps "
                           f"before it is not recorded in {RunStarts.path(workdir)}")
    assert [s["step"] for s in RunStarts.read(workdir).starts] == [10]
    assert any(n.startswith("environment.json.damaged-") for n in os.listdir(workdir))
    assert run_environment.record_start(workdir, 12) == []  # the same environment
