"""scripts/across_seeds.py: one fine-tuning table per pretraining seed, matched by row name
without the seed's suffix; an architecture verdict only when every seed settles the same
way (docs/RESULTS.md part 10's declared rule)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from test_finetune_compare import MODEL, ROOT, write_workdir

from analysis import across_seeds, finetune_compare

BASE = [80.0, 81.0, 82.0, 80.5, 81.5, 80.2, 81.1, 82.3, 80.9, 81.7]
CLEARLY_BETTER = [v + 3 + 0.1 * (i % 3) for i, v in enumerate(BASE)]
UNSETTLED = [v + (2.0 if i % 2 else -1.6) for i, v in enumerate(BASE)]  # mean +0.2, wide
CLEARLY_WORSE = [v - 3 - 0.1 * (i % 3) for i, v in enumerate(BASE)]
WITHIN_A_TENTH = [v + (0.2 if i % 2 else -0.2) for i, v in enumerate(BASE)]  # mean 0, ±0.15


def write_table(tmp_path, seed: int, th_scores: dict[str, list[float]]) -> str:
    """compare_finetuning.py's table.json for one pretraining seed: mh against each
    talking-heads row, rows named as scripts/head_count_study.sh names them."""
    suffix = f"_seed{seed}" if seed else ""
    specs = [f"mh_h48{suffix}=" + write_workdir(tmp_path / f"s{seed}_mh", {1e-3: BASE})]
    for name, scores in th_scores.items():
        specs.append(f"{name}_h48{suffix}=" + write_workdir(
            tmp_path / f"s{seed}_{name}", {1e-3: scores},
            model=MODEL.replace(attention="talking_heads")))
    rows = finetune_compare.parse_rows(specs)
    tests = finetune_compare.run_tests(rows, [(rows[0].name, r.name) for r in rows[1:]])
    path = tmp_path / f"table_seed{seed}.json"
    path.write_text(finetune_compare.to_json(rows, tests, 0.05))
    return str(path)


def test_the_rule_over_two_pretraining_seeds(tmp_path):
    seed0 = write_table(tmp_path, 0, {"identity": CLEARLY_BETTER, "fan_in": CLEARLY_BETTER,
                                      "ref": CLEARLY_BETTER, "none": UNSETTLED,
                                      "same": WITHIN_A_TENTH, "half": WITHIN_A_TENTH})
    seed1 = write_table(tmp_path, 1, {"identity": CLEARLY_BETTER, "fan_in": UNSETTLED,
                                      "ref": CLEARLY_WORSE, "none": UNSETTLED,
                                      "same": WITHIN_A_TENTH, "half": CLEARLY_BETTER})
    found = across_seeds.comparisons({0: seed0, 1: seed1})
    outcome = {c.b: c.outcome([0, 1]) for c in found}
    assert [(c.a, c.task) for c in found] == [("mh_h48", "SST-2")] * 6
    assert outcome == {
        "identity_h48": "identity_h48 better at every pretraining seed (2): an architecture "
                        "verdict",
        "fan_in_h48": "fan_in_h48 better at pretraining seed 0 only, not settled at 1: no "
                      "architecture verdict",
        "ref_h48": "different verdicts across pretraining seeds (seed 0: ref_h48 better; "
                   "seed 1: mh_h48 better): no architecture verdict",
        "none_h48": "not settled at any pretraining seed: no architecture verdict",
        "same_h48": "equivalent at every pretraining seed (2): an architecture verdict",
        "half_h48": "different verdicts across pretraining seeds (seed 0: equivalent; seed 1: "
                    "half_h48 better): no architecture verdict",
    }
    # Each seed's cell is its own table's test, not a new one.
    seed1_tests = {t["b"]: t for t in json.loads(open(seed1).read())["tests"]}
    identity = next(c for c in found if c.b == "identity_h48")
    assert identity.by_seed[1].p_holm == seed1_tests["identity_h48_seed1"]["p_holm"]
    assert identity.by_seed[1].n == 10
    # One table: a pair of checkpoints, never an architecture.
    (one,) = [c for c in across_seeds.comparisons({0: seed0}) if c.b == "identity_h48"]
    assert one.outcome([0]) == "one pretraining seed: no architecture verdict"


def test_a_comparison_missing_at_one_seed_gets_no_verdict(tmp_path):
    seed0 = write_table(tmp_path, 0, {"identity": CLEARLY_BETTER, "fan_in": CLEARLY_BETTER})
    seed1 = write_table(tmp_path, 1, {"identity": CLEARLY_BETTER})
    (fan_in,) = [c for c in across_seeds.comparisons({0: seed0, 1: seed1})
                 if c.b == "fan_in_h48"]
    assert fan_in.outcome([0, 1]) == ("not run at pretraining seed 1: no architecture "
                                      "verdict")


@pytest.mark.parametrize("row, name", [("mh_h48_seed1", "mh_h48"),
                                       ("mh_h48_pre3e-4_seed12_steps4640",
                                        "mh_h48_pre3e-4_steps4640"),
                                       ("mh_h48_seedless", "mh_h48_seedless")])
def test_the_seed_suffix_is_removed_wherever_it_sits(row, name):
    assert across_seeds.architecture_name(row) == name


@pytest.mark.slow  # a script in a subprocess
def test_the_script_writes_both_files_or_one_error_line(tmp_path):
    seed0 = write_table(tmp_path, 0, {"identity": CLEARLY_BETTER})
    seed1 = write_table(tmp_path, 1, {"identity": CLEARLY_BETTER})
    script = [sys.executable, os.path.join(ROOT, "scripts", "across_seeds.py")]
    out = tmp_path / "out"
    done = subprocess.run(script + [f"--table=0={seed0}", f"--table=1={seed1}",
                                    f"--out={out}"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    landed = json.loads((out / "across_seeds.json").read_text())
    (comparison,) = landed["comparisons"]
    assert comparison["across_seeds"].startswith("identity_h48 better at every")
    assert comparison["cost"]["flops_per_token"][1] > comparison["cost"]["flops_per_token"][0]
    assert "identity_h48 better at every" in (out / "across_seeds.md").read_text()

    broken = tmp_path / "broken.json"
    broken.write_text('{"rows": []')
    bad_out = tmp_path / "bad_out"
    bad = subprocess.run(script + [f"--table=0={seed0}", f"--table=1={broken}",
                                   f"--out={bad_out}"], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 1
    (line,) = bad.stderr.strip().splitlines()
    assert line.startswith(f"error: {broken}: not a table.json of scripts/compare_finetuning.py")
    assert not bad_out.exists()
