"""scripts/eval_curve.py: a run's logged curve read back from its TensorBoard events, against
the values the project's own writer put there (a resumed run's rewrite of a step wins)."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest
from helpers import run_script

from analysis.eval_curve import curves, landed_curves
from common.files import write_json_atomic
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
    with pytest.raises(ValueError, match=f"^{run}: no TensorBoard scalar 'eval_accuracy' in "
                                         f"its events$"):
        curves([str(run)], "eval_accuracy")
    out = tmp_path / "curve.json"
    missing_dir = run_script("eval_curve.py", [f"--workdir={tmp_path / 'nope'}",
                                               f"--json={out}"])
    assert missing_dir.returncode != 0
    assert missing_dir.stderr.strip().splitlines()[-1] == (
        f"error: {tmp_path / 'nope'}: no such workdir")
    assert not out.exists()


def test_a_landed_curve_stays_when_its_workdir_is_gone_or_behind(tmp_path):
    """Landing again into the same --json (a fresh clone, a lost disk, a rerun still going)
    keeps a named workdir's landed curve when that workdir is not here or has not reached
    the curve's last step; a rerun that reaches it replaces the curve."""
    run, out = str(tmp_path / "run"), str(tmp_path / "curve.json")

    def land() -> list[str]:
        report, lines = curves([run], "eval_loss", landed=landed_curves(out, "eval_loss"))
        write_json_atomic(out, report)
        return lines

    write_curve(run, {500: 6.2, 1000: 6.0}, tag="eval_loss")
    land()
    shutil.rmtree(run)
    assert land() == [f"{run}: no such workdir here; kept its landed curve (to step 1000)"]
    with open(out) as f:
        assert json.load(f)["runs"][run]["values"] == pytest.approx({"500": 6.2, "1000": 6.0})

    os.makedirs(run)  # a rerun before its first eval
    assert land() == [f"{run}: not yet in the window here; kept its landed curve (to step "
                      f"1000)"]
    write_curve(run, {500: 6.3}, tag="eval_loss")  # a rerun at step 500
    assert land() == [f"{run}: at step 500 here; kept its landed curve (to step 1000)"]
    time.sleep(1.1)  # a new event file (its name carries the second it opened)
    write_curve(run, {1000: 5.9, 1500: 5.8}, tag="eval_loss")
    assert land() == [f"{run}: eval_loss -0.5000 from step 500 to 1500 (3 logged steps)"]
    with open(out) as f:
        assert json.load(f)["runs"][run]["values"] == pytest.approx(
            {"500": 6.3, "1000": 5.9, "1500": 5.8})
    # Another tag's or window's file holds no landed curve of this one.
    assert landed_curves(out, "eval_accuracy") == {}
    assert landed_curves(out, "eval_loss", from_step=1000) == {}
    assert landed_curves(out, "eval_loss", to_step=1000) == {}
    with open(out, "w") as f:
        f.write("{")
    with pytest.raises(ValueError, match=f"^{out}: not a results file of "
                                         f"scripts/eval_curve.py"):
        landed_curves(out, "eval_loss")
