"""The fine-tuning tasks by config name: the one list configs, sweeps and tables read.

Adding a task is one file: a module in tasks/ (found by listing the folder, nothing to
import by hand) or a .py file anywhere named in the environment variable
FINETUNING_TASKS (paths separated by os.pathsep), which calls
`finetuning.register(MyTask())`. See finetuning/task.py for what a task supplies.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
import sys

from finetuning.task import Task

PLUGINS_VARIABLE = "FINETUNING_TASKS"
_REGISTRY: dict[str, Task] = {}
_discovered = False


def register(task: Task) -> Task:
    """Adds `task` under task.key; a key registered twice is an error (two files)."""
    if not task.key or task.key != task.key.lower():
        raise ValueError(f"{task!r}: a task's key is its lower-case config name")
    if task.key in _REGISTRY and _REGISTRY[task.key] is not task:
        raise ValueError(f"fine-tuning task {task.key!r} registered twice")
    _REGISTRY[task.key] = task
    return task


def _import_plugin(path: str) -> None:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{PLUGINS_VARIABLE}: {path} is not a file")
    name = "finetuning_task_" + os.path.splitext(os.path.basename(path))[0]
    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


def _discover() -> None:
    """Imports every module of tasks/ and every file of FINETUNING_TASKS (once)."""
    global _discovered
    if _discovered:
        return
    _discovered = True
    tasks_package = importlib.import_module("tasks")  # above this package: imported, not named
    for module in pkgutil.iter_modules(tasks_package.__path__):
        importlib.import_module(f"tasks.{module.name}")
    for path in filter(None, os.environ.get(PLUGINS_VARIABLE, "").split(os.pathsep)):
        _import_plugin(path)


def _spelling(name: str) -> str:
    return name.strip().lower().replace("-", "").replace("_", "")


def names() -> tuple[str, ...]:
    _discover()
    return tuple(_REGISTRY)


def get(key: str) -> Task:
    """The task of a config name, spelt any case (sst2, SST-2 and sst_2 alike)."""
    _discover()
    wanted = _spelling(key)
    for task in _REGISTRY.values():
        if wanted in (task.key, _spelling(task.name)):
            return task
    raise ValueError(f"task={key!r} is unknown; choose one of {', '.join(names())}")


def is_task(key: str) -> bool:
    try:
        get(key)
    except ValueError:
        return False
    return True


def in_all() -> list[Task]:
    """What task=all runs: every task that says it belongs (GLUE's nine)."""
    _discover()
    return [task for task in _REGISTRY.values() if task.in_all]


def resolve(spec: str) -> list[Task]:
    """config.task: one name, several joined by '/', or all."""
    if str(spec).strip().lower() == "all":
        return in_all()
    names_given = [part for part in str(spec).split("/") if part.strip()]
    unknown = [name for name in names_given if not is_task(name)]
    if unknown or not names_given:
        raise ValueError(f"task={spec}: unknown task {unknown[0] if unknown else spec!r}; "
                         f"use all or a list of {', '.join(names())} joined by '/'")
    return [get(name) for name in names_given]
