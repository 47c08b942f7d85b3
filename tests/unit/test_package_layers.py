"""The package's rooms import downward only, and no module imports itself round a circle.

Each module of python/pgjobq belongs to a room (a sub-package, or a top-level module); rooms are in
layers, read bottom-up.  An import (at module level or inside a function; not one under
``TYPE_CHECKING``) may name its own layer or one below, never one above.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

import pgjobq

PACKAGE = pathlib.Path(pgjobq.__file__).parent

# bottom-up: a room may import its own layer and the ones below
LAYERS: list[set[str]] = [
    {"pgjobq._errors", "pgjobq._job", "pgjobq._queries", "pgjobq._version"},
    {"pgjobq._client", "pgjobq._install", "pgjobq._tracing", "pgjobq._router"},
    {"pgjobq.aio"},
    {"pgjobq._worker", "pgjobq._tasks"},
    {"pgjobq.prometheus", "pgjobq.testing", "pgjobq.dashboard"},
    {"pgjobq._cli"},
    {"pgjobq", "pgjobq.__main__", "pgjobq.contrib"},
]


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def room(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2])


def layer(module: str) -> int:
    for index, rooms in enumerate(LAYERS):
        if room(module) in rooms:
            return index
    raise AssertionError(f"{module} is in no layer: add its room to LAYERS")


def imports(path: pathlib.Path) -> set[str]:
    """The pgjobq modules path imports, outside ``if TYPE_CHECKING:`` blocks."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(child) for stmt in node.body for child in ast.walk(stmt))
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("pgjobq"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pgjobq"):
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                found.add(candidate if candidate in MODULES else node.module)
    return found


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}
GRAPH = {name: imports(path) - {name} for name, path in MODULES.items()}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_module_imports_its_own_layer_or_below(module: str) -> None:
    upward = sorted(target for target in GRAPH[module] if layer(target) > layer(module))
    assert not upward, f"{module} (layer {layer(module)}) imports from a layer above: {upward}"


def test_no_module_imports_itself_round_a_circle() -> None:
    circles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in sorted(GRAPH.get(module, ())):
            if target not in MODULES:
                continue
            if state.get(target) == 1:
                circles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(MODULES):
        if module not in state:
            visit(module)
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def test_the_layers_name_every_room() -> None:
    assert {room(module) for module in MODULES} <= set().union(*LAYERS)
