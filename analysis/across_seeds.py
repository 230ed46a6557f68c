"""A verdict about an architecture from one fine-tuning table per pretraining seed.

A table of scripts/compare_finetuning.py pairs two rows by fine-tuning seed, each row one
pretrained checkpoint: its verdicts speak for that pair of checkpoints, not for the
architectures, since a second pretraining seed draws other checkpoints (docs/RESULTS.md
part 10 measured two multi-head seeds 0.055 nats of eval loss apart, 4-8x the plateau's
seed-to-seed spread). The rule declared before part 10's runs: a verdict about the
architecture ("talking heads score below multi-head at 48 heads") is stated only when
every pretraining seed's verdict settles in the same direction; settled at some seeds
only is reported as exactly that. No new test is made: each seed's verdict is its own
table's (paired t by fine-tuning seed, Holm over that table), and the per-seed p-values
stay in their tables' families.

Rows of the per-seed tables are matched by name with the pretraining seed's suffix
removed (scripts/head_count_study.sh names seed 1's multi-head row mh_h48_seed1 and
seed 0's mh_h48), so the tests of seed 0's mh_h48:nat_th_identity_h48 and seed 1's
mh_h48_seed1:nat_th_identity_h48_seed1 are one comparison.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

SEED_SUFFIX = re.compile(r"_seed\d+(?=_|$)")


def architecture_name(row: str) -> str:
    """A row's name without its pretraining seed's suffix (_seed{S}, wherever the study
    script put it: mh_h48_pre3e-4_seed1_steps4640 -> mh_h48_pre3e-4_steps4640)."""
    return SEED_SUFFIX.sub("", row)


@dataclasses.dataclass(frozen=True)
class SeedTest:
    """One pretraining seed's test of one comparison, as its table wrote it."""
    seed: int
    table: str
    diff: float  # mean B - A over fine-tuning seeds
    ci: tuple[float, float]
    p_holm: float
    n: int
    verdict: str  # "{row} better", "equivalent (±m)", "not settled"

    @property
    def settled(self) -> str:
        """The architecture name of the better side, 'equivalent', or '' (not settled)."""
        if self.verdict.endswith(" better"):
            return architecture_name(self.verdict.removesuffix(" better"))
        return "equivalent" if self.verdict.startswith("equivalent") else ""


def _words(settled: str) -> str:
    """A seed's settled side as the verdict says it."""
    return {"": "not settled", "equivalent": "equivalent"}.get(settled, f"{settled} better")


@dataclasses.dataclass(frozen=True)
class Comparison:
    task: str
    a: str  # architecture names (seed suffix removed)
    b: str
    by_seed: dict[int, SeedTest]
    costs: dict[str, tuple[int, float]]  # architecture name -> (parameters, FLOPs/token)

    def outcome(self, seeds: list[int]) -> str:
        """The declared rule over the pretraining seeds given (every table's seed)."""
        missing = [s for s in seeds if s not in self.by_seed]
        if missing:
            return (f"not run at pretraining seed {', '.join(map(str, missing))}: no "
                    "architecture verdict")
        if len(seeds) < 2:
            return "one pretraining seed: no architecture verdict"
        settled = {s: self.by_seed[s].settled for s in seeds}
        sides = set(settled.values()) - {""}
        if not sides:
            return "not settled at any pretraining seed: no architecture verdict"
        if len(sides) > 1:
            listed = "; ".join(f"seed {s}: {_words(v)}" for s, v in settled.items())
            return (f"different verdicts across pretraining seeds ({listed}): no architecture "
                    "verdict")
        (side,) = sides
        unsettled = [s for s, v in settled.items() if not v]
        if not unsettled:
            return (f"{_words(side)} at every pretraining seed ({len(seeds)}): an architecture "
                    "verdict")
        at = [s for s, v in settled.items() if v]
        return (f"{_words(side)} at pretraining seed {', '.join(map(str, at))} only, not "
                f"settled at {', '.join(map(str, unsettled))}: no architecture verdict")


def read_table(path: str) -> dict[str, Any]:
    """A table.json of scripts/compare_finetuning.py; ValueError naming the file."""
    try:
        with open(path) as f:
            table = json.load(f)
        if not isinstance(table["tests"], list) or not isinstance(table["rows"], list):
            raise TypeError("tests and rows must be lists")
    except (OSError, ValueError, KeyError, TypeError) as e:  # JSONDecodeError: ValueError
        raise ValueError(f"{path}: not a table.json of scripts/compare_finetuning.py "
                         f"({type(e).__name__}: {e})") from None
    return table


def parse_tables(specs: list[str]) -> dict[int, str]:
    """--table SEED=PATH, ... -> {seed: path}."""
    tables: dict[int, str] = {}
    for spec in specs:
        seed, sep, path = spec.partition("=")
        if not sep or not path or not seed.isdigit():
            raise ValueError(f"--table {spec!r}: use SEED=PATH (the pretraining seed, a "
                             "table.json)")
        if int(seed) in tables:
            raise ValueError(f"--table {spec!r}: pretraining seed {seed} is given twice")
        tables[int(seed)] = path
    return tables


def comparisons(tables: dict[int, str]) -> list[Comparison]:
    """Every (task, A, B) any table tests, with each seed's test of it."""
    metrics = set()
    found: dict[tuple[str, str, str], dict[int, SeedTest]] = {}
    costs: dict[str, tuple[int, float]] = {}
    for seed, path in sorted(tables.items()):
        table = read_table(path)
        metrics.add(table.get("metric", "main"))
        for row in table["rows"]:
            costs.setdefault(architecture_name(row["name"]),
                             (row["params"], row["flops_per_token"]))
        for t in table["tests"]:
            key = (t["task"], architecture_name(t["a"]), architecture_name(t["b"]))
            if seed in found.get(key, {}):
                raise ValueError(f"{path}: tests {key[1]} against {key[2]} on {key[0]} twice "
                                 "once the seed suffix is removed")
            found.setdefault(key, {})[seed] = SeedTest(
                seed, path, t["diff"], tuple(t["ci"]), t["p_holm"], len(t["seeds"]),
                t["verdict"])
    if len(metrics) > 1:
        raise ValueError(f"--table: the tables score different metrics ({sorted(metrics)}); "
                         "one metric per comparison")
    return [Comparison(task, a, b, by_seed, costs)
            for (task, a, b), by_seed in sorted(found.items())]


def cost_text(c: Comparison) -> str:
    (pa, fa), (pb, fb) = c.costs[c.a], c.costs[c.b]
    return (f"{pb / pa:.4f}x params ({pb - pa:+,}), {fb / fa:.2f}x FLOPs/token "
            f"(B against A)")


def render(found: list[Comparison], seeds: list[int]) -> str:
    lines = [
        "| task | A | B | " + " | ".join(f"seed {s}: B − A [95% t], Holm p, verdict"
                                         for s in seeds) + " | cost | across seeds |",
        "|" + "---|" * (5 + len(seeds)),
    ]
    for c in found:
        cells = []
        for s in seeds:
            t = c.by_seed.get(s)
            cells.append("not run" if t is None else
                         f"{t.diff:+.2f} [{t.ci[0]:+.2f}, {t.ci[1]:+.2f}], {t.p_holm:.2g}, "
                         f"{t.verdict} (n={t.n})")
        lines.append(f"| {c.task} | {c.a} | {c.b} | " + " | ".join(cells)
                     + f" | {cost_text(c)} | {c.outcome(seeds)} |")
    return "\n".join(lines) + (
        "\n\nEach seed's cell is its own table's test (paired t by fine-tuning seed, Holm "
        "over that table); rows matched by name without the _seed suffix. The rule: an "
        "architecture verdict only when every pretraining seed settles the same way.\n")


def to_json(found: list[Comparison], seeds: list[int], tables: dict[int, str]) -> dict[str, Any]:
    return {
        "tables": {str(s): p for s, p in sorted(tables.items())},
        "comparisons": [{
            "task": c.task, "a": c.a, "b": c.b,
            "cost": {"params": [c.costs[c.a][0], c.costs[c.b][0]],
                     "flops_per_token": [c.costs[c.a][1], c.costs[c.b][1]]},
            "by_seed": {str(s): dataclasses.asdict(t) for s, t in sorted(c.by_seed.items())},
            "across_seeds": c.outcome(seeds)} for c in found],
    }
