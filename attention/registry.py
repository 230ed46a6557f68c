"""Maps the config's attention name to its variant: the module class and what the
rest of the code needs to know about it.

Adding a variant is one new file in attention/ with `@register("name")` on its
module class (and its import in attention/__init__.py). A variant with settings of
its own declares them as a frozen dataclass (`settings=`; models/config.py makes it the
ModelConfig field model.<name>.*) with short config args (`short_args=`, e.g. th_init)
and the settings that change only how it is computed (`execution_fields=`, a
checkpoint resumes across them). Its head counts and sizes, projected widths, config
checks, extra FLOPs and saved bytes are classmethods of the module class (see
attention.base.Attention for the defaults); models/ and configs/ reach them through
here and never import a variant.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    module: Any  # the attention.base.Attention subclass
    settings: type | None = None  # frozen dataclass, or None: no settings of its own
    short_args: Mapping[str, str] = dataclasses.field(default_factory=dict)  # arg -> field
    execution_fields: tuple[str, ...] = ()  # settings fields that leave parameters alone


_REGISTRY: dict[str, Variant] = {}


def register(name: str, *, settings: type | None = None,
             short_args: Mapping[str, str] | None = None,
             execution_fields: tuple[str, ...] = ()):
    """Class decorator adding an attention module under `name`."""

    def add(cls: Any) -> Any:
        if name in _REGISTRY:
            raise ValueError(f"attention variant {name!r} registered twice")
        _REGISTRY[name] = Variant(name, cls, settings, dict(short_args or {}),
                                  tuple(execution_fields))
        return cls

    return add


def _all() -> dict[str, Variant]:
    import attention  # noqa: F401  (importing the package registers every variant)

    return _REGISTRY


def variant(name: str) -> Variant:
    if name not in _all():
        raise KeyError(f"attention={name!r} is unknown; choose one of {names()}")
    return _REGISTRY[name]


def get(name: str) -> Any:
    """The module class of a variant."""
    return variant(name).module


def names() -> tuple[str, ...]:
    return tuple(sorted(_all()))


def with_settings() -> dict[str, Variant]:
    """Variants with settings of their own, by name (the config keys model.<name>.*)."""
    return {name: v for name, v in sorted(_all().items()) if v.settings is not None}
