"""The import graph of agentrt's packages, read from the source (``ast``), never imported.

Module-level imports only: an import inside a function runs when the function does, and one
under ``if TYPE_CHECKING:`` never runs, so neither can form an import-time cycle nor pull a
framework into ``import agentrt``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (folder holding the top-level package, package's dotted name)
PACKAGES = [
    (ROOT, "agentrt"),
    (ROOT / "kernels", "agentrt_kernels"),
    (ROOT / "tools", "agentrt_tools"),
    (ROOT / "integrations" / "langchain", "langchain_agentrt"),
    (ROOT / "integrations" / "llama_index", "llama_index.llms.agentrt"),
    (ROOT / "integrations" / "llama_index", "llama_index.embeddings.agentrt"),
]
FRAMEWORKS = ("langchain", "langchain_core", "llama_index", "fastapi", "starlette", "uvicorn")


@dataclass(frozen=True)
class Module:
    """One source file: its dotted name, path, and whether it is a package's ``__init__``."""

    name: str
    path: Path
    is_package: bool


def iter_modules() -> Iterator[Module]:
    """Every ``.py`` file of :data:`PACKAGES`, named as Python imports it."""
    for base, package in PACKAGES:
        folder = base / package.replace(".", "/")
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(base).with_suffix("").parts
            is_package = parts[-1] == "__init__"
            yield Module(".".join(parts[:-1] if is_package else parts), path, is_package)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _module_level(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """Import statements that run at import time: top level, and inside top-level
    ``if``/``try``/``with`` blocks, except the body of ``if TYPE_CHECKING:``."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _module_level(node.body)
            yield from _module_level(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody):
                yield from _module_level(block)
            for handler in node.handlers:
                yield from _module_level(handler.body)
        elif isinstance(node, ast.With):
            yield from _module_level(node.body)


def module_imports(module: Module) -> Iterator[tuple[str, list[str]]]:
    """``(source, names)`` per module-level import of ``module``, relative sources resolved:
    ``import a.b`` gives ``("a.b", [])``, ``from a import x, y`` gives ``("a", ["x", "y"])``."""
    tree = ast.parse(module.path.read_text(), str(module.path))
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    for node in _module_level(tree.body):
        if isinstance(node, ast.Import):
            yield from ((alias.name, []) for alias in node.names)
            continue
        if node.level:
            parts = package.split(".")
            base = ".".join(parts[: len(parts) - node.level + 1])
            source = f"{base}.{node.module}" if node.module else base
        else:
            source = node.module or ""
        yield source, [alias.name for alias in node.names]


def imported_names(module: Module) -> Iterator[str]:
    """Dotted names ``module`` imports at module level; for ``from pkg import name`` both
    ``pkg`` and ``pkg.name`` (the latter may be a submodule)."""
    for source, names in module_imports(module):
        yield source
        yield from (f"{source}.{name}" for name in names if name != "*")


def import_graph() -> dict[str, set[str]]:
    """Module → the modules of :data:`PACKAGES` whose code must run for its module-level
    imports: ``import a.b`` and ``from a import b`` (``b`` a submodule) need ``a.b``;
    ``from a import name`` needs ``a`` itself (its ``__init__`` defines ``name``). So do the
    parent packages Python imports on the way (``a`` for ``a.b``), except the importer's own
    parents: they started before it ran, so nothing new runs for them (but ``from a import
    name`` inside ``a.x`` needs ``a``'s ``__init__`` to have defined ``name``: an edge)."""
    modules = list(iter_modules())
    known = {m.name for m in modules}
    graph: dict[str, set[str]] = {}
    for module in modules:
        own = set(_parents(module.name)) | {module.name}
        targets: set[str] = set()
        for source, names in module_imports(module):
            submodules = [f"{source}.{name}" for name in names]
            needed = {s for s in submodules if s in known}
            if not names or any(s not in known for s in submodules):
                needed.add(source)
            for target in needed:
                targets.update({target} | set(_parents(target)) - own)
        graph[module.name] = (targets & known) - {module.name}
    return graph


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One shortest cycle (first module repeated last) per strongly connected component of
    more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set(stack[stack.index(v):])
            del stack[stack.index(v):]
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_shortest_cycle(graph, c) for c in components]


def _shortest_cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    start = min(component)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if w not in came_from:
                    came_from[w] = v
                    following.append(w)
        frontier = following
    raise AssertionError(f"no cycle through {start} in {sorted(component)}")


def test_no_import_cycle():
    """No cycle among module-level imports: each makes import order matter (one module
    meets the other half-initialised) and is a layering error."""
    cycles = find_cycles(import_graph())
    assert not cycles, f"{len(cycles)} import cycle(s):\n" + "\n".join(
        " -> ".join(cycle) for cycle in cycles)


def test_the_cycle_finder_finds_each_cycle_once():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"f"}, "f": {"e"}}
    assert sorted(find_cycles(graph)) == [["a", "b", "c", "a"], ["e", "f", "e"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_framework_import_outside_the_server():
    """``import agentrt`` never pulls LangChain, LlamaIndex or FastAPI: the framework
    adapters live in ``integrations/``, the HTTP server in ``agentrt.server`` only."""
    offenders = []
    for module in iter_modules():
        if not module.name.startswith("agentrt.") or module.name.startswith("agentrt.server"):
            continue
        for name in imported_names(module):
            if name.split(".")[0] in FRAMEWORKS or name.startswith("agentrt.server"):
                offenders.append(f"{module.name} imports {name}")
    assert not offenders, "\n".join(sorted(set(offenders)))


def test_the_reader_sees_module_level_imports_only(tmp_path):
    source = (
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "import fastapi\n"
        "from . import sibling\n"
        "from ..core import registry as r\n"
        "if TYPE_CHECKING:\n    import langchain_core\n"
        "try:\n    import uvicorn\nexcept ImportError:\n    pass\n"
        "def f():\n    import llama_index\n"
    )
    path = tmp_path / "mod.py"
    path.write_text(source)
    module = Module("agentrt.agent.mod", path, False)
    names = set(imported_names(module))
    assert {"fastapi", "uvicorn", "agentrt.agent", "agentrt.agent.sibling",
            "agentrt.core.registry"} <= names
    assert "langchain_core" not in names and "llama_index" not in names
