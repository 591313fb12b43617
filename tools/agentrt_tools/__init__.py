"""agentrt's partial-execution tool plugins: python_repl, sqlite, search, calculator.

Each tool implements :class:`agentrt.agent.plugin.Tool` and is registered by name in
:data:`agentrt.agent.TOOLS` (imported lazily), so ``ToolRuntime(["python_repl", "calculator"])``
or ``create_tool("sqlite", path="shop.db")`` is all a user writes.
"""

from __future__ import annotations

__all__ = ["CalculatorTool", "PythonReplTool", "SearchTool", "SqliteTool"]


def __getattr__(name: str) -> object:
    modules = {
        "CalculatorTool": "agentrt_tools.calculator",
        "PythonReplTool": "agentrt_tools.python_repl",
        "SearchTool": "agentrt_tools.search",
        "SqliteTool": "agentrt_tools.sqlite",
    }
    if name not in modules:
        raise AttributeError(name)
    import importlib

    return getattr(importlib.import_module(modules[name]), name)
