"""agentrt.graph: chains lowered into primitive dataflow graphs (Teola).

>>> from agentrt.graph import compile
>>> fast = compile(chain)          # a LangChain runnable or a LlamaIndex query engine
>>> fast.invoke({"question": "..."}) == chain.invoke({"question": "..."})
>>> print(fast.graph)              # the optimised primitive graph (or .graph.to_mermaid())

:func:`lower` turns a framework object into a :class:`Graph` (a registry of lowerings by
the framework's package, imported only when such an object shows up); :func:`optimize`
applies the passes; :class:`GraphRuntime` runs graphs node by node on anyio. Parrot's
semantic functions are their own subpackage, :mod:`agentrt.semantic`.
"""

from __future__ import annotations

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
    "NodeContext", "compile", "current_node", "decompose_stages", "lower", "optimize",
    "pipeline_decoding", "prune_dependencies", "register_lowering", "split_prefill",
]

_MOVED_TO_SEMANTIC = frozenset({"Perf", "SemanticSession", "SemanticVariable",
                                "semantic_function"})
"""Names this package exported before semantic functions got their own subpackage."""


def __getattr__(name: str) -> object:
    """``from agentrt.graph import SemanticSession`` keeps working (imported on first use,
    so ``agentrt.graph`` and ``agentrt.semantic`` never import each other at load time)."""
    if name in _MOVED_TO_SEMANTIC:
        import agentrt.semantic

        return getattr(agentrt.semantic, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
