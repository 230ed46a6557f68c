"""The import graph goes one way: no module imports a package of a layer above its own.

The layer order is written once, here (README "Layout" describes it). Imports inside
functions count (they run); imports under `if TYPE_CHECKING:` do not (they never run)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENTRY_POINTS = "entry points"  # train.py, eval_glue.py, eval_squad.py
# Bottom to top; packages in one layer do not import each other either.
LAYERS: list[set[str]] = [
    {"common"},  # console lines, hub loading, the atomic file writer, the error types
    {"input_pipeline"},  # corpora, tokenizer, packing, masking, batches
    {"attention"},  # the variants and their registry
    {"models"},  # BERT, ModelConfig, FLOP and memory counts, Hugging Face in and out
    {"glue", "squad"},  # the fine-tuning tasks' data and metrics
    {"training"},  # the drivers: mesh, steps, checkpoints, loops, result records
    {"finetuning"},  # the task-neutral fine-tuning core: Task, registry, runs, grid
    {"tasks"},  # the fine-tuning tasks as plug-ins of the core (GLUE, SQuAD)
    {"configs"},  # ml_collections configs (a fine-tuning config reads the task registry)
    {"analysis"},  # sweeps, tables, tests over seeds, plots, the study tools
    {"scripts"},  # command-line entries
    {ENTRY_POINTS},
]
LAYER_OF = {package: i for i, layer in enumerate(LAYERS) for package in layer}


def package_of(path: Path) -> str:
    top = path.relative_to(REPO).parts[0]
    return ENTRY_POINTS if top.endswith(".py") else top


def type_checking_nodes(tree: ast.AST) -> set[int]:
    guarded = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            guarded |= {id(child) for stmt in node.body for child in ast.walk(stmt)}
    return guarded


def imported_packages(path: Path) -> list[tuple[str, int]]:
    """(top-level package of this project, line) of every import that can run."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    guarded = type_checking_nodes(tree)
    found = []
    for node in ast.walk(tree):
        if id(node) in guarded:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [(name.split(".")[0], node.lineno) for name in names
                  if name.split(".")[0] in LAYER_OF]
    return found


def project_modules() -> list[Path]:
    modules = [p for p in REPO.glob("*.py")]
    for layer in LAYERS:
        for package in layer - {ENTRY_POINTS}:
            modules += sorted((REPO / package).rglob("*.py"))
    return modules


def test_every_package_has_a_layer():
    packages = {p.name for p in REPO.iterdir()
                if p.is_dir() and (p / "__init__.py").exists()} - {"tests"}
    assert packages <= set(LAYER_OF), sorted(packages - set(LAYER_OF))


def test_no_module_imports_a_package_above_or_beside_its_own():
    upward = []
    for path in project_modules():
        own = package_of(path)
        for package, line in imported_packages(path):
            if package != own and LAYER_OF[package] >= LAYER_OF[own]:
                upward.append(f"{path.relative_to(REPO)}:{line} imports {package} "
                              f"(layer {LAYER_OF[package]} >= {LAYER_OF[own]})")
    assert upward == []


def test_the_check_sees_imports_inside_functions_and_skips_type_checking(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                      "    from training import steps\n"
                      "def f():\n    from training.results import FineTuningResults\n")
    assert imported_packages(source) == [("training", 5)]


def module_name(path: Path, root: Path = REPO) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_cycles(paths: list[Path], root: Path = REPO) -> list[str]:
    """Cycles among module-level imports (the ones that run on import). A module's
    import of its own package's __init__ (`from finetuning import registry`) is an edge
    to the submodule it names, not to the package."""
    modules = {module_name(p, root): p for p in paths}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found = set()
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                subs = {f"{node.module}.{a.name}" for a in node.names} & set(modules)
                inside = name.startswith(node.module + ".")
                found |= subs if subs or inside else {node.module}
        graph[name] = {m for m in found if m in modules and m != name}
    cycles: list[str] = []
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        for other in sorted(graph[name]):
            if other in path:
                cycles.append(" -> ".join(path[path.index(other):] + [other]))
            elif other not in done:
                visit(other, path + [other])
        done.add(name)

    for name in sorted(graph):
        if name not in done:
            visit(name, [name])
    return cycles


def test_no_import_cycle_between_modules():
    assert import_cycles(project_modules()) == []


def test_the_cycle_check_finds_a_cycle(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("from pkg.a import x\n")
    (tmp_path / "pkg" / "a.py").write_text("from pkg import b\nx = 1\n")
    (tmp_path / "pkg" / "b.py").write_text("import pkg.a\n")
    paths = sorted((tmp_path / "pkg").glob("*.py"))
    assert import_cycles(paths, tmp_path) == ["pkg.a -> pkg.b -> pkg.a"]


def test_no_file_of_the_fine_tuning_core_is_over_500_lines():
    long = [f"{p.name} ({n} lines)" for p in sorted((REPO / "finetuning").glob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 500]
    assert long == []


def test_the_drivers_are_short_named_steps():
    """training/ and finetuning/ read as named steps: no function of more than 60 lines,
    and no closure that rebinds its enclosing function's variables (state lives in
    objects)."""
    long, rebinding = [], []
    for path in sorted([*(REPO / "training").glob("*.py"), *(REPO / "finetuning").glob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > 60:
                    long.append(f"{path.name}:{node.lineno} {node.name} ({lines} lines)")
            elif isinstance(node, ast.Nonlocal):
                rebinding.append(f"{path.name}:{node.lineno}")
    assert long == [] and rebinding == []
