"""A sweep's grid, shared by scripts/sweep.py and scripts/tables.py: loading a grid
(configs/grids.py's GRIDS, or a user's grid file), checking its rows, the configs/pretrain.py
arg and config of a row, and a row's model statistics. What the runs write, and the
sweep's directory layout, are training/results.py's.

A grid file is a Python file defining

  GRID = [{"name": "mh_h8", "overrides": {"size": "mini", "heads": 8}},
          {"name": "th_h8", "overrides": {"size": "mini", "heads": 8,
                                          "attention": "talking_heads"}},
          {"name": "mh_h8_lr1e-4", "overrides": {"size": "mini", "heads": 8},
           "glue": {"lr": 1e-4}, "pretrained_by": "mh_h8"}]

(or `configs.grids.Row` objects); overrides take the keys of configs/pretrain.py's
arg (model keys such as heads, key_size, attention, and run keys such as lr); glue
takes configs/glue.py's args for the row's fine-tuning; pretrained_by names an
earlier row whose checkpoint the row fine-tunes instead of pretraining its own.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
from typing import Any

import ml_collections

from configs import grids, overrides
from configs import model as model_configs
from configs import pretrain as pretrain_configs
from training import results

# Row names become directory names and appear in shell scripts.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")


# -- grids -------------------------------------------------------------------------------
def load_grid(name: str | None, path: str | None) -> tuple[str, list[grids.Row]]:
    """(label, rows) of a named grid of configs/grids.py or of a grid file."""
    if bool(name) == bool(path):
        raise ValueError("give exactly one of --grid NAME and --grid_file FILE")
    if name:
        if name not in grids.GRIDS:
            raise ValueError(f"--grid={name!r} is unknown; choose one of {sorted(grids.GRIDS)}")
        return name, check_rows(list(grids.GRIDS[name]))
    return os.path.abspath(path), load_grid_file(path)


def load_grid_file(path: str) -> list[grids.Row]:
    if not os.path.isfile(path):
        raise ValueError(f"--grid_file={path}: no such file")
    spec = importlib.util.spec_from_file_location("user_grid", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    entries = getattr(module, "GRID", None)
    if not isinstance(entries, list | tuple) or not entries:
        raise ValueError(f"{path}: define GRID = [{{'name': ..., 'overrides': {{...}}}}, ...]")
    return check_rows([as_row(entry, f"{path}: GRID[{i}]") for i, entry in enumerate(entries)])


def as_row(entry: Any, where: str) -> grids.Row:
    if isinstance(entry, grids.Row):
        return entry
    if not isinstance(entry, dict) or "name" not in entry:
        raise ValueError(f"{where} must be a configs.grids.Row or a dict with 'name'")
    allowed = [f.name for f in dataclasses.fields(grids.Row)]
    unknown = sorted(set(entry) - set(allowed))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; allowed: {', '.join(allowed)}")
    return grids.Row(str(entry["name"]), dict(entry.get("overrides") or {}),
                     dict(entry.get("reported") or {}), dict(entry.get("glue") or {}),
                     entry.get("pretrained_by"))


def check_rows(rows: list[grids.Row]) -> list[grids.Row]:
    """Unique names that are safe as directory names; override keys configs/pretrain.py
    knows, glue keys configs/glue.py knows; a pretrained_by row earlier in the grid."""
    from configs import glue as glue_configs

    allowed = set(model_configs.MODEL_ARGS) | set(pretrain_configs.PRETRAIN_ARGS)
    seen: dict[str, grids.Row] = {}
    for row in rows:
        if not _NAME.fullmatch(row.name) or results.SEED_DIR.fullmatch(row.name):
            raise ValueError(f"row name {row.name!r}: use letters, digits, '_', '.', '+', '-'")
        if row.name in seen:
            raise ValueError(f"row name {row.name!r} appears twice")
        unknown = sorted(set(row.overrides) - allowed)
        if unknown:
            raise ValueError(f"row {row.name}: unknown override(s) {unknown}; "
                             f"allowed: {', '.join(sorted(allowed))}")
        unknown = sorted(set(row.glue) - set(glue_configs.GLUE_ARGS))
        if unknown:
            raise ValueError(f"row {row.name}: unknown glue arg(s) {unknown}; "
                             f"allowed: {', '.join(sorted(glue_configs.GLUE_ARGS))}")
        check_pretrained_by(row, seen)
        seen[row.name] = row
    return rows


def check_pretrained_by(row: grids.Row, earlier: dict[str, grids.Row]) -> None:
    if row.pretrained_by is None:
        return
    source = earlier.get(row.pretrained_by)
    if source is None or source.pretrained_by:
        raise ValueError(f"row {row.name}: pretrained_by={row.pretrained_by!r} must name an "
                         f"earlier row of the grid that pretrains itself")
    if source.overrides != row.overrides:
        raise ValueError(f"row {row.name}: its overrides must equal those of "
                         f"{source.name}, whose pretraining it fine-tunes")


def row_arg(row: grids.Row) -> str:
    """The configs/pretrain.py arg that builds a row: `row=NAME` for the papers' rows."""
    known = grids.ROWS.get(row.name)
    if known is not None and known.overrides == row.overrides:
        return f"row={row.name}"
    return ",".join(f"{k}={format_value(v)}" for k, v in row.overrides.items())


def format_value(value: object) -> str:
    text = "none" if value is None else str(value).lower() if isinstance(value, bool) else str(
        value)
    if "," in text:  # parse_arg splits on commas
        raise ValueError(f"override value {text!r} cannot be passed in a comma arg; "
                         f"use --pretrain_overrides instead")
    return text


def glue_arg(row: grids.Row, sweep_args: str = "") -> str:
    """The sweep's configs/glue.py ARG with the row's own glue args in place of its."""
    pairs = dict(item.split("=", 1) for item in sweep_args.split(",") if "=" in item)
    pairs.update({k: format_value(v) for k, v in row.glue.items()})
    return ",".join(f"{k}={v}" for k, v in pairs.items())


def join_args(*parts: str) -> str:
    return ",".join(p.strip(",") for p in parts if p and p.strip(","))


# -- configs -----------------------------------------------------------------------------
def normalize_override(item: str) -> str:
    """'--config.a.b=v', 'config.a.b=v' and 'a.b=v' all become 'a.b=v'."""
    return "=".join(overrides.split_override(item))


def pretrain_config(arg: str, field_values: list[str]) -> ml_collections.ConfigDict:
    """configs/pretrain.py:ARG plus --config overrides; raises ValueError naming a bad field."""
    config = pretrain_configs.get_config(arg)
    overrides.apply_overrides(config, field_values)
    return config


# -- rows as JSON (sweep.json) ----------------------------------------------------------
def row_to_json(row: grids.Row) -> dict[str, Any]:
    return dataclasses.asdict(row)


def row_from_json(entry: dict[str, Any]) -> grids.Row:
    return as_row(entry, results.MANIFEST)


# -- model statistics --------------------------------------------------------------------
def parameter_counts(model: Any) -> tuple[int, int]:
    """(parameters without the MLM head, MLM head parameters); see models/flops.py."""
    from models.flops import parameter_counts as count  # local: settings stay cheap to read

    return count(model)


def millions(count: int) -> str:
    """167.4M as the papers print it; small models keep three significant digits."""
    return f"{count / 1e6:.1f}M" if count >= 1e7 else f"{count / 1e6:.3g}M"


def flops_per_token(model: Any, seq_len: int) -> float:
    """Forward encoder FLOPs per token at this sequence length (models/flops.py)."""
    from models.flops import flop_count

    return flop_count(model, seq_len).encoder_per_token
