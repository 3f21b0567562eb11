"""tuner.bench's layers: no import cycle, and each module imports only the layers below it.

Reads the source with `ast` (nothing is imported), so an import inside a function or under
`TYPE_CHECKING` counts as much as one at the top of a module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "tuner"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(module: str) -> set[str]:
    """The tuner modules `module` imports, anywhere in its source (a name imported from a
    package counts as its submodule when it is one)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
    return {name for name in found if name in MODULES and name != module}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


BENCH = sorted(m for m in MODULES if m.startswith("tuner.bench."))

# Each module of tuner.bench and the modules of the tuner it may import, bottom first.
ALLOWED = {
    "tuner.bench.records": set(),
    "tuner.bench.metrics": {"tuner.bench.records"},
    "tuner.bench.trace": {"tuner.errors"},
    "tuner.bench.trace_profile": {"tuner.bench.trace"},
    "tuner.bench.workload": {"tuner.bench.trace", "tuner.errors"},
    "tuner.bench.payload": {"tuner.bench.workload"},
    "tuner.bench.transport": set(),
    "tuner.bench.client": {
        "tuner.bench.transport",
        "tuner.bench.payload",
        "tuner.bench.records",
        "tuner.errors",
    },
    "tuner.bench.dispatch": {"tuner.bench.records"},
    "tuner.bench.wallclock": {"tuner.bench.client", "tuner.bench.dispatch", "tuner.bench.records"},
    "tuner.bench.modelled": {
        "tuner.bench.client",
        "tuner.bench.dispatch",
        "tuner.bench.records",
        "tuner.errors",
    },
}


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_runs_through_the_benchmark():
    graph = {module: _imports(module) for module in MODULES}
    through_bench = [c for c in _cycles(graph) if any(m.startswith("tuner.bench") for m in c)]
    assert not through_bench, f"import cycles (deferred imports included): {through_bench}"


def test_every_module_of_the_benchmark_has_its_layer():
    assert set(BENCH) - {"tuner.bench.command", "tuner.bench.runner"} == set(ALLOWED)


@pytest.mark.parametrize("module", sorted(ALLOWED))
def test_a_module_imports_only_the_layers_below_it(module):
    extra = sorted(_imports(module) - ALLOWED[module])
    assert not extra, f"{module} imports {extra}, above its layer"


def test_inside_the_package_nothing_imports_its_init():
    # tuner/bench/__init__.py imports every module: a module importing it back is a cycle.
    wrong = sorted(m for m in BENCH if "tuner.bench" in _imports(m))
    assert not wrong, wrong
