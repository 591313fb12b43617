"""Nothing outside ``agentrt/engine/`` reads the engine's internals (``engine.core``).

Front ends use the :class:`agentrt.Engine` surface (``encode``/``decode``, ``model_info``,
``max_model_len``, ``load()``, the output pair's counters) or a backend. This test parses
every module of the runtime, the integrations, the kernels, the tools and the benchmarks and
lists each ``.core`` read on an engine-like object — ``engine.core``, ``self.engine.core``,
``get_engine().core``, ``eng.core`` — never a module's ``.core`` (``agentrt.core``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("agentrt", "integrations", "kernels", "tools", "benchmarks")
ALLOWED = ROOT / "agentrt" / "engine"
_ENGINE_NAME = re.compile(r"engine|^eng$|^e$", re.IGNORECASE)


def _terminal_name(node: ast.expr) -> str | None:
    """The identifier an expression ends in: ``a.b.engine`` → engine, ``get_engine()`` →
    get_engine."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def _module_names(tree: ast.Module) -> set[str]:
    """Names bound to modules by import statements (``import agentrt`` → agentrt)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def core_reads(source: str) -> list[int]:
    """Line numbers of ``.core`` read on an engine-like object in ``source``."""
    tree = ast.parse(source)
    modules = _module_names(tree)
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or node.attr != "core":
            continue
        name = _terminal_name(node.value)
        if isinstance(node.value, ast.Name) and name in modules:
            continue  # agentrt.core, a module
        if name is not None and _ENGINE_NAME.search(name):
            lines.append(node.lineno)
    return sorted(set(lines))


def test_the_scan_finds_engine_core_and_nothing_else():
    source = ("import agentrt\nimport agentrt.core\nfrom prometheus_client import core\n"
              "a = engine.core\nb = self.engine.core.requests\nc = get_engine().core\n"
              "d = agentrt.core.request\ne = core.Metric\nf = self.core\ng = state.engine.core\n")
    assert core_reads(source) == [4, 5, 6, 10]


def test_nothing_outside_the_engine_reads_engine_core():
    found = []
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            if path.is_relative_to(ALLOWED) or ".venv" in path.parts:
                continue
            rel = path.relative_to(ROOT)
            found += [f"{rel}:{line}" for line in core_reads(path.read_text())]
    assert not found, "engine internals read outside agentrt/engine/ (use the Engine " \
                      "surface or a backend):\n" + "\n".join(found)
