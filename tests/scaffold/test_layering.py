"""The modules of recreate.scaffold import each other in one direction only: `model` (plain data) at
the bottom; files, render, validate, ops, store above it. Every import counts, the ones inside
functions and under TYPE_CHECKING too, so a lazy import cannot hide a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "recreate.scaffold"
SOURCE = Path(__file__).resolve().parents[2] / "recreate" / "scaffold"


def module_name(path: Path) -> str:
    return PACKAGE if path.stem == "__init__" else f"{PACKAGE}.{path.stem}"


def imported(node: ast.Import | ast.ImportFrom, modules: set[str]) -> set[str]:
    """The package modules that `node` makes Python import (a package's own __init__ only where a
    name comes from it rather than from a submodule)."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names} & modules
    base = node.module or ""
    if node.level:  # relative: every file here sits directly in the package
        parent = PACKAGE.rsplit(".", node.level - 1)[0]
        base = f"{parent}.{base}" if base else parent
    found = set()
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        if submodule in modules:
            found.add(submodule)
        elif base in modules:
            found.add(base)
    return found


def import_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports anywhere in its source."""
    files = {module_name(path): path for path in sorted(SOURCE.glob("*.py"))}
    modules = set(files)
    graph = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        edges: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                edges |= imported(node, modules)
        graph[name] = edges - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path that starts and ends at the same module, or None for a DAG."""
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return None
        path.append(node)
        for target in sorted(graph.get(node, ())):
            cycle = visit(target)
            if cycle:
                return cycle
        path.pop()
        done.add(node)
        return None

    for start in sorted(graph):
        cycle = visit(start)
        if cycle:
            return cycle
    return None


def test_scaffold_modules_form_a_dag():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle in recreate.scaffold: " + " -> ".join(
        name.removeprefix(f"{PACKAGE}.") for name in cycle
    )


def test_model_is_at_the_bottom():
    assert import_graph()[f"{PACKAGE}.model"] == set()


def test_graph_sees_every_kind_of_import():
    graph = import_graph()
    assert f"{PACKAGE}.model" in graph[f"{PACKAGE}.files"]  # top level
    assert f"{PACKAGE}.validate" in graph[f"{PACKAGE}.ops"]
    assert set(graph) >= {f"{PACKAGE}.{name}" for name in ("render", "store", "load", "cli")}
    tree = ast.parse("def f():\n    from . import files\n    from recreate.scaffold import Scaffold\n")
    nodes = [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    modules = set(graph)
    assert imported(nodes[0], modules) == {f"{PACKAGE}.files"}  # relative, inside a function
    assert imported(nodes[1], modules) == {PACKAGE}  # a name from the package's __init__


def test_find_cycle_names_the_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
