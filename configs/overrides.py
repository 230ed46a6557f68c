"""Setting config fields from text: the one parser for `configs/X.py:ARGS` values,
`FIELD=VALUE` overrides (scripts/sweep.py, benchmarks, tests) and dataclass defaults.

  parse_arg("size=mini,heads=8")            -> {"size": "mini", "heads": 8}
  apply_overrides(config, ["model.num_heads=8", "--config.data.corpus=x"])
"""

from __future__ import annotations

import ast
import dataclasses
import typing
from typing import Any

import ml_collections


def parse_value(text: str) -> object:
    """'none'/'null' -> None, 'true'/'false' -> bool, then int, float, else the string."""
    lowered = text.strip().lower()
    if lowered in ("none", "null"):
        return None
    if lowered in ("true", "false"):
        return lowered == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def parse_arg(arg: str | None) -> dict[str, object]:
    """'a=1,b=x' -> {'a': 1, 'b': 'x'} (the ARGS of configs/X.py:ARGS)."""
    out: dict[str, object] = {}
    for item in (arg or "").split(","):
        item = item.strip()
        if not item:
            continue
        if "=" not in item:
            raise ValueError(f"config arg {item!r} is not of the form key=value")
        key, value = (s.strip() for s in item.split("=", 1))
        out[key] = parse_value(value)
    return out


def coerce(text: str, current: object) -> object:
    """`text` as the type of the field's current value (as --config.FIELD=VALUE does)."""
    if isinstance(current, bool):
        return text.strip().lower() in ("1", "true", "yes")
    if isinstance(current, int | float):
        return type(current)(text)
    if isinstance(current, tuple | list):
        value = ast.literal_eval(text)
        return tuple(value) if isinstance(value, tuple | list) else (value,)
    if isinstance(current, str):
        return text
    return parse_value(text)  # a None placeholder: the parsed type


def split_override(item: str) -> tuple[str, str]:
    """'--config.a.b=v', 'config.a.b=v' and 'a.b=v' -> ('a.b', 'v')."""
    text = item.removeprefix("--").removeprefix("config.")
    if "=" not in text:
        raise ValueError(f"override {item!r} is not FIELD=VALUE")
    key, value = text.split("=", 1)
    return key.strip(), value


def set_field(config: ml_collections.ConfigDict, dotted: str, value: object) -> None:
    """config.a.b.c = value, naming the field when the config has none such."""
    *parents, leaf = dotted.split(".")
    node = config
    try:
        for p in parents:
            node = node[p]
        node[leaf]  # noqa: B018 - exists?
    except (KeyError, AttributeError, TypeError):
        raise ValueError(f"the config has no field {dotted}") from None
    node[leaf] = value


def apply_overrides(config: ml_collections.ConfigDict, overrides: list[str]) -> None:
    """Applies FIELD=VALUE strings, each coerced to its field's type."""
    for item in overrides:
        key, text = split_override(item)
        *parents, leaf = key.split(".")
        node = config
        try:
            for p in parents:
                node = node[p]
            current = node[leaf]
        except (KeyError, AttributeError, TypeError):
            raise ValueError(f"override {item!r}: the config has no field {key}") from None
        try:
            node[leaf] = coerce(text, current)
        except (TypeError, ValueError, SyntaxError) as e:  # incl. ml_collections' type check
            raise ValueError(f"override {item!r}: {e}") from None


def from_dataclass(instance: Any) -> ml_collections.ConfigDict:
    """A ConfigDict of a (frozen) dataclass's values, nested dataclasses nested; a None
    field becomes a placeholder of its annotated type, so it can be set from text."""
    hints = typing.get_type_hints(type(instance))
    out = ml_collections.ConfigDict()
    for field in dataclasses.fields(instance):
        value = getattr(instance, field.name)
        if dataclasses.is_dataclass(value):
            out[field.name] = from_dataclass(value)
        elif value is None:
            kinds = [t for t in typing.get_args(hints[field.name]) if t is not type(None)]
            out[field.name] = ml_collections.config_dict.placeholder(kinds[0])
        else:
            out[field.name] = value
    return out
