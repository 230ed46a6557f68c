"""Maps the config's attention name to its module class.

models/ looks variants up here and never imports one directly, so adding a
variant is one new file with `@register("name")` plus its import in
attention/__init__.py.
"""

from __future__ import annotations

from typing import Any

_REGISTRY: dict[str, Any] = {}


def register(name: str):
    """Class decorator adding an attention module under `name`."""

    def add(cls: Any) -> Any:
        if name in _REGISTRY:
            raise ValueError(f"attention variant {name!r} registered twice")
        _REGISTRY[name] = cls
        return cls

    return add


def get(name: str) -> Any:
    if name not in _REGISTRY:
        raise KeyError(f"attention={name!r} is unknown; choose one of {names()}")
    return _REGISTRY[name]


def names() -> tuple[str, ...]:
    # Importing the package registers every variant.
    import attention  # noqa: F401

    return tuple(sorted(_REGISTRY))
