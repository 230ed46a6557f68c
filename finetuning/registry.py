"""The fine-tuning tasks by config name: the one list configs, sweeps and tables read.

Adding a task is one file: a module in tasks/ (found by listing the folder, nothing to
import by hand) or a .py file anywhere named in the environment variable
FINETUNING_TASKS (paths separated by os.pathsep; set it for every command that reads the
task: fine-tuning, sweeps, tables), which calls `finetuning.register(MyTask())`. See
finetuning/task.py for what a task supplies. A name is matched in any case, with or
without '-' and '_' (sst2, SST-2, sst_2), so two tasks may not share one that way.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil

from common.plugins import import_plugin, plugin_paths
from finetuning.task import Task

PLUGINS_VARIABLE = "FINETUNING_TASKS"
_REGISTRY: dict[str, Task] = {}
# Where the search stands: "not yet", "done", or the error it stopped on (raised again on
# every later call: the list is incomplete).
_search: str | BaseException = "not yet"
_loading = ""  # the module or file being imported (named when a task is registered twice)


def _spelling(name: str) -> str:
    return name.strip().lower().replace("-", "").replace("_", "")


def register(task: Task) -> Task:
    """Adds `task` under task.key; a key or name that another task already answers to
    (in any spelling), or 'all', is an error naming both."""
    if not task.key or task.key != task.key.lower():
        raise ValueError(f"{task!r}: a task's key is its lower-case config name")
    spellings = {_spelling(task.key), _spelling(task.name or task.key)}
    if "all" in spellings:
        raise ValueError(f"{task!r}: 'all' is task=all (GLUE's nine), not a task's name")
    for other in _REGISTRY.values():
        if other is not task and spellings & {_spelling(other.key), _spelling(other.name)}:
            raise ValueError(f"fine-tuning task {task.key!r} ({task.name}, from "
                             f"{_loading or type(task).__module__}) and {other.key!r} "
                             f"({other.name}, from {type(other).__module__}) share a name")
    _REGISTRY[task.key] = task
    return task


def load_plugin(path: str) -> None:
    """Imports one plug-in file by its path; it must register at least one task."""
    before = set(_REGISTRY)
    import_plugin(path, PLUGINS_VARIABLE, "finetuning_task")
    if set(_REGISTRY) == before:
        raise ValueError(f"{PLUGINS_VARIABLE}: {path} registers no task (call "
                         f"finetuning.register(YourTask()))")


def _discover() -> None:
    """Imports every module of tasks/ and every file of FINETUNING_TASKS (once; a failure
    is raised again on every later call)."""
    global _search, _loading
    if _search == "done":
        return
    if isinstance(_search, BaseException):
        raise _search
    try:
        tasks_package = importlib.import_module("tasks")  # above this package: not named
        for module in pkgutil.iter_modules(tasks_package.__path__):
            _loading = f"tasks.{module.name}"
            importlib.import_module(_loading)
        for path in plugin_paths(PLUGINS_VARIABLE):
            _loading = path
            load_plugin(path)
    except BaseException as error:
        _search = error
        raise
    _loading, _search = "", "done"


def names() -> tuple[str, ...]:
    _discover()
    return tuple(_REGISTRY)


def get(key: str) -> Task:
    """The task of a config name, spelt any case (sst2, SST-2 and sst_2 alike)."""
    _discover()
    wanted = _spelling(key)
    for task in _REGISTRY.values():
        if wanted in (_spelling(task.key), _spelling(task.name)):
            return task
    raise ValueError(f"task={key!r} is unknown; choose one of {', '.join(names())}")


def is_task(key: str) -> bool:
    try:
        get(key)
    except ValueError:
        return False
    return True


def in_all() -> list[Task]:
    """What task=all runs: GLUE's nine (Task.in_all)."""
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
