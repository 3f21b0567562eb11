"""The package's shape: imports follow the flow, modules stay small, each says its one job.

Reads the source with `ast` (nothing is imported), so a function-level import counts as much as
one at the top of a module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "tuner"
MAX_LINES = 400

# What a trial runs. The readers of a study (tuner.results) read the storage only.
TRIAL_PATH = ("tuner.search", "tuner.launcher", "tuner.bench", "tuner.optimize", "tuner.cli")


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
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_the_package_has_the_subpackages_the_readme_maps():
    for package in ("tuner.search", "tuner.results", "tuner.bench", "tuner.engines", "tuner.sim"):
        assert package in MODULES, package


@pytest.mark.parametrize("module", [m for m in MODULES if _within(m, "tuner.results")])
def test_results_modules_do_not_import_the_trial_path(module):
    wrong = sorted(
        name
        for name in _imports(MODULES[module])
        if any(_within(name, trial) for trial in TRIAL_PATH)
    )
    assert not wrong, f"{module} reads results only, but imports {wrong}"


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


@pytest.mark.parametrize("module", [m for m in MODULES if not _within(m, "tuner.sim")])
def test_modules_outside_the_simulator_are_at_most_400_lines(module):
    lines = len(MODULES[module].read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{module} has {lines} lines; split it along a seam"


@pytest.mark.parametrize("module", list(MODULES))
def test_every_module_says_its_job(module):
    docstring = ast.get_docstring(ast.parse(MODULES[module].read_text(encoding="utf-8")))
    if docstring is None and MODULES[module].stat().st_size == 0:
        pytest.fail(f"{module} is empty: give it a one-sentence docstring")
    assert docstring, f"{module} has no docstring"
    first = docstring.strip().splitlines()[0]
    assert first.endswith((".", ".)")), f"{module}: the first line should be one sentence: {first}"
