"""Plug-in files named by an environment variable (ATTENTION_PLUGINS, FINETUNING_TASKS):
the paths, and importing one by its path. The registries that read them decide what a
file must register."""

from __future__ import annotations

import importlib.util
import os
import sys

from common.errors import ConfigError


def plugin_paths(variable: str) -> list[str]:
    """The files `variable` names, separated by os.pathsep, in its order (empty entries
    skipped, ~ expanded)."""
    listed = os.environ.get(variable, "")
    return [os.path.expanduser(p.strip()) for p in listed.split(os.pathsep) if p.strip()]


def import_plugin(path: str, variable: str, prefix: str) -> None:
    """Imports the .py file at `path` as module PREFIX_STEM (a name of its own, so a
    plug-in called e.g. models.py shadows nothing); one ConfigError naming `variable` for a
    path that is not a .py file, or a second plug-in of the same file name."""
    if not os.path.isfile(path):
        raise ConfigError(f"{variable}: {path!r} is not a file")
    if not path.endswith(".py"):
        raise ConfigError(f"{variable}: {path!r} is not a .py file")
    name = f"{prefix}_{os.path.splitext(os.path.basename(path))[0]}"
    if name in sys.modules:
        raise ConfigError(f"{variable}: two plug-ins named {os.path.basename(path)!r}; "
                          f"rename one")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look a class's module up here
    spec.loader.exec_module(module)
