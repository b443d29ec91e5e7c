"""No package of the service imports itself round in a circle: a module that needs one of its importers'
types takes a small shared type (worker/attempts/deadline.py's Attempt) or a helper both import
(core/upsert.py). pyproject.toml's import contracts keep the layers; this keeps each layer a tree."""

from __future__ import annotations

import grimp
import pytest

PACKAGES = ("app", "core", "worker", "jobspec", "trainers")


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*PACKAGES)


def cycles(graph: grimp.ImportGraph, package: str) -> list[list[str]]:
    """Each circle of imports among `package`'s modules, as the modules on it; a depth-first search."""
    modules = {m for m in graph.modules if m == package or m.startswith(f"{package}.")}
    found: list[list[str]] = []
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            found.append(path[path.index(module) :])
            return
        if module in done:
            return
        for imported in sorted(graph.find_modules_directly_imported_by(module) & modules):
            visit(imported, [*path, module])
        done.add(module)

    for module in sorted(modules):
        visit(module, [])
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_no_package_imports_itself_in_a_circle(graph: grimp.ImportGraph, package: str) -> None:
    assert cycles(graph, package) == []


def test_the_search_finds_a_circle() -> None:
    graph = grimp.build_graph("worker")
    graph.add_import(importer="worker.publish", imported="worker.uploads")
    assert ["worker.uploads", "worker.publish"] in cycles(graph, "worker")
