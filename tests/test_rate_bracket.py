"""scripts/rate_bracket.py: each row's best pretraining rate and whether the grid brackets it,
on workdirs written by the project's own writers (configs/pretrain.py's config,
FinalMetrics, the TensorBoard MetricWriter), against verdicts worked out by hand."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from helpers import run_script, write_pretraining

from analysis.rate_bracket import (
    REPEAT_NATS,
    Pretraining,
    bracketed,
    brackets,
    find_pretrainings,
    half_decade_neighbour,
    landed_pretrainings,
    markdown,
    rate_spelling,
    row_name,
    with_landed,
)
from training import results


def bracket(tmp_path, args=()):
    out = tmp_path / "bracket.json"
    result = run_script("rate_bracket.py", [f"--study={tmp_path / 'study'}", f"--json={out}",
                                            *args])
    assert result.returncode == 0, result.stderr
    rows = json.loads(out.read_text())["rows"]
    return {(row["row"], row["seed"], row["steps"]): row for row in rows}, result.stdout


def test_verdicts_bracketed_at_each_edge_a_tie_and_a_run_still_going(tmp_path):
    study = tmp_path / "study"
    # multi-head at 48 heads: 1e-3 best, both neighbours worse -> bracketed
    write_pretraining(study, "pretrain_h48_lr3e-4", 3e-4, 6.10)
    write_pretraining(study, "pretrain_h48", 1e-3, 6.00, accuracy=0.1234)
    write_pretraining(study, "pretrain_h48_lr3e-3", 3e-3, 6.05)
    # identity init: the highest rate best -> add 1e-2; runner-up 0.01 away -> a tie
    write_pretraining(study, "pretrain_h48_nat_th_identity_lr3e-4", 3e-4, 6.20)
    write_pretraining(study, "pretrain_h48_nat_th_identity", 1e-3, 6.09)
    write_pretraining(study, "pretrain_h48_nat_th_identity_lr3e-3", 3e-3, 6.08)
    # fan-in: the lowest rate best, the highest diverged (worst) -> add 1e-4
    write_pretraining(study, "pretrain_h48_nat_th_fan_in_lr3e-4", 3e-4, 6.15)
    write_pretraining(study, "pretrain_h48_nat_th_fan_in", 1e-3, 6.30)
    write_pretraining(study, "pretrain_h48_nat_th_fan_in_lr3e-3", 3e-3, None)
    # a second pretraining seed, one rate finished and one still at step 50
    write_pretraining(study, "pretrain_h48_seed1", 1e-3, 6.02, seed=1)
    write_pretraining(study, "pretrain_h48_lr3e-4_seed1", 3e-4, seed=1, at_step=50,
                      logged={25: 6.9, 50: 6.5})

    rows, stdout = bracket(tmp_path)
    mh = rows[("mh_h48", 0, 100)]
    assert (mh["verdict"], mh["best_rate"], mh["next_rate"]) == ("bracketed", 1e-3, None)
    assert mh["runner_up_gap"] == pytest.approx(0.05) and not mh["tie"]
    assert [run["eval_accuracy"] for run in mh["runs"]] == [None, 0.1234, None]
    identity = rows[("nat_th_identity_h48", 0, 100)]
    assert (identity["verdict"], identity["best_rate"], identity["next_rate"]) == (
        "above_grid", 3e-3, 1e-2)
    assert identity["runner_up_gap"] == pytest.approx(0.01) and identity["tie"]
    fan_in = rows[("nat_th_fan_in_h48", 0, 100)]
    assert (fan_in["verdict"], fan_in["best_rate"], fan_in["next_rate"]) == (
        "below_grid", 3e-4, 1e-4)
    assert [run["eval_loss"] for run in fan_in["runs"]] == [6.15, 6.30, None]
    assert fan_in["runs"][2]["diverged_at"] == 60 and fan_in["runs"][2]["finished"]
    second = rows[("mh_h48", 1, 100)]
    assert (second["verdict"], second["best_rate"]) == ("incomplete", 1e-3)
    running = [run for run in second["runs"] if not run["finished"]][0]
    assert (running["last_step"], running["eval_loss"]) == (50, 6.5)

    # Rates in the study scripts' folder spelling: given back as PRE_LR, they find the
    # folder again.
    assert ("mh_h48 (seed 0, 100 steps): best 1e-3 (6.0000), runner-up +0.0500 nats; "
            "bracketed") in stdout
    assert "runner-up +0.0100 nats (a tie: under 0.02); at the grid's high edge: add 1e-2" \
        in stdout
    assert "at the grid's low edge: add 1e-4" in stdout
    assert "| mh_h48 | 0 | 100 | 1e-3 | finished | 6.0000 | best | 12.3% |" in stdout
    assert ("| nat_th_fan_in_h48 | 0 | 100 | 3e-3 | diverged | diverged at step 60 | - | - |"
            in stdout)
    assert "| mh_h48 | 1 | 100 | 3e-4 | at step 50 | (6.5000 so far) | - | - |" in stdout
    assert "so far (1 of 2 rates finished)" in stdout

    found = brackets(find_pretrainings(str(study)))
    assert bracketed(found, "mh_h48", 0).best.learning_rate == 1e-3  # --best's command line:
    # tests/test_study_scripts.py (head_count_study.sh's PRE_LR=best)
    with pytest.raises(ValueError, match=r"no such row at seed 0 \(rows at seed 0: mh_h48 "
                                         r"\(100 steps\), nat_th_fan_in_h48 \(100 steps\), "
                                         r"nat_th_identity_h48 \(100 steps\)\)"):
        bracketed(found, "mh_h96", 0)
    with pytest.raises(ValueError, match=r"--best mh_h48: no such row at seed 0, 4000 steps"):
        bracketed(found, "mh_h48", 0, steps=4000)  # another schedule's pick is not this one's
    with pytest.raises(ValueError, match=r"--best mh_h48: not bracketed: .*so far"):
        bracketed(found, "mh_h48", 1)
    with pytest.raises(ValueError, match=r"--best nat_th_identity_h48: not bracketed: "
                                         r"nat_th_identity_h48 \(seed 0, 100 steps\)"):
        bracketed(found, "nat_th_identity_h48", 0)


def test_a_second_seed_at_the_bracketed_rate_is_named_as_such(tmp_path):
    """PRE_LR=best runs a second seed at seed 0's bracketed rate only: the printed verdict
    says so, where it once asked for a lower and a higher rate; a second seed at another
    rate still asks for them."""
    study = tmp_path / "study"
    for name, rate, loss in (("_lr3e-4", 3e-4, 6.10), ("", 1e-3, 6.00), ("_lr3e-3", 3e-3, 6.05)):
        write_pretraining(study, f"pretrain_h48{name}", rate, loss)
    write_pretraining(study, "pretrain_h48_seed1", 1e-3, 5.95, seed=1)
    write_pretraining(study, "pretrain_h48_lr3e-4_seed2", 3e-4, 6.12, seed=2)
    lines = [line for line in markdown(brackets(find_pretrainings(str(study)))).splitlines()
             if line.startswith("- mh_h48 (seed ")]
    assert lines[1:] == [
        "- mh_h48 (seed 1, 100 steps): best 1e-3 (5.9500); one rate: seed 0's bracketed "
        "rate, at a second seed",
        "- mh_h48 (seed 2, 100 steps): best 3e-4 (6.1200); one rate only: add a lower and a "
        "higher one"]


def test_the_rate_is_the_configs_and_a_schedule_is_a_row_of_its_own(tmp_path):
    study = tmp_path / "study"
    write_pretraining(study, "pretrain_h8_lr3e-4", 1e-3, 6.1)  # misnamed: config says 1e-3
    write_pretraining(study, "pretrain_h8", 1e-3, 6.0)
    result = run_script("rate_bracket.py", [f"--study={study}"])
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: mh_h8 (seed 0, 100 steps): rate 1e-3 in two workdirs: "
        f"{study}/pretrain_h8, {study}/pretrain_h8_lr3e-4")

    other = tmp_path / "other" / "study"
    write_pretraining(other, "pretrain_h8", 1e-3, 6.0)
    write_pretraining(other, "pretrain_h8_lr3e-4", 3e-4, 6.1, steps=400)
    rows, stdout = bracket(tmp_path / "other")
    assert [(key, row["verdict"]) for key, row in rows.items()] == [
        (("mh_h8", 0, 100), "single_rate"), (("mh_h8", 0, 400), "single_rate")]
    lines = [line for line in stdout.splitlines() if line.startswith("- ")]
    assert lines == [
        "- mh_h8 (seed 0, 100 steps): best 1e-3 (6.0000); one rate only: add a lower and a "
        "higher one",
        "- mh_h8 (seed 0, 400 steps): best 3e-4 (6.1000); one rate only: add a lower and a "
        "higher one"]
    found = brackets(find_pretrainings(str(other)))
    with pytest.raises(ValueError, match=r"seed 0 has 2 schedules \(100 steps, 400 steps\): "
                                         r"give --steps"):
        bracketed(found, "mh_h8", 0)


def test_bad_input_is_one_error_line_naming_the_file(tmp_path):
    missing = run_script("rate_bracket.py", [f"--study={tmp_path / 'nope'}"])
    assert missing.returncode != 0
    assert missing.stderr.strip().splitlines()[-1] == (
        f"error: {tmp_path / 'nope'}: no such study directory")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "pretrain_h8").mkdir()  # never started: no config.json
    nothing = run_script("rate_bracket.py", [f"--study={empty}"])
    assert nothing.returncode != 0
    assert "no pretraining workdirs (pretrain_*/config.json)" in nothing.stderr

    study = tmp_path / "study"
    workdir = write_pretraining(study, "pretrain_h8", 1e-3, 6.0)
    results.FinalMetrics(step=100, train_loss=6.0).write(workdir)  # no eval split
    no_eval = run_script("rate_bracket.py", [f"--study={study}"])
    assert no_eval.returncode != 0
    assert no_eval.stderr.strip().splitlines()[-1] == (
        f"error: {workdir}: final_metrics.json has no eval_loss (a run without an eval split "
        f"cannot pick a rate)")
    with open(os.path.join(workdir, results.RUN_CONFIG), "w") as f:
        json.dump({"seed": 0}, f)
    damaged = run_script("rate_bracket.py", [f"--study={study}"])
    assert damaged.returncode != 0
    assert damaged.stderr.strip().splitlines()[-1] == (
        f"error: {workdir}: config.json has no usable 'optimizer'")


@pytest.mark.parametrize("rate, direction, want", [
    (3e-3, +1, 1e-2), (1e-3, -1, 3e-4), (3e-4, -1, 1e-4), (1e-2, +1, 3e-2),
    (5e-4, +1, 1e-3), (5e-4, -1, 3e-4), (2e-3, +1, 3e-3), (2e-3, -1, 1e-3),  # off the grid
])
def test_the_next_rate_is_the_half_decade_grids(rate, direction, want):
    assert half_decade_neighbour(rate, direction) == want


@pytest.mark.parametrize("name, want", [
    ("pretrain_h48", "mh_h48"), ("pretrain_h96_nat_th_fan_in_lr3e-3_seed1", "nat_th_fan_in_h96"),
    ("pretrain_h8_lr1e-2", "mh_h8"), ("pretrain_txt_mh_h8", "txt_mh_h8"),
    ("pretrain_h48_lr3e-4_steps4640", "mh_h48"),
])
def test_row_names_are_the_studys(name, want):
    assert row_name(f"/x/{name}/") == want


@pytest.mark.parametrize("name, rate, want", [
    ("pretrain_h48_lr3e-4", 3e-4, "3e-4"), ("pretrain_h48_lr0.0003_seed1", 3e-4, "0.0003"),
    ("pretrain_h48", 1e-3, "1e-3"), ("pretrain_h48_lr3e-4", 1e-3, "1e-3"),  # misnamed
    ("pretrain_x", 2.5e-4, "2.5e-4"),
])
def test_the_best_rate_is_spelled_as_its_folder_spells_it(name, rate, want):
    run = Pretraining(f"/x/{name}", row_name(name), rate, 0, 100, True, 100, 6.0)
    assert rate_spelling(run) == want


def test_best_prints_every_rows_pick_warns_of_a_tie_and_needs_strictly_worse_ends(tmp_path):
    """--best ROW... prints "ROW RATE" lines (head_count_study.sh reads them); a pick within
    the tie margin is a warning; a neighbour with exactly the best loss is not "worse", so
    that grid is not bracketed; only the asked rows are read (a damaged other row does not
    stop the question)."""
    study = tmp_path / "study"
    for rate, loss in ((3e-4, 6.10), (1e-3, 6.00), (3e-3, 6.005)):  # 1e-3 by 0.005: a tie
        write_pretraining(study, f"pretrain_h48_lr{rate:.0e}".replace("e-0", "e-"), rate, loss)
    for rate, loss in ((3e-4, 6.2), (1e-3, 6.1), (3e-3, 6.1)):  # 1e-3 = 3e-3: not bracketed
        write_pretraining(study, f"pretrain_h96_lr{rate:.0e}".replace("e-0", "e-"), rate, loss)
    damaged = write_pretraining(study, "pretrain_h8", 1e-3, 6.0)
    with open(os.path.join(damaged, results.RUN_CONFIG), "w") as f:
        f.write("{")
    result = run_script("rate_bracket.py", [f"--study={study}", "--steps=100",
                                            "--best=mh_h48"])
    assert (result.returncode, result.stdout) == (0, "mh_h48 1e-3\n"), result.stderr
    assert result.stderr.strip().splitlines() == [
        "warning: mh_h48: the runner-up is 0.0050 nats behind (under the tie margin 0.02): "
        "the pick is a near tie"]
    both = run_script("rate_bracket.py", [f"--study={study}", "--best=mh_h48",
                                          "--best=mh_h96"])
    assert both.returncode == 1 and both.stdout == ""
    assert both.stderr.strip().splitlines()[-1] == (
        "error: --best mh_h96: not bracketed: mh_h96 (seed 0, 100 steps): best 1e-3 (6.1000), "
        "runner-up +0.0000 nats (a tie: under 0.02); at the grid's high edge: add 1e-2")


def test_landing_again_keeps_what_landed_when_a_workdir_is_gone(tmp_path):
    """A fresh clone (or a lost disk) has the landed results file but not the workdirs
    behind it. Landing again into that file keeps every finished run it records that this
    study lacks, or has only as a rerun still going; a run that was still going when it
    landed is not kept (its workdir was the only truth about it). --best reads a landed
    file given as --landed, so a second seed needs no rerun of the whole grid. A rerun
    that finishes replaces the landed run, and a warning says when the two ended apart."""
    study = tmp_path / "study"
    for rate, loss in ((3e-4, 6.10), (1e-3, 6.00), (3e-3, 6.05)):
        write_pretraining(study, f"pretrain_h48_lr{rate:.0e}".replace("e-0", "e-"), rate, loss)
    write_pretraining(study, "pretrain_h48_seed1", 1e-3, seed=1, at_step=50, logged={50: 6.5})
    os.rename(study / "pretrain_h48_lr1e-3", study / "pretrain_h48")
    rows, _ = bracket(tmp_path)
    assert rows[("mh_h48", 0, 100)]["verdict"] == "bracketed"

    # The clone: the grid is gone; a new row finished, the 1e-3 run is rerunning.
    shutil.rmtree(study)
    write_pretraining(study, "pretrain_h48_nat_th_fan_in_lr3e-4", 3e-4, 6.2)
    write_pretraining(study, "pretrain_h48", 1e-3, at_step=50, logged={50: 6.7})
    landed = tmp_path / "bracket.json"
    rows, stdout = bracket(tmp_path)
    mh = rows[("mh_h48", 0, 100)]
    assert (mh["verdict"], mh["best_rate"], mh["best_eval_loss"]) == ("bracketed", 1e-3, 6.0)
    assert [run["landed_in"] for run in mh["runs"]] == [str(landed)] * 3
    assert ("mh_h48", 1, 100) not in rows  # was at step 50: nothing of it is kept
    assert rows[("nat_th_fan_in_h48", 0, 100)]["runs"][0]["landed_in"] is None
    assert "| mh_h48 | 0 | 100 | 1e-3 | finished (landed) | 6.0000 | best | - |" in stdout

    found = brackets(find_pretrainings(str(study), ["mh_h48"]))
    with pytest.raises(ValueError, match="not bracketed"):  # the study alone: one rerun
        bracketed(found, "mh_h48", 0)
    best = bracketed(brackets(with_landed(
        find_pretrainings(str(study), ["mh_h48"]),
        landed_pretrainings(str(landed), ["mh_h48"]))[0]), "mh_h48", 0).best
    assert (best.learning_rate, best.landed_in) == (1e-3, str(landed))
    # Without --landed the clone has one rerun still going: the error says where the
    # grid's other runs can come from (the slip of a user who forgot LANDED_BRACKET).
    forgot = run_script("rate_bracket.py", [f"--study={study}", "--best=mh_h48"])
    assert (forgot.returncode, forgot.stdout) == (1, "")
    assert forgot.stderr.strip().splitlines()[-1] == (
        "error: --best mh_h48: not bracketed: mh_h48 (seed 0, 100 steps): no finished run "
        "yet; runs landed elsewhere (a fresh clone's docs/results/) count with --landed FILE "
        "(head_count_study.sh: LANDED_BRACKET=FILE)")
    fresh = run_script("rate_bracket.py", [f"--study={tmp_path / 'not_made_yet'}",
                                           "--best=mh_h48", f"--landed={landed}"])
    assert (fresh.returncode, fresh.stdout) == (0, "mh_h48 1e-3\n"), fresh.stderr
    assert fresh.stderr.strip() == (f"warning: {tmp_path / 'not_made_yet'}: no such study "
                                    f"directory; landed runs only")

    # The rerun finishes, 0.01 nats away from what landed: it wins, and says so.
    shutil.rmtree(study / "pretrain_h48")
    write_pretraining(study, "pretrain_h48", 1e-3, 6.01)
    runs, differ = with_landed(find_pretrainings(str(study)),
                               landed_pretrainings(str(landed)))
    mh = bracketed(brackets(runs), "mh_h48", 0)
    assert mh.best.eval_loss == 6.01 and mh.best.landed_in is None
    assert differ == [f"mh_h48 (seed 0, 100 steps) at 1e-3: {study}/pretrain_h48 ended at "
                      f"6.0100, the landed run at 6.0000 ({landed})"]
    assert f"- rerun differs: {differ[0]}" in markdown(brackets(runs), reruns_differ=differ)
    differs = run_script("rate_bracket.py", [f"--study={study}", f"--json={landed}"])
    assert f"warning: rerun differs: {differ[0]}" in differs.stderr
    again = run_script("rate_bracket.py", [f"--study={study}", f"--json={landed}"])
    assert again.stderr == ""  # the rerun is now the landed run; what differed stays said
    assert json.loads(landed.read_text())["reruns_differ"] == differ
    assert f"- rerun differs: {differ[0]}" in again.stdout
    write_pretraining(study, "pretrain_h48_lr3e-3", 3e-3, 6.05 + 0.5 * REPEAT_NATS)
    assert with_landed(find_pretrainings(str(study)), landed_pretrainings(str(landed)))[1] \
        == []  # within REPEAT_NATS of the landed 6.05: the same result


def test_a_damaged_landed_file_is_one_error_naming_it(tmp_path):
    damaged = tmp_path / "landed.json"
    damaged.write_text('{"rows": [{"runs": [{"row": "mh_h8", "finished": true}]}]}')
    with pytest.raises(ValueError, match=f"^{damaged}: not a results file of "
                                         r"scripts/rate_bracket.py \(TypeError: "):
        landed_pretrainings(str(damaged))
    damaged.write_text("{")
    with pytest.raises(ValueError, match=f"^{damaged}: not a results file of "
                                         r"scripts/rate_bracket.py \(JSONDecodeError: "):
        landed_pretrainings(str(damaged))
    with pytest.raises(ValueError, match=f"^{tmp_path / 'nope.json'}: no such file$"):
        landed_pretrainings(str(tmp_path / "nope.json"))
