"""The package's shape: imports point down the layers, no cycle, each module says its job.

Reads the source with `ast` (nothing is imported), so a function-level import counts as much as
one at the top of a module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "tuner"

# Top to bottom: a module imports its own unit and the units below it, never one above. The
# simulator stands apart (the tests below): it is reached through argv, HTTP and logs only.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("tuner.cli",),
    ("tuner.optimize", "tuner.init", "tuner.doctor"),  # the commands
    ("tuner.study",),  # the study loop, resolved once per run
    ("tuner.trial",),  # one trial
    ("tuner.predict",),  # what public facts predict
    ("tuner.space",),  # the search-space language
    ("tuner.results",),  # what trials leave, and its readers
    ("tuner.host", "tuner.launcher", "tuner.bench", "tuner.engines"),  # the edges
    ("tuner.errors", "tuner.signals", "tuner"),
)


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(path: Path) -> set[str]:
    """Every module the file imports, absolute, at any depth (functions included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from package import module` needs that module; `from module import name` the
            # module. (A package's __init__ runs before any of its modules either way.)
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in MODULES else node.module)
    return found


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _unit(module: str) -> str:
    """The layer unit a module belongs to: its longest prefix named in LAYERS."""
    units = [u for layer in LAYERS for u in layer if _within(module, u)]
    return max(units, key=len)


def _rank(unit: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if unit in layer)


def _known(name: str) -> str | None:
    """The tuner module an imported name stands for (`tuner.x.y.func` -> `tuner.x.y`)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _graph() -> dict[str, set[str]]:
    return {
        module: {m for name in _imports(path) if (m := _known(name)) and m != module}
        for module, path in MODULES.items()
    }


def test_the_package_has_the_subpackages_the_readme_maps():
    units = [u for layer in LAYERS for u in layer] + ["tuner.sim"]
    for package in units:
        assert package in MODULES, package
    unplaced = [m for m in MODULES if not _within(m, "tuner.sim") and _unit(m) == "tuner"]
    assert unplaced == ["tuner"], f"modules outside every layer: {unplaced}"


@pytest.mark.parametrize("module", [m for m in MODULES if not _within(m, "tuner.sim")])
def test_imports_point_down_the_layers(module):
    unit = _unit(module)
    upward = sorted(
        target
        for target in _graph()[module]
        if not _within(target, "tuner.sim") and _rank(_unit(target)) < _rank(unit)
    )
    assert not upward, f"{module} ({unit}) imports from a layer above it: {upward}"


def test_no_import_cycle_deferred_imports_included():
    graph = _graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_nothing_outside_the_simulator_imports_it():
    wrong = sorted(
        (module, name)
        for module, path in MODULES.items()
        if not _within(module, "tuner.sim")
        for name in _imports(path)
        if _within(name, "tuner.sim")
    )
    assert not wrong, f"the simulator is reached through argv, HTTP and logs only: {wrong}"


def test_the_simulator_imports_nothing_else_of_the_tuner():
    wrong = sorted(
        (module, name)
        for module, path in MODULES.items()
        if _within(module, "tuner.sim")
        for name in _imports(path)
        if _within(name, "tuner") and not _within(name, "tuner.sim")
    )
    assert not wrong, wrong


@pytest.mark.parametrize("module", list(MODULES))
def test_every_module_says_its_job(module):
    docstring = ast.get_docstring(ast.parse(MODULES[module].read_text(encoding="utf-8")))
    if docstring is None and MODULES[module].stat().st_size == 0:
        pytest.fail(f"{module} is empty: give it a one-sentence docstring")
    assert docstring, f"{module} has no docstring"
    first = docstring.strip().splitlines()[0]
    assert first.endswith((".", ".)")), f"{module}: the first line should be one sentence: {first}"
