"""Every script module imports beside every other in one process (a test file imports
several; xdist puts any two files on one worker): no absl flag is defined at import."""

from __future__ import annotations

import importlib
import pkgutil

import scripts


def test_every_script_module_imports_beside_the_others():
    names = sorted(m.name for m in pkgutil.iter_modules(scripts.__path__))
    assert {"tables", "accelerator_check", "benchmark", "sweep"} <= set(names)
    for name in names:
        importlib.import_module(f"scripts.{name}")  # DuplicateFlagError if two define --out
