"""scripts/compare_finetuning.py: rows at their best learning rate, paired by fine-tuning
seed, tested as scipy does, Holm over the table; bad rows are one error line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.stats

from analysis import finetune_compare
from models import ModelConfig
from training import results

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = ModelConfig(num_layers=1, hidden_size=32, num_heads=4, mlp_dim=64, vocab_size=100)
PROTOCOL = {"max_seq_length": 64, "batch_size": 32, "num_epochs": 2.0,
            "max_train_examples": 2000}


def write_workdir(path, scores: dict[float, list[float]], model=MODEL, task="SST-2",
                  init=None, **protocol):
    """A GLUE workdir as eval_glue.py leaves it: identity and one result.json per run."""
    os.makedirs(path)
    with open(os.path.join(path, "glue_identity.json"), "w") as f:
        json.dump({"init": init or f"hf:{os.path.basename(path)}", "model": model.to_dict(),
                   **PROTOCOL, **protocol}, f)
    for lr, per_seed in scores.items():
        for seed, value in enumerate(per_seed):
            run_dir = os.path.join(path, task, results.run_name(lr, seed))
            os.makedirs(run_dir)
            results.RunResult(task, lr, seed, 10, {"dev": {"accuracy": value}}, value,
                              0.1).write(run_dir)
    return str(path)


def test_rows_pair_by_seed_at_their_best_learning_rate_with_holm(tmp_path):
    a = write_workdir(tmp_path / "a", {5e-5: [80.0, 81.0, 82.0, 80.5, 81.5],
                                       2e-4: [70.0, 71.0, 72.0, 70.5, 71.5]})
    b_best = [82.0, 82.4, 84.1, 81.9, 83.0]
    b = write_workdir(tmp_path / "b", {5e-5: [79.0, 80.0, 81.0, 79.5, 80.5], 2e-4: b_best},
                      model=MODEL.replace(attention="talking_heads"))
    c = write_workdir(tmp_path / "c", {5e-5: [80.1, 80.9, 82.2, 80.4, 81.6]})
    rows = finetune_compare.parse_rows([f"a={a}", f"b={b}", f"c={c}"])
    assert [r.best_lr("SST-2") for r in rows] == [5e-5, 2e-4, 5e-5]
    tests = finetune_compare.run_tests(rows, [("a", "b"), ("a", "c")])
    ab, ac = tests
    base = [80.0, 81.0, 82.0, 80.5, 81.5]
    assert ab.p_t == pytest.approx(scipy.stats.ttest_rel(b_best, base).pvalue)
    ci = scipy.stats.t.interval(0.95, 4, loc=np.mean(np.subtract(b_best, base)),
                                scale=scipy.stats.sem(np.subtract(b_best, base)))
    assert ab.ci == pytest.approx(ci)
    # Holm over two tests: the smaller p doubled, the larger at least that.
    low, high = sorted([ab, ac], key=lambda t: t.p_t)
    assert low.p_holm == pytest.approx(min(1, 2 * low.p_t))
    assert high.p_holm == pytest.approx(max(low.p_holm, high.p_t))
    assert ab.verdict("t", 0.05) == "b better"
    assert ac.verdict("t", 0.05) == "equivalent (±0.5)"  # differences within ±0.2
    assert ab.cost_b[1] > ab.cost_a[1]  # talking heads' mixing costs FLOPs
    text = finetune_compare.render(rows, tests, 0.05)
    assert "2e-4†" not in text and "lr 0.0002†" in text  # b's best is the grid's edge
    assert "Holm over 2" in text


@pytest.mark.slow  # scripts in subprocesses
def test_the_script_writes_both_files_or_one_error_line(tmp_path):
    a = write_workdir(tmp_path / "a", {5e-5: [80.0, 81.0, 82.0]})
    b = write_workdir(tmp_path / "b", {5e-5: [80.5, 81.0, 83.0]}, max_train_examples=4000)
    out = tmp_path / "out"
    script = [sys.executable, os.path.join(ROOT, "scripts", "compare_finetuning.py")]
    bad = subprocess.run(script + [f"--row=a={a}", f"--row=b={b}", f"--out={out}"],
                         capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 1
    assert bad.stderr.strip().splitlines() == [
        "error: --row b: its protocol differs from a's in max_train_examples; fine-tuning "
        "seeds pair only within one"]
    assert not out.exists()
    missing = subprocess.run(script + [f"--row=a={a}", f"--row=x={tmp_path}", f"--out={out}"],
                             capture_output=True, text=True, cwd=ROOT)
    assert missing.returncode == 1 and "no glue_identity.json" in missing.stderr
    c = write_workdir(tmp_path / "c", {5e-5: [81.0, 82.0, 82.5]})
    good = subprocess.run(script + [f"--row=a={a}", f"--row=c={c}", f"--out={out}"],
                          capture_output=True, text=True, cwd=ROOT)
    assert good.returncode == 0, good.stderr
    saved = json.loads((out / "table.json").read_text())
    assert [t["a"] + ":" + t["b"] for t in saved["tests"]] == ["a:c"]
    assert saved["tests"][0]["diff"] == pytest.approx(2.5 / 3)
    assert "| a | hf:a |" in (out / "table.md").read_text()
    # --change against the table just written, its rows named otherwise there; one error
    # line for a row it lacks, and no output.
    changed = subprocess.run(script + [f"--row=a2={a}", f"--row=c2={c}",
                                       f"--change=a2:c2@{out}/table.json=a:c", f"--out={out}2"],
                             capture_output=True, text=True, cwd=ROOT)
    assert changed.returncode == 0, changed.stderr
    same, = json.loads((tmp_path / "out2" / "table.json").read_text())["changes"]
    # The same scores on both sides: no change, p = 1.
    assert (same["there_a"], same["here"], same["there"]) == ("a", [1.0, 1.0, 0.5],
                                                              [1.0, 1.0, 0.5])
    assert (same["diff"], same["p_welch"], same["verdict"]) == (0.0, 1.0, "not settled")
    lacking = subprocess.run(script + [f"--row=a={a}", f"--row=c={c}",
                                       f"--change=a:c@{out}/table.json=a:x", f"--out={out}3"],
                             capture_output=True, text=True, cwd=ROOT)
    assert lacking.returncode == 1 and not (tmp_path / "out3").exists()
    assert lacking.stderr.strip().splitlines() == [
        f"error: --change a:c@{out}/table.json=a:x: no row x there (it has a, c)"]


def test_difference_trend_is_least_squares_on_log2_x():
    """The slope, its t interval and p as the textbook formulas give them in numpy."""
    from analysis import stats

    points = [(8, [0.5, -0.2, 0.1]), (48, [-1.0, -1.6, -0.4]), (96, [-2.5, -1.1, -2.0])]
    trend = stats.difference_trend("th - mh", points)
    x = np.log2([8] * 3 + [48] * 3 + [96] * 3)
    d = np.array([v for _, diffs in points for v in diffs])
    sxx = np.sum((x - x.mean()) ** 2)
    slope = np.sum((x - x.mean()) * (d - d.mean())) / sxx
    residuals = d - d.mean() - slope * (x - x.mean())
    se = np.sqrt(np.sum(residuals ** 2) / (len(d) - 2) / sxx)
    assert trend.slope == pytest.approx(slope)
    assert trend.p == pytest.approx(2 * scipy.stats.t.sf(abs(slope / se), len(d) - 2))
    half = scipy.stats.t.ppf(0.975, len(d) - 2) * se
    assert trend.ci == pytest.approx((slope - half, slope + half))
    assert trend.verdict(0.05) == "falls with x"
    flat = stats.difference_trend("th - mh", [(8, [0.5, -0.5]), (96, [0.4, -0.4])])
    assert flat.slope == pytest.approx(0) and flat.verdict(0.05) == "not settled"
    with pytest.raises(ValueError, match="two or more settings"):
        stats.difference_trend("th - mh", [(8, [0.5, -0.2, 0.1])])


def test_trend_over_head_counts_pairs_each_count_at_its_best_rate(tmp_path):
    """--trend A:B@X: each pair's per-seed differences at the rows' best learning rates,
    regressed on log2(X) (rows from scratch: every seed draws its own start); in the
    table as one test outside the Holm family."""
    rows, trend_points, expected = [], [], []
    for heads, gap in ((8, 0.0), (48, -2.0), (96, -4.0)):
        model = MODEL.replace(num_heads=heads, hidden_size=96)
        base = [80.0, 81.0, 82.0]
        scratch = f"{results.SCRATCH_START}runs/h{heads}@1"
        mh = write_workdir(tmp_path / f"mh{heads}", {1e-3: base, 1e-4: [60.0] * 3}, model=model,
                           init=scratch)
        th_best = [b + gap + noise for b, noise in zip(base, (0.3, -0.2, 0.1), strict=True)]
        th = write_workdir(tmp_path / f"th{heads}", {1e-3: [50.0] * 3, 1e-4: th_best},
                           model=model.replace(attention="talking_heads"), init=scratch)
        rows += [f"mh_h{heads}={mh}", f"th_h{heads}={th}"]
        trend_points.append(f"mh_h{heads}:th_h{heads}@{heads}")
        expected.append((heads, list(np.subtract(th_best, base))))
    parsed = finetune_compare.parse_rows(rows)
    points = finetune_compare.parse_trend(trend_points, {r.name for r in parsed})
    (task, trend), = finetune_compare.trend_tests(parsed, points, "th - mh")
    from analysis import stats
    assert task == "SST-2"
    assert trend == stats.difference_trend("th - mh", expected)
    assert trend.slope < 0
    text = finetune_compare.render(parsed, [], 0.05, [(task, trend)])
    assert "Trend (SST-2 dev): th - mh changes by" in text
    assert "outside the table's Holm family" in text
    # A task some rows lack, or too few differences, is a line in the table, not an error.
    lone = [(8.0, [1.0, 1.0]), (96.0, [1.0])]
    with pytest.raises(ValueError, match="no spread"):
        stats.difference_trend("th - mh", lone)
    few = finetune_compare.trend_tests(parsed, points[:1], "th - mh")
    assert few == [("SST-2", "trend th - mh: needs differences at two or more settings and "
                             "three or more in all (has 3 at 1)")]
    assert "Trend (SST-2 dev): not fitted: trend th - mh" in finetune_compare.render(
        parsed, [], 0.05, few)
    with pytest.raises(ValueError, match="given twice"):
        finetune_compare.parse_trend(trend_points[:1] * 2, {r.name for r in parsed})
    with pytest.raises(ValueError, match="use A:B@X"):
        finetune_compare.parse_trend(["mh_h8:th_h8"], {r.name for r in parsed})
    with pytest.raises(ValueError, match="--trend 'mh_h8:th_h9@8': A and B must be two rows"):
        finetune_compare.parse_trend(["mh_h8:th_h9@8"], {r.name for r in parsed})


def test_a_trend_over_rows_from_one_checkpoint_each_regresses_the_means_per_x(tmp_path):
    """Rows fine-tuned from one pretrained checkpoint per x: the seeds at one x share that
    checkpoint (one draw of the pretraining), so its differences are not independent
    samples; the unit is the mean difference per x (n = number of x, n - 2 degrees of
    freedom), as a regression on the per-seed values would overstate the evidence."""
    from analysis import stats

    rows, trend_points, means = [], [], []
    for heads, offset in ((8, 1.5), (48, -1.0), (64, 0.5), (96, -0.5)):
        model = MODEL.replace(num_heads=heads, hidden_size=192)
        base = [80.0, 81.0, 82.0, 80.5, 81.5]
        th = [b + offset + noise for b, noise in zip(base, (0.1, -0.1, 0.05, -0.05, 0.0),
                                                     strict=True)]
        start = f"runs/pretrain_h{heads}@1000"
        mh_dir = write_workdir(tmp_path / f"mh{heads}", {1e-3: base}, model=model, init=start)
        th_dir = write_workdir(tmp_path / f"th{heads}", {1e-3: th}, init=start,
                               model=model.replace(attention="talking_heads"))
        rows += [f"mh_h{heads}={mh_dir}", f"th_h{heads}={th_dir}"]
        trend_points.append(f"mh_h{heads}:th_h{heads}@{heads}")
        means.append((heads, [float(np.mean(np.subtract(th, base)))]))
    parsed = finetune_compare.parse_rows(rows)
    points = finetune_compare.parse_trend(trend_points, {r.name for r in parsed})
    (_, trend), = finetune_compare.trend_tests(parsed, points, "th - mh")
    assert trend.diffs == stats.difference_trend("th - mh", means).diffs
    assert trend.p == pytest.approx(stats.difference_trend("th - mh", means).p)
    per_seed = stats.difference_trend("th - mh", [
        (x, [m + n for n in (0.1, -0.1, 0.05, -0.05, 0.0)]) for x, (m,) in means])
    assert trend.p > per_seed.p  # 4 means, not 20 seeds: the honest p is larger
    text = finetune_compare.render(parsed, [], 0.05, [(_, trend)])
    assert "least squares of 4 means per x" in text
    assert "share one start" in text
    saved = json.loads(finetune_compare.to_json(parsed, [], 0.05, [(_, trend)]))
    assert saved["trends"][0]["unit"] == "means per x"


def test_the_table_says_what_a_scratch_rows_spread_holds(tmp_path):
    """init=scratch draws every weight per seed: its spread is not fine-tuning noise only."""
    a = write_workdir(tmp_path / "a", {1e-3: [70.0, 71.0, 69.0]})
    s = write_workdir(tmp_path / "s", {1e-3: [68.0, 70.5, 69.0]},
                      init="scratch: architecture and tokenizer of runs/x@1")
    both = finetune_compare.parse_rows([f"a={a}", f"s={s}"])
    assert [r.from_scratch for r in both] == [False, True]
    assert "From scratch (s): each seed draws its own weights" in finetune_compare.render(
        both, [], 0.05)
    assert "One start per row, so the spread is fine-tuning noise only." in (
        finetune_compare.render(both[:1], [], 0.05))


def test_metric_scores_every_run_by_that_dev_metric_mean_over_splits(tmp_path):
    """--metric accuracy: MRPC's runs scored by accuracy (its main metric is F1, whose
    always-"paraphrase" floor is 81), the best learning rate chosen by it too; a metric a
    run lacks is one error naming its result.json."""
    def workdir(path, runs, task="MRPC"):
        write_workdir(path, {})
        for lr, per_seed in runs.items():
            for seed, dev in enumerate(per_seed):
                run_dir = os.path.join(path, task, results.run_name(lr, seed))
                os.makedirs(run_dir)
                main = np.mean([v["f1"] for v in dev.values()])
                results.RunResult(task, lr, seed, 10, dev, main, 0.1).write(run_dir)
        return str(path)

    def mrpc(f1, accuracy):
        return {"dev": {"f1": f1, "accuracy": accuracy}}

    # Near the floor at 5e-5 (high F1, low accuracy), learning at 2e-4.
    a = workdir(tmp_path / "a", {5e-5: [mrpc(82.0, 70.0), mrpc(81.5, 69.0), mrpc(81.9, 70.5)],
                                 2e-4: [mrpc(80.0, 75.0), mrpc(81.0, 76.0), mrpc(80.5, 77.0)]})
    b = workdir(tmp_path / "b", {5e-5: [mrpc(81.0, 68.0), mrpc(81.2, 68.5), mrpc(81.1, 68.2)],
                                 2e-4: [mrpc(84.0, 79.0), mrpc(85.0, 80.5), mrpc(84.5, 80.0)]})
    by_f1 = finetune_compare.parse_rows([f"a={a}", f"b={b}"])
    assert by_f1[0].best_lr("MRPC") == 5e-5 and by_f1[0].metric == ""
    by_accuracy = finetune_compare.parse_rows([f"a={a}", f"b={b}"], "accuracy")
    assert [r.best_lr("MRPC") for r in by_accuracy] == [2e-4, 2e-4]
    assert by_accuracy[0].at_best("MRPC") == {0: 75.0, 1: 76.0, 2: 77.0}
    test, = finetune_compare.run_tests(by_accuracy, [("a", "b")])
    assert test.diff == pytest.approx(np.mean([4.0, 4.5, 3.0]))
    assert test.metric.name == "MRPC dev accuracy"
    text = finetune_compare.render(by_accuracy, [test], 0.05)
    assert "| MRPC dev accuracy (best lr) |" in text
    saved = json.loads(finetune_compare.to_json(by_accuracy, [test], 0.05))
    assert saved["metric"] == "accuracy"
    # MNLI-style runs with two dev splits: the metric's mean over both.
    m = workdir(tmp_path / "m", {1e-4: [{"m": {"f1": 1.0, "accuracy": 80.0},
                                         "mm": {"f1": 1.0, "accuracy": 82.0}}] * 2},
                task="MNLI")
    assert finetune_compare.read_row("m", m, "accuracy").scores["MNLI"][1e-4] == {
        0: 81.0, 1: 81.0}
    with pytest.raises(ValueError, match=r"--metric mcc: .*MRPC/lr[^/]*_seed0/result.json has "
                                         r"no dev mcc \(it has accuracy, f1\)"):
        finetune_compare.parse_rows([f"a={a}"], "mcc")


def test_a_row_read_back_from_its_table_pairs_as_its_workdir_does(tmp_path):
    """A row fine-tuned on a machine whose workdirs are gone is read from the table.json it
    landed in: the same scores, protocol and model, so the same best rate and the same test
    against a row read from its workdir; one row alone lands as a table of no test."""
    a = write_workdir(tmp_path / "a", {5e-5: [80.0, 81.0, 82.0], 2e-4: [79.0, 83.0, 84.0]})
    b = write_workdir(tmp_path / "b", {5e-5: [81.0, 82.0, 82.5]},
                      model=MODEL.replace(attention="talking_heads", num_heads=8))
    alone = finetune_compare.parse_rows([f"a={a}"])
    table = tmp_path / "landed" / "table.json"
    table.parent.mkdir()
    table.write_text(finetune_compare.to_json(alone, [], 0.05))
    assert "No test: one row" in finetune_compare.render(alone, [], 0.05)

    from_workdirs = finetune_compare.parse_rows([f"a={a}", f"b={b}"])
    landed = finetune_compare.parse_rows([f"a={table}", f"b={b}"])
    assert landed[0].scores == from_workdirs[0].scores and landed[0].landed_in == str(table)
    assert (landed[0].model, landed[0].protocol, landed[0].source) == (
        from_workdirs[0].model, from_workdirs[0].protocol, from_workdirs[0].source)
    assert landed[0].best_lr("SST-2") == 2e-4
    again, first = (finetune_compare.run_tests(rows, [("a", "b")])[0]
                    for rows in (landed, from_workdirs))
    assert (again.diff, again.p_t, again.cost_a) == (first.diff, first.p_t, first.cost_a)
    assert json.loads(finetune_compare.to_json(landed, [again], 0.05))["rows"][0][
        "landed_in"] == str(table)

    with pytest.raises(ValueError, match=r"--row x=.*table.json: no row x there \(it has a\)"):
        finetune_compare.read_row("x", str(table))
    with pytest.raises(ValueError, match=r"table.json: scored by main, not accuracy"):
        finetune_compare.read_row("a", str(table), "accuracy")
    damaged = json.loads(table.read_text())
    damaged["rows"][0]["scores"]["SST-2"] = {"5e-05": {"zero": 80.0}}
    table.write_text(json.dumps(damaged))
    with pytest.raises(ValueError, match=r"table.json: row a is damaged \(ValueError: "):
        finetune_compare.read_row("a", str(table))
    old = json.loads(table.read_text())
    del old["rows"][0]["model"], old["metric"]  # as the tables of parts 4-7 were written
    table.write_text(json.dumps(old))
    with pytest.raises(ValueError, match=r"its rows have no model .*: give the workdir"):
        finetune_compare.read_row("a", str(table))
    table.write_text("{")
    with pytest.raises(ValueError, match=r"not a table.json of scripts/compare_finetuning.py "
                                         r"\(JSONDecodeError"):
        finetune_compare.read_row("a", str(table))


def test_a_change_since_a_landed_study_is_welch_on_each_sides_per_seed_differences(tmp_path):
    """--change A:B@TABLE: B - A per fine-tuning seed at each row's best rate in its own
    study, here against there, Welch's t (the studies share no checkpoint), Holm over the
    change tests; a table landed before rows carried their model still serves."""
    there_scores = {  # 5 seeds; h8's best rate differs from here's
        "h8": {1e-3: [80.0, 81.0, 79.5, 80.5, 81.5], 3e-3: [70.0, 71.0, 72.0, 70.0, 71.0]},
        "h96": {1e-3: [79.0, 80.5, 79.0, 79.5, 80.0]},
        "h48": {1e-3: [80.2, 80.8, 79.9, 80.4, 81.6]}}
    here_scores = {  # 10 seeds
        "h8": {1e-3: [83.0, 82.0, 84.0, 83.5, 82.5, 83.0, 84.5, 82.0, 83.0, 83.5],
               3e-3: [84.0, 85.0, 83.0, 84.5, 86.0, 85.5, 84.0, 85.0, 84.5, 85.0]},
        "h96": {1e-3: [80.0, 81.0, 79.0, 80.5, 82.0, 80.0, 81.5, 79.5, 80.0, 81.0]},
        "h48": {1e-3: [84.1, 85.2, 83.0, 84.4, 86.3, 85.4, 84.1, 84.9, 84.6, 85.2]}}
    there_rows = finetune_compare.parse_rows(
        [f"{n}={write_workdir(tmp_path / 'there' / n, s, num_epochs=3.0)}"
         for n, s in there_scores.items()])
    table = tmp_path / "there.json"
    landed = json.loads(finetune_compare.to_json(there_rows, [], 0.05))
    for row in landed["rows"]:
        del row["model"]  # as part 7's table was written
    table.write_text(json.dumps(landed))
    rows = finetune_compare.parse_rows([f"{n}={write_workdir(tmp_path / 'here' / n, s)}"
                                        for n, s in here_scores.items()])
    names = {r.name for r in rows}

    changes = finetune_compare.change_tests(
        rows, finetune_compare.parse_change([f"h8:h96@{table}", f"h8:h48@{table}"], names))
    assert [(c.change.a, c.change.b, c.task) for c in changes] == [("h8", "h96", "SST-2"),
                                                                   ("h8", "h48", "SST-2")]
    for change, b in zip(changes, ("h96", "h48"), strict=True):
        here = np.subtract(here_scores[b][1e-3], here_scores["h8"][3e-3])  # best: 3e-3
        there = np.subtract(there_scores[b][1e-3], there_scores["h8"][1e-3])  # best: 1e-3
        assert change.here == pytest.approx(here) and change.there == pytest.approx(there)
        assert change.p == pytest.approx(scipy.stats.ttest_ind(here, there,
                                                               equal_var=False).pvalue)
        # Welch's interval by hand: Welch-Satterthwaite degrees of freedom.
        va, vb = here.var(ddof=1) / 10, there.var(ddof=1) / 5
        df = (va + vb) ** 2 / (va ** 2 / 9 + vb ** 2 / 4)
        half = scipy.stats.t.ppf(0.975, df) * np.sqrt(va + vb)
        diff = here.mean() - there.mean()
        assert (change.diff, change.df) == pytest.approx((diff, df))
        assert change.ci == pytest.approx((diff - half, diff + half))
    # Both rows' grids are the same as there; the epochs are not.
    assert [c.protocol_changes for c in changes] == [("num_epochs",)] * 2
    low, high = sorted(changes, key=lambda c: c.p)
    assert low.p_holm == pytest.approx(min(1, 2 * low.p))
    assert high.p_holm == pytest.approx(max(low.p_holm, high.p))
    by_b = {c.change.b: c for c in changes}
    assert by_b["h96"].verdict(0.05) == "changed (−)"  # −4.2 here against −0.9 there
    assert by_b["h48"].verdict(0.05) == "not settled"  # about 0 on both sides

    text = finetune_compare.render(rows, finetune_compare.run_tests(rows, [("h8", "h96")]),
                                   0.05, changes=changes)
    assert f"Change (SST-2 dev): h96 − h8 here minus h96 − h8 in {table} = " in text
    assert "Holm over 2 change tests" in text and "differs in num_epochs" in text
    written = json.loads(finetune_compare.to_json(rows, [], 0.05, changes=changes))
    assert [c["verdict"] for c in written["changes"]] == ["changed (−)", "not settled"]
    assert "changes" not in json.loads(finetune_compare.to_json(rows, [], 0.05))

    # Landed rows named otherwise (a row read back as mh_h8_seed1 against part 7's mh_h8)
    # give the same test; the landed side's grid is compared too.
    renamed = finetune_compare.change_tests(
        rows, finetune_compare.parse_change([f"h48:h96@{table}=h8:h96"], names))
    assert renamed[0].there == pytest.approx(changes[0].there)
    assert renamed[0].here == pytest.approx(np.subtract(here_scores["h96"][1e-3],
                                                        here_scores["h48"][1e-3]))
    assert renamed[0].protocol_changes == ("num_epochs", "h48's SST-2 learning-rate grid")
    assert f"h96 − h48 here minus h96 − h8 in {table}" in finetune_compare.change_markdown(
        renamed, 0.05)


def test_a_change_that_cannot_be_tested_says_why_and_bad_specs_are_errors(tmp_path):
    constant = {1e-3: [80.0, 81.0, 82.0]}
    shifted = {1e-3: [81.0, 82.0, 83.0]}  # +1.0 at every seed, on both sides
    spread = {1e-3: [81.5, 81.0, 84.0]}
    rows = finetune_compare.parse_rows([f"{n}={write_workdir(tmp_path / n, scores)}" for n, scores
                                        in (("a", constant), ("b", shifted), ("c", spread))])
    table = tmp_path / "landed.json"
    landed = json.loads(finetune_compare.to_json(rows, [], 0.05))
    table.write_text(json.dumps(landed))
    change, = finetune_compare.change_tests(
        rows, finetune_compare.parse_change([f"a:b@{table}"], {"a", "b"}))
    # Without spread on either side Welch's p would be 0 at any n: no test.
    assert change == (f"a:b@{table} on SST-2: needs two or more paired seeds on each side "
                      f"and spread within them (3 here, 3 there)")
    assert finetune_compare.change_markdown([change], 0.05).startswith("Change: not tested:")

    for spec, message in [
            ("a:b", r"use A:B@TABLE.json, or A:B@TABLE.json=A0:B0"),
            (f"a:b@{table}=a", r"use A:B@TABLE.json, or A:B@TABLE.json=A0:B0"),
            (f"a:c@{table}", r"A and B must be two rows of the table"),
    ]:
        with pytest.raises(ValueError, match=message):
            finetune_compare.parse_change([spec], {"a", "b"})
    with pytest.raises(ValueError, match=r"this pair against this table is given twice"):
        finetune_compare.parse_change([f"a:b@{table}", f"b:a@{table}"], {"a", "b"})

    del landed["rows"][0]["protocol"]
    landed["rows"][1]["scores"]["SST-2"] = {}
    table.write_text(json.dumps(landed))
    with pytest.raises(ValueError, match=rf"--change a:b@{table}: row b is damaged "
                                         r"\(ValueError: a task or learning rate without"):
        finetune_compare.change_tests(rows, [finetune_compare.Change("a", "b", str(table),
                                                                     "a", "b")])
    unknown, = finetune_compare.change_tests(
        rows, [finetune_compare.Change("a", "c", str(table), "a", "c")])
    assert unknown.protocol_changes == (
        "the fine-tuning protocol (the landed table does not record it)",)
