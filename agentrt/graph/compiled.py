"""compile(chain): lower a framework object, optimise its graph, run it like the original.

Lowerings are registered by the top-level package of the object's class (``langchain_core``
→ :mod:`langchain_agentrt.lowering`, ``llama_index`` → :mod:`llama_index.llms.agentrt.
lowering`) and imported only when such an object is compiled. A lowering is called as
``lowering(obj, backend=backend)``: its LLM primitives run through the one call object
(:class:`agentrt.backends.call.Call`) on ``backend`` — None: on the chain's own (the backend
of its ``ChatAgentRT`` / ``AgentRT``, by default the local engine).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from agentrt.core.registry import Registry
from agentrt.graph.ir import Graph
from agentrt.graph.passes import optimize
from agentrt.graph.runtime import GraphRuntime

if TYPE_CHECKING:
    from agentrt.backends.base import Backend

__all__ = ["LOWERINGS", "CompiledGraph", "compile", "lower", "register_lowering"]

LOWERINGS: Registry[Callable[..., Graph]] = Registry("lowering", {
    "langchain_core": "langchain_agentrt.lowering:lower_runnable",
    "langchain": "langchain_agentrt.lowering:lower_runnable",
    "langchain_agentrt": "langchain_agentrt.lowering:lower_runnable",
    "llama_index": "llama_index.llms.agentrt.lowering:lower_query_engine",
})
"""Top-level package of a class in the object's MRO → its lowering (or "module:function")."""

_batches = itertools.count()


def register_lowering(package: str, lowering: str | Callable[..., Graph]) -> None:
    """Lower objects whose classes come from ``package`` with ``lowering`` (called as
    ``lowering(obj, backend=backend)``)."""
    LOWERINGS.register(package, lowering)


def lower(obj: Any, *, backend: Backend | None = None) -> Graph:
    """The (unoptimised) primitive graph of a framework object; its LLM primitives run on
    ``backend`` (None: the backend of the object's own agentrt model)."""
    for cls in type(obj).__mro__:
        package = cls.__module__.split(".")[0]
        if package in LOWERINGS:
            return LOWERINGS.get(package)(obj, backend=backend)
    raise TypeError(f"don't know how to lower a {type(obj).__name__}; register a lowering "
                    f"for its package with agentrt.graph.register_lowering")


def compile(obj: Any, *, backend: Backend | None = None,  # noqa: A001
            optimized: bool = True) -> CompiledGraph:
    """Lower ``obj`` and (by default) optimise the graph; the result runs like ``obj``.

    ``backend`` (e.g. ``agentrt.get_backend("sglang", url=...)``) runs the chain's agentrt
    model calls there instead of on the model's own backend; other models run as they are.
    """
    graph = lower(obj, backend=backend)
    return CompiledGraph(optimize(graph) if optimized else graph)


class CompiledGraph:
    """A lowered chain with the call protocol of a runnable: invoke/ainvoke/batch/abatch."""

    def __init__(self, graph: Graph, runtime: GraphRuntime | None = None) -> None:
        self.graph = graph
        self.runtime = runtime or GraphRuntime()

    async def ainvoke(self, value: Any, *, query_id: str | None = None) -> Any:
        """Run the graph on ``value``."""
        return await self.runtime.arun(self.graph, value, query_id=query_id)

    def invoke(self, value: Any, **kwargs: Any) -> Any:
        """Sync twin of :meth:`ainvoke` (not from inside a running event loop)."""
        return anyio.run(lambda: self.ainvoke(value, **kwargs))

    async def abatch(self, values: Sequence[Any]) -> list[Any]:
        """Run one query per value, concurrently: the engine batches their primitives
        topology-aware (each query is one bucket)."""
        tag = next(_batches)
        out: list[Any] = [None] * len(values)

        async def one(i: int) -> None:
            out[i] = await self.ainvoke(values[i], query_id=f"batch{tag}-q{i}")
        async with anyio.create_task_group() as tg:
            for i in range(len(values)):
                tg.start_soon(one, i)
        return out

    def batch(self, values: Sequence[Any]) -> list[Any]:
        """Sync twin of :meth:`abatch`."""
        return anyio.run(self.abatch, list(values))

    def __repr__(self) -> str:
        return f"CompiledGraph({self.graph.name!r}, {len(self.graph)} nodes)"

