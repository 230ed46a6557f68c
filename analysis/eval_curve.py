"""A pretraining run's logged curve as numbers (the command line is scripts/eval_curve.py):
per workdir, a TensorBoard scalar's value at each logged step in a window and its change
over it, e.g. whether a run was still improving when its learning rate reached 0.

A study's workdirs may be gone (a fresh clone, another machine) while the curves it
landed are committed: landing again over the same tag and window keeps a named
workdir's landed curve where this machine has no such workdir, or where its run (a
rerun still going) has not reached the landed curve's last step; a rerun that reaches it
replaces the curve. The results file holds the named workdirs only.
"""

from __future__ import annotations

import json
import os

from analysis.runs import scalar_curve


def window(workdir: str, tag: str, from_step: int, to_step: int | None) -> dict:
    """{"values": {step: value}, "change": last - first, "from", "to"} of tag within the
    steps; ValueError naming the workdir when it or the tag is missing."""
    if not os.path.isdir(workdir):
        raise ValueError(f"{workdir}: no such workdir")
    curve = scalar_curve(workdir, tag)
    if not curve:
        raise ValueError(f"{workdir}: no TensorBoard scalar {tag!r} in its events")
    kept = {step: value for step, value in sorted(curve.items())
            if step >= from_step and (to_step is None or step <= to_step)}
    if not kept:
        raise ValueError(f"{workdir}: {tag!r} has no logged step in [{from_step}, "
                         f"{to_step if to_step is not None else 'end'}]")
    steps = list(kept)
    return {"values": {str(s): kept[s] for s in steps},
            "change": kept[steps[-1]] - kept[steps[0]],
            "from": steps[0], "to": steps[-1]}


def landed_curves(path: str | None, tag: str, from_step: int = 0,
                  to_step: int | None = None) -> dict[str, dict]:
    """The curves of tag an earlier results file at path holds over the same window of
    steps, by workdir: none when there is no such file, or it holds another tag or
    window. ValueError naming an unreadable one."""
    if not path or not os.path.exists(path):
        return {}
    try:
        with open(path) as f:
            landed = json.load(f)
        same = (landed["tag"], landed.get("from_step", 0), landed.get("to_step")) == (
            tag, from_step, to_step)
        return dict(landed["runs"]) if same else {}
    except (OSError, ValueError, KeyError, TypeError) as e:  # JSONDecodeError: ValueError
        raise ValueError(f"{path}: not a results file of scripts/eval_curve.py "
                         f"({type(e).__name__}: {e})") from None


def curves(workdirs: list[str], tag: str, from_step: int = 0, to_step: int | None = None,
           landed: dict[str, dict] | None = None) -> tuple[dict, list[str]]:
    """The report {"tag", "runs": {workdir: window}} and a line per workdir saying what
    it holds; a landed curve stands where the workdir is gone or behind it."""
    landed = landed or {}
    report: dict = {"tag": tag, "from_step": from_step, "to_step": to_step, "runs": {}}
    lines = []
    for workdir in workdirs:
        kept = landed.get(workdir)
        here = os.path.isdir(workdir)
        numbers = None
        if here or kept is None:  # a missing workdir without a landed curve: window's error
            try:
                numbers = window(workdir, tag, from_step, to_step)
            except ValueError:
                if kept is None:
                    raise  # a rerun not yet logging inside the window keeps its landed one
        if kept is not None and (numbers is None or numbers["to"] < kept["to"]):
            report["runs"][workdir] = kept
            at = ("no such workdir" if not here else "not yet in the window"
                  if numbers is None else f"at step {numbers['to']}")
            lines.append(f"{workdir}: {at} here; kept its landed curve (to step "
                         f"{kept['to']})")
            continue
        report["runs"][workdir] = numbers
        lines.append(f"{workdir}: {tag} {numbers['change']:+.4f} from step {numbers['from']} "
                     f"to {numbers['to']} ({len(numbers['values'])} logged steps)")
    return report, lines
