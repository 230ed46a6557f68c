"""Each row's best pretraining rate in a study's rate grid, and whether the grid brackets it.

The command line is scripts/rate_bracket.py.

A study pretrains one row (an architecture: a variant at a head count) at several
learning rates into sibling workdirs, e.g. scripts/head_count_study.sh's
pretrain_h48_nat_th_identity_lr3e-4. A row is a workdir name without pretrain_ and its
_lr<rate>, _seed<n> and _steps<n> parts, with head_count_study.sh's h{N}[_VARIANT] read as its
rows' VARIANT_h{N} (mh_h{N} for the multi-head pretraining h{N}), at one pretraining
seed and schedule length as config.json records them: a second seed or a longer
schedule is a row of its own. The rate itself is config.json's, not the name's.

A row's rate is picked by the final held-out MLM loss (final_metrics.json). A run that
stopped at a non-finite step (diverged.json, train.py's nonfinite=error) is finished
and the worst. The pick is trusted ("bracketed") only when every rate of the row has
finished and a lower and a higher rate both ended strictly worse: a best rate at the
grid's edge may be beaten outside it, and the next rate to add is the next point of
the half-decade grid (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, ...) beyond that edge. A finished
run's top-1 on the masked predictions (final_metrics.json's eval_accuracy) is printed
beside its loss, to read, not to pick by.

One pretraining seed per rate picks the rate by a point estimate: the pick says which
loss was lowest, not that the next one is reliably worse. The runner-up's gap is
printed beside the pick, and a gap under the tie margin (default 0.02 nats: twice the
seed-to-seed standard deviation of the eval loss measured at five pretraining seeds in
docs/RESULTS.md part 2, 0.007-0.015) is flagged as a tie.

A study's workdirs may be gone (a fresh clone, another machine) while its results file
is committed: the finished runs that file records stand in for the workdirs this study
lacks (with_landed), marked "landed"; a rerun that finishes replaces its landed run, and
one that ended more than REPEAT_NATS apart from it is reported.

Rates are printed in the spelling the study scripts name folders by (3e-4, 1e-2; 1e-3
is their default, a folder without an _lr part), so a printed rate given back as
PRE_LR finds or makes the folder a rerun will find again.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from collections.abc import Sequence
from typing import Any

from training import results

WORKDIR_PREFIX = "pretrain_"
DEFAULT_TIE_NATS = 0.02
REPEAT_NATS = 1e-4  # a rerun's final loss this far from the landed one's is reported
_SUFFIXES = re.compile(r"_lr[^_]+|_seed\d+|_steps\d+")
_HEAD_COUNT_STUDY = re.compile(r"h(\d+)(?:_(.+))?")


@dataclasses.dataclass(frozen=True)
class Pretraining:
    """One workdir of a rate grid, read from its files."""

    workdir: str
    row: str  # see the module's docstring
    learning_rate: float
    seed: int
    steps: int  # the schedule's length (config.num_train_steps)
    finished: bool  # reached its last step, or diverged
    last_step: int  # the newest checkpoint's step (steps when finished); 0 before any
    eval_loss: float | None  # final when finished, else the newest logged; None if none
    # or diverged
    diverged_at: int | None = None  # the first non-finite step (diverged.json)
    eval_accuracy: float | None = None  # final top-1 of the masked predictions, when the
    # run finished and recorded it
    landed_in: str | None = None  # the results file this finished run was read from (a
    # rate_bracket.py --json), standing in for a workdir this study lacks

    @property
    def diverged(self) -> bool:
        return self.finished and self.eval_loss is None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Bracket:
    """One row's rate grid at one seed and schedule, and its verdict."""

    row: str
    seed: int
    steps: int
    runs: list[Pretraining]  # by rate
    best: Pretraining | None  # the lowest final eval loss among the finished runs
    verdict: str  # bracketed | below_grid | above_grid | single_rate | incomplete |
    # no_finished_run
    next_rate: float | None  # the rate to add when the best sits at an edge
    runner_up_gap: float | None  # nats from the best to the next-lowest finished loss
    tie: bool  # that gap is under the tie margin

    def to_json(self) -> dict[str, Any]:
        return {"row": self.row, "seed": self.seed, "steps": self.steps,
                "verdict": self.verdict,
                "best_rate": None if self.best is None else self.best.learning_rate,
                "best_eval_loss": None if self.best is None else self.best.eval_loss,
                "next_rate": self.next_rate, "runner_up_gap": self.runner_up_gap,
                "tie": self.tie, "runs": [run.to_json() for run in self.runs]}


# -- rates -----------------------------------------------------------------------------------
def short_rate(rate: float) -> str:
    """The shortest exponent spelling: 3e-4, 1e-2, 2.5e-4."""
    mantissa, exponent = f"{rate:e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def rate_spelling(run: Pretraining) -> str:
    """The rate as the run's workdir name spells it (pretrain_..._lr3e-4: "3e-4"), so a
    study that names folders by the rate finds this one again; a name without an _lr
    part (a study's default rate) gets short_rate's, e.g. "1e-3"."""
    spelled = re.search(r"_lr([^_]+)", os.path.basename(os.path.normpath(run.workdir)))
    if spelled:
        try:
            if float(spelled.group(1)) == run.learning_rate:
                return spelled.group(1)
        except ValueError:
            pass
    return short_rate(run.learning_rate)


def half_decade_neighbour(rate: float, direction: int) -> float:
    """The nearest point of the grid ..., 1e-4, 3e-4, 1e-3, 3e-3, ... strictly below (-1)
    or above (+1) rate."""
    exponent = math.floor(math.log10(rate))
    points = [m * 10.0 ** e for e in range(exponent - 2, exponent + 3) for m in (1, 3)]
    if direction < 0:
        return float(short_rate(max(p for p in points if p < rate * (1 - 1e-9))))
    return float(short_rate(min(p for p in points if p > rate * (1 + 1e-9))))


# -- reading a study -------------------------------------------------------------------------
def row_name(workdir: str) -> str:
    name = os.path.basename(os.path.normpath(workdir))
    if name.startswith(WORKDIR_PREFIX):
        name = name[len(WORKDIR_PREFIX):]
    name = _SUFFIXES.sub("", name)
    study_row = _HEAD_COUNT_STUDY.fullmatch(name)
    if study_row:
        heads, variant = study_row.groups()
        return f"{variant or 'mh'}_h{heads}"
    return name


def newest_checkpoint(workdir: str) -> int:
    directory = os.path.join(workdir, results.CHECKPOINTS)
    if not os.path.isdir(directory):
        return 0
    return max((int(name) for name in os.listdir(directory) if name.isdigit()), default=0)


def read_pretraining(workdir: str) -> Pretraining:
    """A workdir's rate, seed, progress and eval loss; ValueError naming the workdir and
    file when its config is missing or has no learning rate."""
    config = results.read_run_config(workdir)
    if config is None:
        raise ValueError(f"{workdir}: no readable {results.RUN_CONFIG} (not a pretraining run?)")
    try:
        rate = float(config["optimizer"]["learning_rate"])
        steps = int(config["num_train_steps"])
        seed = int(config["seed"])
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{workdir}: {results.RUN_CONFIG} has no usable {e}") from None
    row = row_name(workdir)
    if results.PretrainTarget(workdir, steps).finished():
        # Read raw: a non-finite loss is recorded as null (worst), a run without an eval
        # split records no key (it cannot pick a rate).
        final = results.read_json(results.FinalMetrics.path(workdir))
        if "eval_loss" not in final:
            raise ValueError(f"{workdir}: {results.FINAL_METRICS} has no eval_loss (a run "
                             f"without an eval split cannot pick a rate)")
        loss = None if final["eval_loss"] is None else float(final["eval_loss"])
        accuracy = final.get("eval_accuracy")
        return Pretraining(workdir, row, rate, seed, steps, True, steps, loss,
                           eval_accuracy=None if accuracy is None else float(accuracy))
    try:
        diverged = results.Diverged.read(workdir)
    except results.ResultsError as e:
        raise ValueError(str(e)) from None
    if diverged is not None:
        return Pretraining(workdir, row, rate, seed, steps, True, newest_checkpoint(workdir),
                           None, diverged.step)
    from analysis.runs import scalar_curve

    curve = scalar_curve(workdir, "eval_loss")
    latest = curve[max(curve)] if curve else None
    return Pretraining(workdir, row, rate, seed, steps, False, newest_checkpoint(workdir),
                       latest)


def find_pretrainings(study: str, rows: list[str] | None = None,
                      required: bool = True) -> list[Pretraining]:
    """Every STUDY/pretrain_* workdir that has a config.json (a run that never started
    has none and is skipped); with rows, only theirs are read (another row's damaged
    workdir does not stop a question about these). required=False: a study not made yet
    has no runs (landed ones stand in for it), not an error."""
    if not os.path.isdir(study):
        if not required:
            return []
        raise ValueError(f"{study}: no such study directory")
    runs = []
    for name in sorted(os.listdir(study)):
        workdir = os.path.join(study, name)
        if (name.startswith(WORKDIR_PREFIX) and os.path.isdir(workdir)
                and os.path.exists(os.path.join(workdir, results.RUN_CONFIG))
                and (rows is None or row_name(workdir) in rows)):
            runs.append(read_pretraining(workdir))
    if not runs and rows is None and required:
        raise ValueError(f"{study}: no pretraining workdirs ({WORKDIR_PREFIX}*/"
                         f"{results.RUN_CONFIG})")
    return runs


# -- what landed before ---------------------------------------------------------------------
# The workdirs of a long study may not outlive the machine they ran on, while its results
# file (--json) is committed: a later landing, or a pick for a second seed, reads the
# finished runs the file records where the study no longer has them.
def landed_pretrainings(path: str, rows: list[str] | None = None) -> list[Pretraining]:
    """The finished runs a rate_bracket.py results file records (with rows, only theirs),
    each marked as read from it; a run still going when the file was written is left out
    (its workdir held the only truth about it). ValueError naming the file when it is
    missing or not such a file."""
    if not os.path.exists(path):
        raise ValueError(f"{path}: no such file")
    try:
        with open(path) as f:
            recorded = [run for row in json.load(f)["rows"] for run in row["runs"]]
        landed = [Pretraining(**dict(run, landed_in=run.get("landed_in") or path))
                  for run in recorded if run["finished"]]  # where it first landed
    except (OSError, ValueError, KeyError, TypeError) as e:  # JSONDecodeError is a ValueError
        raise ValueError(f"{path}: not a results file of scripts/rate_bracket.py "
                         f"({type(e).__name__}: {e})") from None
    return [run for run in landed if rows is None or run.row in rows]


def landed_reruns_differ(path: str) -> list[str]:
    """What an earlier landing into this results file found apart (with_landed's lines):
    once a rerun has landed it is the landed run, so the file keeps saying so."""
    with open(path) as f:
        return json.load(f).get("reruns_differ", [])


def _grid_point(run: Pretraining) -> tuple[str, int, int, float]:
    return run.row, run.seed, run.steps, run.learning_rate


def with_landed(runs: list[Pretraining], landed: list[Pretraining]
                ) -> tuple[list[Pretraining], list[str]]:
    """This study's runs, plus each landed run at a grid point (row, seed, schedule, rate)
    where the study has none or only an unfinished one (a rerun still going); a rerun
    that finished wins. The second value: a line per finished rerun whose final loss is
    more than REPEAT_NATS from the landed one's (the same config and seed are expected to
    repeat it)."""
    kept = {_grid_point(old): old for old in landed}  # a later file's run wins
    differ = []
    for new in runs:
        old = kept.get(_grid_point(new))
        if old is None or not new.finished:
            continue
        del kept[_grid_point(new)]
        if (new.eval_loss is None) != (old.eval_loss is None) or (
                new.eval_loss is not None and abs(new.eval_loss - old.eval_loss) > REPEAT_NATS):
            differ.append(f"{old.row} (seed {old.seed}, {old.steps} steps) at "
                          f"{short_rate(old.learning_rate)}: {new.workdir} ended at "
                          f"{_loss(new)}, the landed run at {_loss(old)} ({old.landed_in})")
    # An unfinished rerun gives way to the finished run it repeats; two workdirs of one
    # grid point are still judge()'s error.
    here = [run for run in runs if run.finished or _grid_point(run) not in kept]
    return here + list(kept.values()), differ


# -- verdicts --------------------------------------------------------------------------------
def _loss_or_inf(run: Pretraining) -> float:
    return math.inf if run.eval_loss is None else run.eval_loss


def judge(row: str, seed: int, steps: int, runs: list[Pretraining],
          tie_nats: float = DEFAULT_TIE_NATS) -> Bracket:
    runs = sorted(runs, key=lambda run: run.learning_rate)
    rates = [run.learning_rate for run in runs]
    if len(set(rates)) != len(rates):
        twice = sorted({r for r in rates if rates.count(r) > 1})
        raise ValueError(f"{row} (seed {seed}, {steps} steps): rate {short_rate(twice[0])} in "
                         f"two workdirs: " + ", ".join(run.workdir for run in runs
                                                       if run.learning_rate == twice[0]))
    done = [run for run in runs if run.finished]
    if not done:
        return Bracket(row, seed, steps, runs, None, "no_finished_run", None, None, False)
    best = min(done, key=_loss_or_inf)  # on equal losses, the lower rate
    others = sorted(_loss_or_inf(run) for run in done if run is not best)
    gap = None  # undefined beside a diverged best or runner-up
    if others and best.eval_loss is not None and not math.isinf(others[0]):
        gap = others[0] - best.eval_loss
    tie = gap is not None and gap < tie_nats
    if len(done) < len(runs):
        return Bracket(row, seed, steps, runs, best, "incomplete", None, gap, tie)
    if len(done) == 1:
        return Bracket(row, seed, steps, runs, best, "single_rate", None, gap, tie)
    worse = [run for run in done if _loss_or_inf(run) > _loss_or_inf(best)]
    if not any(run.learning_rate < best.learning_rate for run in worse):
        verdict, next_rate = "below_grid", half_decade_neighbour(done[0].learning_rate, -1)
    elif not any(run.learning_rate > best.learning_rate for run in worse):
        verdict, next_rate = "above_grid", half_decade_neighbour(done[-1].learning_rate, +1)
    else:
        verdict, next_rate = "bracketed", None
    return Bracket(row, seed, steps, runs, best, verdict, next_rate, gap, tie)


def brackets(runs: list[Pretraining], tie_nats: float = DEFAULT_TIE_NATS) -> list[Bracket]:
    groups: dict[tuple[str, int, int], list[Pretraining]] = {}
    for run in runs:
        groups.setdefault((run.row, run.seed, run.steps), []).append(run)
    return [judge(*key, members, tie_nats) for key, members in sorted(groups.items())]


def matching(found: list[Bracket], row: str, seed: int,
             steps: int | None = None) -> list[Bracket]:
    """A row's brackets at a seed (and schedule, when given): one per schedule."""
    return [b for b in found if b.row == row and b.seed == seed
            and (steps is None or b.steps == steps)]


def bracketed(found: list[Bracket], row: str, seed: int, steps: int | None = None,
              tie_nats: float = DEFAULT_TIE_NATS) -> Bracket:
    """A row's bracket at a seed (and schedule, when given), when it brackets its best
    rate (its .best); ValueError saying why not."""
    matches = matching(found, row, seed, steps)
    at = f"seed {seed}" + ("" if steps is None else f", {steps} steps")
    if not matches:
        known = ", ".join(sorted({f"{b.row} ({b.steps} steps)" for b in found
                                  if b.seed == seed})) or "none"
        raise ValueError(f"--best {row}: no such row at {at} (rows at seed {seed}: {known})")
    if len(matches) > 1:
        raise ValueError(f"--best {row}: seed {seed} has {len(matches)} schedules ("
                         + ", ".join(f"{b.steps} steps" for b in matches)
                         + "): give --steps")
    if matches[0].verdict != "bracketed":
        raise ValueError(f"--best {row}: not bracketed: {verdict_line(matches[0], tie_nats)}")
    return matches[0]


# -- printing --------------------------------------------------------------------------------
def _rate(rate: float | None) -> str:
    return "-" if rate is None else short_rate(rate)


def _loss(run: Pretraining) -> str:
    if run.eval_loss is not None:
        return f"{run.eval_loss:.4f}"
    return "diverged" if run.diverged_at is None else f"diverged at step {run.diverged_at}"


def _bracketed_at(bracket: Bracket, found: Sequence[Bracket]) -> Bracket | None:
    """Another seed's bracket of the same row and schedule whose pick is this one-rate
    group's rate: the group is that seed's rate run again at a second seed (the study
    scripts' PRE_LR=best), not a grid to extend."""
    if bracket.verdict != "single_rate":
        return None
    return next((other for other in found
                 if (other.row, other.steps) == (bracket.row, bracket.steps)
                 and other.seed != bracket.seed and other.verdict == "bracketed"
                 and other.best.learning_rate == bracket.best.learning_rate), None)


def verdict_line(bracket: Bracket, tie_nats: float = DEFAULT_TIE_NATS,
                 found: Sequence[Bracket] = ()) -> str:
    """One group's pick and verdict; `found` (every group) names another seed's bracket
    that a one-rate group repeats."""
    head = f"{bracket.row} (seed {bracket.seed}, {bracket.steps} steps)"
    if bracket.best is None:
        return f"{head}: no finished run yet"
    pick = f"best {_rate(bracket.best.learning_rate)} ({_loss(bracket.best)})"
    if bracket.runner_up_gap is not None:
        pick += f", runner-up +{bracket.runner_up_gap:.4f} nats"
        if bracket.tie:
            pick += f" (a tie: under {tie_nats:g})"
    say = {"bracketed": "bracketed (a lower and a higher rate both ended worse)",
           "below_grid": f"at the grid's low edge: add {_rate(bracket.next_rate)}",
           "above_grid": f"at the grid's high edge: add {_rate(bracket.next_rate)}",
           "single_rate": "one rate only: add a lower and a higher one",
           "incomplete": f"so far ({sum(r.finished for r in bracket.runs)} of "
                         f"{len(bracket.runs)} rates finished)"}[bracket.verdict]
    repeated = _bracketed_at(bracket, found)
    if repeated is not None:
        say = f"one rate: seed {repeated.seed}'s bracketed rate, at a second seed"
    return f"{head}: {pick}; {say}"


def markdown(found: list[Bracket], tie_nats: float = DEFAULT_TIE_NATS,
             reruns_differ: list[str] = ()) -> str:
    lines = ["| row | seed | steps | rate | state | eval loss | vs best (nats) | top-1 |",
             "|---|---|---|---|---|---|---|---|"]
    for bracket in found:
        best = bracket.best
        for run in bracket.runs:
            state = ("diverged" if run.diverged else "finished" if run.finished
                     else f"at step {run.last_step}") + (" (landed)" if run.landed_in else "")
            if run is best:
                delta = "best"
            elif run.finished and run.eval_loss is not None and best.eval_loss is not None:
                delta = f"+{run.eval_loss - best.eval_loss:.4f}"
            else:
                delta = "-"
            loss = _loss(run) if run.finished else (
                "-" if run.eval_loss is None else f"({run.eval_loss:.4f} so far)")
            top1 = "-" if run.eval_accuracy is None else f"{100 * run.eval_accuracy:.1f}%"
            lines.append(f"| {bracket.row} | {bracket.seed} | {bracket.steps} | "
                         f"{_rate(run.learning_rate)} | {state} | {loss} | {delta} | {top1} |")
    lines.append("")
    lines += [f"- {verdict_line(bracket, tie_nats, found)}" for bracket in found]
    lines += [f"- rerun differs: {line}" for line in reruns_differ]
    return "\n".join(lines) + "\n"
