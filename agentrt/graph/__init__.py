"""agentrt.graph: chains lowered into primitive dataflow graphs (Teola) and semantic
functions (Parrot).

>>> from agentrt.graph import compile
>>> fast = compile(chain)          # a LangChain runnable or a LlamaIndex query engine
>>> fast.invoke({"question": "..."}) == chain.invoke({"question": "..."})
>>> print(fast.graph)              # the optimised primitive graph (or .graph.to_mermaid())

:func:`lower` turns a framework object into a :class:`Graph` (a registry of lowerings by
the framework's package, imported only when such an object shows up); :func:`optimize`
applies the passes; :class:`GraphRuntime` runs graphs node by node on anyio.
"""

from __future__ import annotations

import importlib
from typing import Any

from agentrt.graph.compiled import CompiledGraph, compile, lower, register_lowering
from agentrt.graph.ir import Graph, Kind, Node
from agentrt.graph.passes import (
    decompose_stages,
    optimize,
    pipeline_decoding,
    prune_dependencies,
    split_prefill,
)
from agentrt.graph.runtime import SKIPPED, Failed, GraphRuntime, NodeContext, current_node
from agentrt.graph.streams import ItemStream

__all__ = [
    "SKIPPED", "CompiledGraph", "Failed", "Graph", "GraphRuntime", "ItemStream", "Kind", "Node",
    "NodeContext", "Perf", "SemanticSession", "SemanticVariable", "compile", "current_node",
    "decompose_stages", "lower", "optimize", "pipeline_decoding", "prune_dependencies",
    "register_lowering", "semantic_function", "split_prefill",
]

_SEMANTIC = ("Perf", "SemanticSession", "SemanticVariable", "semantic_function")


def __getattr__(name: str) -> Any:
    if name in _SEMANTIC:
        return getattr(importlib.import_module("agentrt.graph.semantic"), name)
    raise AttributeError(f"module 'agentrt.graph' has no attribute {name!r}")
