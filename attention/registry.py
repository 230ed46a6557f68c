"""Maps the config's attention name to its variant: the module class and what the
rest of the code needs to know about it.

Adding a variant is one new file with `@register("name")` on its module class; no
other file names it. The registry finds variants itself, the first time it is asked:
  - every module of the attention package whose name does not start with "_" (the
    infrastructure, base/registry/initializers, registers nothing; a helper module that
    should not load on its own starts with "_");
  - every file named by the environment variable ATTENTION_PLUGINS: paths to .py files
    (absolute or relative to the working directory) separated by os.pathsep (":" on
    Linux), e.g. ATTENTION_PLUGINS=~/my_variants/scaled.py, so a researcher keeps a
    variant outside this repository. Such a file imports from attention and common only
    (as the package's modules do; models/ builds ModelConfig from the registry when
    imported, so a plug-in importing it at load time is refused).
A variant with settings of its own declares them as a frozen dataclass (`settings=`;
models/config.py makes it the ModelConfig field model.<name>.*) with short config args
(`short_args=`, e.g. th_init) and the settings that change only how it is computed
(`execution_fields=`, a checkpoint resumes across them). Its head counts and sizes,
projected widths, config checks, fused path, extra FLOPs and saved bytes are classmethods
of the module class (see attention.base.Attention for the defaults); models/ and configs/
reach them through here and never import a variant.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import pkgutil
from collections.abc import Mapping
from typing import Any

from common.errors import ConfigError
from common.plugins import import_plugin, plugin_paths

PLUGINS_VARIABLE = "ATTENTION_PLUGINS"


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    module: Any  # the attention.base.Attention subclass
    settings: type | None = None  # frozen dataclass, or None: no settings of its own
    short_args: Mapping[str, str] = dataclasses.field(default_factory=dict)  # arg -> field
    execution_fields: tuple[str, ...] = ()  # settings fields that leave parameters alone

    @property
    def shipped(self) -> bool:
        """Defined in the attention package (not a plug-in from ATTENTION_PLUGINS)."""
        return self.module.__module__.startswith(f"{__package__}.")


_REGISTRY: dict[str, Variant] = {}
# Where the search for variants stands: "not yet", "under way", "done", or the error it
# stopped on (raised again on every later call: the registry is incomplete).
_search: str | BaseException = "not yet"
_loading = ""  # the module or file the search is importing


def register(name: str, *, settings: type | None = None,
             short_args: Mapping[str, str] | None = None,
             execution_fields: tuple[str, ...] = ()):
    """Class decorator adding an attention module under `name`."""

    def add(cls: Any) -> Any:
        if name in _REGISTRY:
            raise ValueError(f"attention variant {name!r} registered twice (in "
                             f"{_REGISTRY[name].module.__module__} and {cls.__module__})")
        _REGISTRY[name] = Variant(name, cls, settings, dict(short_args or {}),
                                  tuple(execution_fields))
        return cls

    return add


def _all() -> dict[str, Variant]:
    global _search
    if _search == "not yet":
        _search = "under way"
        try:
            discover()
        except BaseException as error:
            _search = error
            raise
        _search = "done"
    elif _search == "under way":
        # A variant's file asked for the variants while they were still being loaded
        # (e.g. it imports models/): the answer would miss the ones after it.
        raise ConfigError(f"attention: {_loading} asks for the variants while they load "
                          f"(does it import models/?); a variant imports only attention "
                          f"and common at load time")
    elif isinstance(_search, BaseException):
        raise _search
    return _REGISTRY


def discover() -> None:
    """Imports the package's variant modules, then the plug-in files (see the docstring)."""
    global _loading
    import attention  # the package first: a variant may import from it

    for module in pkgutil.iter_modules(attention.__path__):
        if not module.name.startswith("_"):
            _loading = f"{attention.__name__}.{module.name}"
            importlib.import_module(_loading)
    for path in plugin_paths(PLUGINS_VARIABLE):
        _loading = path
        load_plugin(path)


def load_plugin(path: str) -> None:
    """Imports one plug-in file by its path; it must register at least one variant."""
    before = set(_REGISTRY)
    import_plugin(path, PLUGINS_VARIABLE, "attention_plugin")
    if set(_REGISTRY) == before:
        raise ConfigError(f"{PLUGINS_VARIABLE}: {path!r} registers no attention variant "
                          f"(decorate its module class with @register(NAME))")


def variant(name: str) -> Variant:
    if name not in _all():
        raise KeyError(f"attention={name!r} is unknown; choose one of {names()}")
    return _REGISTRY[name]


def get(name: str) -> Any:
    """The module class of a variant."""
    return variant(name).module


def names() -> tuple[str, ...]:
    return tuple(sorted(_all()))


def insertable() -> dict[str, Variant]:
    """Variants a fine-tuning can insert into a trained multi-head encoder, by name
    (their module's `insertion`: the config fields that ask for it)."""
    return {name: v for name, v in sorted(_all().items()) if v.module.insertion is not None}


def with_settings() -> dict[str, Variant]:
    """Variants with settings of their own, by name (the config keys model.<name>.*)."""
    return {name: v for name, v in sorted(_all().items()) if v.settings is not None}
