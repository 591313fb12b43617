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


def imported_names(module: Module) -> Iterator[str]:
    """Dotted names ``module`` imports at module level, relative imports resolved; for
    ``from pkg import name`` both ``pkg`` and ``pkg.name`` (the latter may be a submodule)."""
    tree = ast.parse(module.path.read_text(), str(module.path))
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    for node in _module_level(tree.body):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
            continue
        if node.level:
            parts = package.split(".")
            base = ".".join(parts[: len(parts) - node.level + 1])
            source = f"{base}.{node.module}" if node.module else base
        else:
            source = node.module or ""
        yield source
        yield from (f"{source}.{alias.name}" for alias in node.names if alias.name != "*")


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
    names = set(imported_names(Module("agentrt.agent.mod", path, False)))
    assert {"fastapi", "uvicorn", "agentrt.agent", "agentrt.agent.sibling",
            "agentrt.core.registry"} <= names
    assert "langchain_core" not in names and "llama_index" not in names
