"""scripts/rejudge_significance.py: a written significance.csv tested again under the
current rule (paired t, Holm over the file), costs from the table.csv beside it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import scipy.stats

from analysis import stats

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADER = ("metric,a,b,paired_over,seeds,values_a,values_b,mean_diff_b_minus_a,ci_low,"
          "ci_high,p_ttest_rel,p_wilcoxon,verdict\n")


def test_an_old_table_is_judged_again_with_holm_and_costs(tmp_path):
    # An earlier tables.py's file: its own intervals and verdicts are ignored.
    (tmp_path / "significance.csv").write_text(HEADER + "\n".join([
        "SST-2,mh,th,pretraining seeds,0 1 2,74.1 74.6 74.0,72.9 72.7 72.8,"
        "-1.4,-1.8,-0.9,0.03,0.25,x",
        "MLM loss,mh,th,pretraining seeds,0 1 2,6.03 6.02 6.04,6.031 6.022 6.039,0,0,0,0.9,1,x",
        "steps to eval_accuracy>=0.99,mh,th,pretraining seeds,0 1 2 3 4,200 190 210 195 205,"
        "130 120 125 128 127,0,0,0,0,0,x"]) + "\n")
    (tmp_path / "table.csv").write_text("row,params,gflops_per_token\nmh,1000,0.002\n"
                                        "th,1100,0.003\n")
    sst2, loss, steps = stats.tests_from_csv(str(tmp_path / "significance.csv"))
    p = scipy.stats.ttest_rel([72.9, 72.7, 72.8], [74.1, 74.6, 74.0]).pvalue
    assert sst2.p_t == pytest.approx(p)
    ps = sorted([sst2.p_t, loss.p_t, steps.p_t])
    assert min(sst2.p_holm, loss.p_holm, steps.p_holm) == pytest.approx(3 * ps[0])
    assert steps.verdict("t", 0.05) == "th better"  # fewer steps is better
    assert loss.verdict("t", 0.05) == "equivalent (±0.02)"
    assert sst2.cost_a == (1000, 2e6) and sst2.cost_b == (1100, 3e6)


@pytest.mark.slow  # scripts in subprocesses
def test_a_damaged_file_is_one_error_line(tmp_path):
    path = tmp_path / "significance.csv"
    path.write_text(HEADER + "SST-2,mh,th,pretraining seeds,0 1,74.1 x,72.9 72.7,0,0,0,0,0,x\n")
    done = subprocess.run([sys.executable, os.path.join(ROOT, "scripts",
                                                         "rejudge_significance.py"), str(path)],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"error: {path}:2: not a significance.csv row (could not convert string to float: 'x')"]
