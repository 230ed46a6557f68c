"""scripts/tables.py on fabricated finished runs: mean ± std over pretraining or
fine-tuning seeds, paired tests and bootstrap intervals between variants, CSV, plots.
(tables.py over a real sweep: test_sweep.py.)"""

from __future__ import annotations

import csv
import json
import math
import os

import numpy as np
import pytest
import scipy.stats
from helpers import run_script

import glue
import squad
from configs import pretrain as pretrain_configs
from training import results

pytestmark = pytest.mark.slow  # every test starts scripts/tables.py


def write_json(path, value) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(value, f)


def fake_run(run_dir, arg: str, seed: int, eval_loss: float,
             glue_scores: dict[str, dict[float, dict[int, float]]]) -> None:
    """A finished run in the formats training/pretrain.py and finetuning/ write.

    glue_scores: task -> learning rate -> {fine-tuning seed: main dev score}.
    """
    pretrain = os.path.join(run_dir, "pretrain")
    config = pretrain_configs.get_config(arg)
    config.model.vocab_size = 200  # train.py stores the tokenizer's size
    config.seed = seed
    write_json(os.path.join(pretrain, "config.json"), config.to_dict())
    write_json(os.path.join(pretrain, "final_metrics.json"),
               {"step": 40, "eval_loss": eval_loss, "eval_accuracy": 0.3,
                "eval_perplexity": math.exp(eval_loss)})
    from tensorboardX import SummaryWriter

    writer = SummaryWriter(pretrain)
    for step in (10, 20, 30, 40):
        writer.add_scalar("loss", eval_loss + 4.0 / step, step)
        writer.add_scalar("eval_loss", eval_loss + 2.0 / step, step)
    writer.close()
    for name, by_lr in glue_scores.items():
        task = squad.TASK if name == "squad" else glue.get_task(name)
        runs = [results.RunResult(
                    task=task.name, learning_rate=lr, seed=s, steps=10,
                    # SQuAD: EM 8 points below F1
                    dev={split: {m: v - 8 * (m == "exact_match") for m in task.metric_names}
                         for split in task.dev_splits},
                    main=v, final_train_loss=0.5)
                for lr, scores in by_lr.items() for s, v in scores.items()]
        write_json(os.path.join(run_dir, "glue", task.name, "results.json"),
                   {"init": f"{pretrain}@40", "skipped": {},
                    "tasks": {task.name: results.TaskSummary.from_runs(task, runs).to_json()}})


def read_csv(path) -> list[dict[str, str]]:
    with open(path) as f:
        return list(csv.DictReader(f))


def test_tables_over_pretraining_seeds_with_paired_tests_and_plots(tmp_path):
    out = tmp_path / "sweep"
    rng = np.random.default_rng(0)
    rows = ["th_cpu_mh_h4", "th_cpu_th_h4", "th_cpu_mh_h8", "th_cpu_th_h8"]
    best: dict[tuple[str, str], list[float]] = {}  # (row, task) -> per pretraining seed
    losses: dict[str, list[float]] = {}
    for i, row in enumerate(rows):
        for seed in (0, 1, 2):
            scores = {}
            for task in ("sst2", "rte"):
                good = {s: float(80 + i + rng.normal(0, 1)) for s in range(3)}
                worse = {s: v - 10.0 for s, v in good.items()}  # never the best learning rate
                scores[task] = {2e-5: worse, 3e-5: good}
                best.setdefault((row, task), []).append(float(np.mean(list(good.values()))))
            loss = 3.0 - 0.1 * i + 0.01 * seed
            losses.setdefault(row, []).append(loss)
            fake_run(out / row / f"seed{seed}", f"row={row}", seed, loss, scores)

    plots = tmp_path / "plots"
    result = run_script("tables.py", [f"--out={out}", "--grid=talking_heads_cpu",
                                      "--format=md,csv", f"--plots={plots}"])
    assert result.returncode == 0, result.stderr
    markdown = (out / "table.md").read_text()
    assert result.stdout.startswith(markdown)  # printed as well
    line = next(x for x in markdown.splitlines() if x.startswith("| th_cpu_th_h4 |"))
    sst2 = best[("th_cpu_th_h4", "sst2")]
    assert f"| {np.mean(sst2):.1f} ± {np.std(sst2, ddof=1):.1f} |" in line
    assert "| 3×3 |" in line  # 3 pretraining x 3 fine-tuning seeds
    assert "| th_cpu_mh_h16 |" in markdown  # a grid row without runs is listed, empty

    table = {r["row"]: r for r in read_csv(out / "table.csv")}
    got = table["th_cpu_th_h4"]
    assert float(got["SST-2 mean"]) == pytest.approx(np.mean(sst2))
    assert float(got["SST-2 std"]) == pytest.approx(np.std(sst2, ddof=1))
    assert got["SST-2 over"] == "pretraining seeds" and got["SST-2 n"] == "3"
    average = np.mean([best[("th_cpu_th_h4", "sst2")], best[("th_cpu_th_h4", "rte")]], axis=0)
    assert float(got["Avg (2 tasks) mean"]) == pytest.approx(np.mean(average))
    assert float(got["MLM loss mean"]) == pytest.approx(np.mean(losses["th_cpu_th_h4"]))
    assert int(got["num_heads"]) == 4 and int(got["key_size"]) == 64

    # Pairs: multi-head vs talking-heads at the same head count, by pretraining seed id.
    tests = {(t["a"], t["b"], t["metric"]): t for t in read_csv(out / "significance.csv")}
    assert {(a, b) for a, b, _ in tests} == {("th_cpu_mh_h4", "th_cpu_th_h4"),
                                             ("th_cpu_mh_h8", "th_cpu_th_h8")}
    t = tests[("th_cpu_mh_h8", "th_cpu_th_h8", "SST-2")]
    a, b = best[("th_cpu_mh_h8", "sst2")], best[("th_cpu_th_h8", "sst2")]
    assert t["paired_over"] == "pretraining seeds" and t["seeds"] == "0 1 2"
    assert float(t["p_ttest_rel"]) == pytest.approx(scipy.stats.ttest_rel(b, a).pvalue)
    assert float(t["p_wilcoxon"]) == pytest.approx(scipy.stats.wilcoxon(b, a).pvalue)
    assert float(t["mean_diff_b_minus_a"]) == pytest.approx(np.mean(np.subtract(b, a)))
    d = np.subtract(b, a)  # the 95% paired t interval, from scipy
    low, high = scipy.stats.t.interval(0.95, len(d) - 1, loc=d.mean(), scale=scipy.stats.sem(d))
    assert (float(t["ci_low"]), float(t["ci_high"])) == (pytest.approx(low), pytest.approx(high))
    # Holm over the table's family: every metric of both pairs (MLM loss and accuracy,
    # SST-2, RTE, the average), the smallest p times the family size, at most 1.
    family = [x for x in read_csv(out / "significance.csv")
              if not math.isnan(float(x["p_ttest_rel"] or "nan"))]  # nan: no p, not counted
    smallest = min(family, key=lambda x: float(x["p_ttest_rel"]))
    assert float(smallest["p_holm"]) == pytest.approx(
        min(1.0, len(family) * float(smallest["p_ttest_rel"])))
    assert all(float(x["p_holm"]) >= float(x["p_ttest_rel"]) for x in family)
    assert len(family) >= 5
    assert t["params_a"] and float(t["flops_per_token_b"]) > float(t["flops_per_token_a"])
    loss = tests[("th_cpu_mh_h4", "th_cpu_th_h4", "MLM loss")]  # 0.1 lower for every seed
    assert float(loss["mean_diff_b_minus_a"]) == pytest.approx(-0.1)

    for name in ("score_vs_heads.png", "mlm_loss_curves.png"):
        assert (plots / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_tables_with_one_pretraining_seed_pair_fine_tuning_seeds_by_id(tmp_path):
    out = tmp_path / "sweep"
    a = {0: 70.0, 1: 71.0, 2: 90.0, 3: 72.5}
    b = {0: 75.0, 1: 77.0, 3: 76.0}  # fine-tuning seed 2 missing: pairs are seeds 0, 1, 3
    fake_run(out / "base", "size=micro", 0, 3.0, {"sst2": {2e-5: a}})
    fake_run(out / "big_key", "size=micro,key_size=64", 0, 2.9, {"sst2": {2e-5: b}})

    result = run_script("tables.py", [f"--out={out}", "--format=csv", "--pairs=base:big_key"])
    assert result.returncode == 0, result.stderr
    assert not (out / "table.md").exists()  # csv only
    line = next(x for x in result.stdout.splitlines() if x.startswith("| base |"))
    values = list(a.values())
    assert f"| {np.mean(values):.1f} ± {np.std(values, ddof=1):.1f} |" in line
    assert "| 1×4 |" in line

    (t,) = [t for t in read_csv(out / "significance.csv") if t["metric"] == "SST-2"]
    assert t["paired_over"] == "fine-tuning seeds (pretraining seed 0)"
    assert t["seeds"] == "0 1 3"
    pa, pb = [a[s] for s in (0, 1, 3)], [b[s] for s in (0, 1, 3)]
    assert float(t["p_ttest_rel"]) == pytest.approx(scipy.stats.ttest_rel(pb, pa).pvalue)
    # One test in the family: Holm leaves its p; n = 3: no bootstrap interval.
    assert float(t["p_holm"]) == pytest.approx(scipy.stats.ttest_rel(pb, pa).pvalue)
    assert t["bootstrap_low"] == t["bootstrap_high"] == ""
    assert t["verdict"] == ("big_key better" if scipy.stats.ttest_rel(pb, pa).pvalue < 0.05
                            else "not settled")


def test_steps_to_a_level_from_the_eval_curves_with_paired_tests(tmp_path):
    """--steps_to eval_accuracy>=0.99: the first eval step at the level, per seed; a seed
    that never gets there is left out (n), and pairs compare the seeds both reached."""
    from tensorboardX import SummaryWriter

    out = tmp_path / "sweep"
    reach = {"th_cpu_mh_h4": {0: 300, 1: 500, 2: None}, "th_cpu_th_h4": {0: 200, 1: 300, 2: 400},
             # The same difference on every seed: no variance, so no t-test certainty.
             "th_cpu_mh_h8": {0: 300, 1: 300, 2: 300}, "th_cpu_th_h8": {0: 200, 1: 200, 2: 200}}
    for row, by_seed in reach.items():
        for seed, step in by_seed.items():
            run = out / row / f"seed{seed}"
            fake_run(run, f"row={row}", seed, 3.0, {})
            writer = SummaryWriter(str(run / "pretrain"))
            for s in range(100, 700, 100):
                writer.add_scalar("eval_accuracy", 1.0 if step and s >= step else 0.5, s)
            writer.close()
    result = run_script("tables.py", [f"--out={out}", "--grid=talking_heads_cpu",
                                      "--steps_to=eval_accuracy>=0.99", "--format=md,csv"])
    assert result.returncode == 0, result.stderr
    table = {r["row"]: r for r in read_csv(out / "table.csv")}
    column = "steps to eval_accuracy>=0.99"
    assert float(table["th_cpu_th_h4"][f"{column} mean"]) == pytest.approx(300.0)
    assert table["th_cpu_mh_h4"][f"{column} n"] == "2"  # seed 2 never reached it
    assert float(table["th_cpu_mh_h4"][f"{column} mean"]) == pytest.approx(400.0)
    tests = {(t["a"], t["b"], t["metric"]): t for t in read_csv(out / "significance.csv")}
    t = tests[("th_cpu_mh_h4", "th_cpu_th_h4", column)]
    assert t["seeds"] == "0 1" and float(t["mean_diff_b_minus_a"]) == pytest.approx(-150.0)
    assert t["verdict"] == "not settled"  # -100 and -200: two seeds settle nothing
    same = tests[("th_cpu_mh_h8", "th_cpu_th_h8", column)]
    assert float(same["mean_diff_b_minus_a"]) == pytest.approx(-100.0)
    assert math.isnan(float(same["p_ttest_rel"] or "nan"))
    assert same["verdict"] == "not settled"
    assert "never reached it" in (out / "table.md").read_text()
    # Holm's family is the pairs with a p-value; the header counted the untestable ones.
    family = sum(not math.isnan(float(t["p_ttest_rel"] or "nan")) for t in tests.values())
    assert family < len(tests)
    assert f"Holm over {family})" in (out / "table.md").read_text()

    bad = run_script("tables.py", [f"--out={out}", "--steps_to=eval_accuracy=0.99"])
    assert bad.returncode != 0 and "--steps_to 'eval_accuracy=0.99'" in bad.stderr


def test_a_row_not_run_yet_counts_its_parameters_at_the_vocabulary_its_sweep_trained(tmp_path):
    """A row with no run yet has no config.json of its own: its parameters came from the
    config's requested vocabulary (8192), not the tokenizer's size the sweep's runs on the
    same corpus got, so a follow-up table showed its unrun rows at 10x the parameters of
    the same architecture run beside them (0.582M against 0.0621M)."""
    out = tmp_path / "sweep"
    for seed in (0, 1):  # 4 and 8 heads at width D, key = D/heads: the same parameters
        fake_run(out / "th_cpu_mh_h4" / f"seed{seed}", "row=th_cpu_mh_h4", seed, 3.0, {})
    result = run_script("tables.py", [f"--out={out}", "--grid=talking_heads_cpu",
                                      "--format=csv"])
    assert result.returncode == 0, result.stderr
    table = {r["row"]: r for r in read_csv(out / "table.csv")}
    assert table["th_cpu_mh_h8"]["pretrain_seeds"] == ""  # not run
    assert table["th_cpu_mh_h8"]["params"] == table["th_cpu_mh_h4"]["params"]


def test_a_grid_that_declares_its_pairs_is_tested_on_those(tmp_path):
    """classifier_question declares which rows answer which question (configs/grids.py:
    PAIRS); the default would pair every multi-head row with every talking-heads row
    (scratch with pretrained). --baseline still compares every row with one. A row
    fine-tuned from scratch shows no MLM numbers (they are its checkpoint's); rows at
    several fine-tuning learning rates get a score-vs-lr plot."""
    out = tmp_path / "sweep"
    rows = {"txt_mh_h8": 80.0, "txt_th_h8": 79.0, "cls_mh_scratch": 60.0,
            "cls_th_scratch": 58.0, "cls_mh_lr0.001": 82.0, "cls_mh_insert_th": 79.5}
    for i, (row, score) in enumerate(rows.items()):
        lr = 1e-3 if row.endswith("lr0.001") else 3e-4
        for seed in (0, 1):
            scores = {s: score + seed + 0.1 * s for s in range(2)}
            fake_run(out / row / f"seed{seed}", f"row={row}", seed, 3.0 + 0.01 * i,
                     {"sst2": {lr: scores}})

    args = [f"--out={out}", "--grid=classifier_question", "--format=csv"]
    result = run_script("tables.py", [*args, f"--plots={tmp_path / 'plots'}"])
    assert result.returncode == 0, result.stderr
    # multi-head pretrained at two fine-tuning learning rates: a line
    assert (tmp_path / "plots" / "score_vs_finetuning_lr.png").read_bytes()[:4] == b"\x89PNG"
    assert not (tmp_path / "plots" / "score_vs_heads.png").exists()  # 8 heads only
    pairs = {(t["a"], t["b"]) for t in read_csv(out / "significance.csv")}
    assert pairs == {("txt_mh_h8", "txt_th_h8"), ("cls_mh_scratch", "cls_th_scratch"),
                     ("txt_mh_h8", "cls_mh_insert_th"), ("txt_th_h8", "cls_mh_insert_th")}
    table = {r["row"]: r for r in read_csv(out / "table.csv")}
    # Talking heads inserted into the multi-head checkpoint: the fine-tuned model is talking
    # heads, and costs what talking heads cost (not what its checkpoint did).
    for key in ("attention", "params", "gflops_per_token"):
        assert table["cls_mh_insert_th"][key] == table["txt_th_h8"][key], key
    cost = {(t["a"], t["b"]): t for t in read_csv(out / "significance.csv")}
    inserted = cost[("txt_mh_h8", "cls_mh_insert_th")]
    assert float(inserted["flops_per_token_b"]) > float(inserted["flops_per_token_a"])
    assert table["txt_mh_h8"]["MLM loss mean"] == "3.0"
    # Fine-tuned from scratch: the checkpoint's MLM loss is not the row's.
    assert table["cls_mh_scratch"]["MLM loss mean"] == ""
    assert float(table["cls_mh_scratch"]["SST-2 mean"]) == pytest.approx(60.55)

    result = run_script("tables.py", [*args, "--baseline=txt_mh_h8"])
    assert result.returncode == 0, result.stderr
    tests = read_csv(out / "significance.csv")
    assert {(t["a"], t["b"]) for t in tests} == {("txt_mh_h8", b) for b in rows
                                                 if b != "txt_mh_h8"}
    # Rows fine-tuning txt_mh_h8's checkpoint share its MLM numbers: only SST-2 is tested.
    assert {t["metric"] for t in tests if t["b"] == "txt_th_h8"} == {"MLM loss", "MLM acc",
                                                                     "SST-2"}
    assert {t["metric"] for t in tests if t["b"] == "cls_mh_lr0.001"} == {"SST-2"}


def test_identity_mixing_rows_get_their_own_plot_line():
    """txt_th_identity_h8 is talking heads pretrained and fine-tuned at 3e-4, as txt_th_h8
    is: one line for both drew a vertical jump at 3e-4 and hid the identity row. The
    mixing init now names its own line, and any other row whose x its line already holds
    becomes its own point (named) rather than part of that line."""
    from analysis import plots, runs
    from configs import grids

    def result(name: str, lr: float) -> runs.RowResult:
        run = runs.SeedRun(0, "", "", None, {}, None, glue_lr=lr)
        r = runs.RowResult(grids.ROWS[name], [run])
        runs.add_model_stats(r, None, paper_vocab=False)
        return r

    rows = [result("txt_th_h8", 3e-4), result("cls_th_lr0.001", 1e-3),
            result("txt_th_identity_h8", 3e-4), result("txt_mh_h8", 3e-4)]
    lines = plots.plot_lines(rows, "lr")
    named = {label: sorted((x, r.row.name) for x, r in points) for label, points in lines.items()}
    assert named == {
        "talking_heads, pretrained": [(3e-4, "txt_th_h8"), (1e-3, "cls_th_lr0.001")],
        "talking_heads (identity mixing), pretrained": [(3e-4, "txt_th_identity_h8")],
        "multi_head, pretrained": [(3e-4, "txt_mh_h8")],
    }
    # A setting no label names: the second row at the same x is a point of its own.
    twin = result("txt_mh_h8", 3e-4)
    twin.row = grids.Row("txt_mh_h8_twin", twin.row.overrides)
    lines = plots.plot_lines([rows[3], twin], "lr")
    assert sorted(lines) == ["multi_head, pretrained", "multi_head, pretrained (txt_mh_h8_twin)"]


def test_out_that_is_not_a_sweep_gets_a_table_or_one_line_naming_the_layout(tmp_path):
    """--out as one row of a sweep makes that row's table; a pretraining workdir, a GLUE
    workdir, a folder of written tables or an empty folder get one error line that says
    what the folder is and what tables.py reads (each crashed with an IndexError)."""
    out = tmp_path / "sweep"
    fake_run(out / "th_cpu_mh_h4", "row=th_cpu_mh_h4", 0, 3.0,
             {"sst2": {3e-5: {0: 81.0, 1: 83.0}}})
    one_row = run_script("tables.py", [f"--out={out / 'th_cpu_mh_h4'}"])
    assert one_row.returncode == 0, one_row.stderr
    assert "| th_cpu_mh_h4 |" in one_row.stdout and "82.0 ± 1.4" in one_row.stdout
    assert f"wrote {out / 'th_cpu_mh_h4' / 'table.md'}" in one_row.stdout  # says where

    pretraining = tmp_path / "run"
    write_json(str(pretraining / "final_metrics.json"), {"step": 1})
    glue_workdir = tmp_path / "glue_workdir"
    write_json(str(glue_workdir / "results.json"), {"tasks": {}})
    written = tmp_path / "docs_results"
    written.mkdir()
    (written / "table.md").write_text("# a table\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    for folder, says in [(pretraining, "a pretraining workdir"),
                         (glue_workdir, "an eval_glue.py workdir"),
                         (written, "tables already written"), (empty, "no run")]:
        result = run_script("tables.py", [f"--out={folder}"])
        assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith(f"error: --out={folder}") and says in line, line
        assert "OUT/ROW/pretrain" in line  # the layout tables.py reads
        assert not (folder / "table.csv").exists()


def test_plots_label_their_units_keep_the_legend_off_the_data_and_end_scores_at_100(tmp_path):
    """The y axes had no label, the legend sat on the first panel's points, and an
    accuracy axis with error bars near the top ran past 100."""
    from analysis import plots, tables

    out = tmp_path / "sweep"
    for i, row in enumerate(["th_cpu_mh_h4", "th_cpu_th_h4", "th_cpu_mh_h8", "th_cpu_th_h8"]):
        for seed in (0, 1):
            fake_run(out / row / f"seed{seed}", f"row={row}", seed, 3.0 - 0.1 * i,
                     {"sst2": {3e-5: dict.fromkeys((0, 1), 99.9 - 6 * seed)},
                      "cola": {3e-5: {0: 40.0}}})
    table = tables.collect(str(out), "talking_heads_cpu")
    figure = plots.score_figure(table, "heads")
    panels = {ax.get_title(): ax for ax in figure.axes if ax.get_visible()}
    assert panels["MLM loss"].get_ylabel() == "MLM eval loss (nats per masked token)"
    assert panels["SST-2"].get_ylabel() == "dev accuracy (%)"
    assert panels["CoLA"].get_ylabel() == "dev mcc (x100)"
    assert panels["SST-2"].get_ylim()[1] == 100
    assert all(ax.get_legend() is None for ax in figure.axes)  # one legend, the figure's
    (legend,) = figure.legends
    assert sorted(t.get_text() for t in legend.get_texts()) == [
        "multi_head, key d/h", "talking_heads, key d/h"]
    legend_top = legend.get_window_extent().y1
    figure.canvas.draw()
    assert all(ax.get_window_extent().y0 >= legend_top - 1 for ax in panels.values())


def test_a_one_panel_score_plot_keeps_its_legend_inside_the_figure(tmp_path):
    """The classifier grid's SST-2-vs-learning-rate plot (one panel, seven long labels)
    drew its legend in three columns, twice the figure's width: the saved image cut the
    labels off at both sides."""
    from analysis import plots, tables
    from configs import grids

    out = tmp_path / "sweep"
    for i, row in enumerate(grids.GRIDS["classifier_question"]):
        lr = float(row.glue.get("lr", 3e-4))  # the study's --glue_args rate otherwise
        for seed in (0, 1):
            fake_run(out / row.name / f"seed{seed}", f"row={row.name}", seed, 3.0,
                     {"sst2": {lr: {0: 60.0 + i + seed}}})
    figure = plots.score_figure(tables.collect(str(out), "classifier_question"), "lr")
    figure.canvas.draw()
    (legend,) = figure.legends
    assert len(legend.get_texts()) == 7
    box = legend.get_window_extent()
    assert 0 <= box.x0 and box.x1 <= figure.bbox.width and box.y0 >= 0
    panel = next(ax for ax in figure.axes if ax.get_visible())
    assert panel.get_window_extent().y0 >= box.y1 - 1  # and still below the data


def test_holm_and_the_verdict_rule():
    """Holm's adjusted p-values for a worked example; equivalence only when the whole t
    interval lies inside the margin."""
    from analysis import runs, stats

    adjusted = stats.holm([0.01, 0.04, 0.03, 0.005, float("nan")])
    assert adjusted[:4] == pytest.approx([0.03, 0.06, 0.06, 0.02]) and math.isnan(adjusted[4])
    metric = runs.Metric("SST-2", "task", "SST-2")

    def verdict(va, vb, family=1):
        t = stats.paired_test(metric, "a", "b", "seeds", [0, 1, 2, 3], va, vb, 100)
        p = stats.holm([t.p_t] * family)[0]
        return stats.dataclasses.replace(t, p_holm=p).verdict("t", 0.05)

    assert verdict([70, 71, 72, 73], [72.1, 72.6, 74.5, 74.8]) == "b better"  # p = 0.002
    assert verdict([70, 71, 72, 73], [72.1, 72.6, 74.5, 74.8], family=50) == "not settled"
    assert verdict([70, 71, 72, 73], [70.1, 70.9, 72.2, 72.9]) == "equivalent (±0.5)"
    # The margin is the papers' effect size, 0.5 points: an interval inside ±1 but not
    # inside ±0.5 is not settled.
    assert verdict([70, 71, 72, 73], [70.7, 71, 72.4, 73.1]) == "not settled"  # [-0.2, 0.8]
    assert verdict([70, 71, 72, 73], [72, 69, 74, 71]) == "not settled"


def test_squad_stands_beside_mnli_with_the_papers_numbers_and_outside_the_average(tmp_path):
    """Table 2A's rows with MNLI and SQuAD results (sweep.py --glue_tasks mnli,squad):
    SQuAD F1 and EM columns, the paper's SQuAD F1 beside ours, MNLI's average alone."""
    out = tmp_path / "sweep"
    rng = np.random.default_rng(3)
    f1 = {}
    for row in ("lowrank_2a_h8", "lowrank_2a_h12"):
        for seed in (0, 1):
            scores = {task: {3e-5: {s: float(85 + rng.normal(0, 1)) for s in range(2)}}
                      for task in ("mnli", "squad")}
            f1.setdefault(row, []).append(float(np.mean(list(scores["squad"][3e-5].values()))))
            fake_run(out / row / f"seed{seed}", f"row={row}", seed, 3.0, scores)
    result = run_script("tables.py", [f"--out={out}", "--grid=lowrank_table2a",
                                      "--format=md,csv"])
    assert result.returncode == 0, result.stderr
    lines = (out / "table.md").read_text().splitlines()
    header = [c.strip() for c in next(x for x in lines if x.startswith("| row |")).split("|")]
    at = header.index("SQuAD F1")
    assert header[at + 1] == "SQuAD F1 (paper)" and "SQuAD EM" in header
    assert header[header.index("MNLI-m") + 1] == "MNLI (paper)"
    row = [c.strip() for c in next(x for x in lines if x.startswith("| lowrank_2a_h8 |"))
           .split("|")]
    mean, std = np.mean(f1["lowrank_2a_h8"]), np.std(f1["lowrank_2a_h8"], ddof=1)
    assert row[at] == f"{mean:.1f} ± {std:.1f}" and row[at + 1] == "89.6"  # the paper's
    assert row[header.index("SQuAD EM")] == f"{mean - 8:.1f} ± {std:.1f}"
    table = {r["row"]: r for r in read_csv(out / "table.csv")}
    assert "Avg (2 tasks) mean" in table["lowrank_2a_h8"]  # MNLI-m and -mm only
    assert "SQuAD F1 is not run here" not in "\n".join(lines)
