"""scripts/eval_curve.py: a run's logged curve read back from its TensorBoard events, against
the values the project's own writer put there (a resumed run's rewrite of a step wins)."""

from __future__ import annotations

import json
import time

import pytest
from helpers import run_script

from training.metrics import MetricWriter


def write_curve(logdir: str, values: dict[int, float], tag: str = "eval_accuracy") -> None:
    writer = MetricWriter(logdir, enabled=True)
    for step, value in values.items():
        writer.scalars(step, {tag: value})
    writer.close()


def test_window_and_change_match_what_was_logged_and_a_resume_rewrite_wins(tmp_path):
    run = tmp_path / "run"
    write_curve(str(run), {2000: 0.30, 2400: 0.40, 2700: 0.45, 3000: 0.44})
    # A resume logs step 3000 again, in a new event file; its name carries the second it
    # opened, so the test waits one out (tensorboardX would reuse the first file's name).
    time.sleep(1.1)
    write_curve(str(run), {3000: 0.47})

    out = tmp_path / "curve.json"
    result = run_script("eval_curve.py", [f"--workdir={run}", "--tag=eval_accuracy",
                                          "--from_step=2400", f"--json={out}"])
    assert result.returncode == 0, result.stderr
    got = json.loads(out.read_text())["runs"][str(run)]
    assert list(got["values"]) == ["2400", "2700", "3000"]
    assert got["values"]["2700"] == pytest.approx(0.45)
    assert got["change"] == pytest.approx(0.47 - 0.40)
    assert (got["from"], got["to"]) == (2400, 3000)
    assert "+0.0700 from step 2400 to 3000" in result.stdout


def test_a_missing_tag_or_workdir_is_one_error_line_naming_it(tmp_path):
    run = tmp_path / "run"
    write_curve(str(run), {10: 1.0}, tag="eval_loss")
    out = tmp_path / "curve.json"
    missing_tag = run_script("eval_curve.py", [f"--workdir={run}", "--tag=eval_accuracy",
                                               f"--json={out}"])
    assert missing_tag.returncode != 0
    assert missing_tag.stderr.strip().splitlines()[-1] == (
        f"error: {run}: no TensorBoard scalar 'eval_accuracy' in its events")
    missing_dir = run_script("eval_curve.py", [f"--workdir={tmp_path / 'nope'}"])
    assert missing_dir.returncode != 0
    assert "nope: no such workdir" in missing_dir.stderr
    assert not out.exists()
