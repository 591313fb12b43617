"""A compiled LlamaIndex query engine or retriever as one again (the ``llama_index`` front of
:func:`agentrt.graph.compile`).

>>> from agentrt.graph import compile
>>> fast = compile(index.as_query_engine(llm=AgentRT()))
>>> print(fast.query("How do I parse JSON?"))                 # a query engine
>>> tool = QueryEngineTool.from_defaults(fast, name="docs")    # goes where one goes
>>> fast.invoke("How do I parse JSON?")                        # the graph's own protocol

``query``/``aquery`` (``retrieve``/``aretrieve`` for a retriever) are LlamaIndex's own, with
its query events and instrumentation spans around the compiled run; ``invoke``/``ainvoke``/
``batch``/``abatch`` run the :class:`~agentrt.graph.CompiledGraph` directly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.response.schema import RESPONSE_TYPE
from llama_index.core.schema import NodeWithScore, QueryBundle

from agentrt.graph import CompiledGraph
from agentrt.graph.compiled import CompiledFront

__all__ = ["CompiledQueryEngine", "CompiledRetriever", "compiled_front"]


class _GraphCalls(CompiledFront):
    """The compiled graph's own call protocol, beside the framework's."""

    def invoke(self, value: Any) -> Any:
        """What ``aquery`` (``aretrieve``) returns for ``value`` (a string or QueryBundle)."""
        return self.compiled.invoke(value)

    async def ainvoke(self, value: Any) -> Any:
        """Async twin of :meth:`invoke`."""
        return await self.compiled.ainvoke(value)

    def batch(self, values: Sequence[Any], *, return_exceptions: bool = False) -> list[Any]:
        """One query per value, run concurrently so the engine batches their primitives."""
        return self.compiled.batch(values, return_exceptions=return_exceptions)

    async def abatch(self, values: Sequence[Any], *,
                     return_exceptions: bool = False) -> list[Any]:
        """Async twin of :meth:`batch`."""
        return await self.compiled.abatch(values, return_exceptions=return_exceptions)


class CompiledQueryEngine(_GraphCalls, BaseQueryEngine):
    """A query engine compiled into a primitive graph: ``query``/``aquery`` as before."""

    def __init__(self, compiled: CompiledGraph, source: BaseQueryEngine) -> None:
        self.compiled = compiled
        self.source = source
        """The query engine that was compiled."""
        super().__init__(callback_manager=getattr(source, "callback_manager", None))

    def _get_prompt_modules(self) -> dict[str, Any]:
        return {}

    def _query(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        return self.compiled.invoke(query_bundle)

    async def _aquery(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        return await self.compiled.ainvoke(query_bundle)


class CompiledRetriever(_GraphCalls, BaseRetriever):
    """A retriever compiled into a primitive graph: ``retrieve``/``aretrieve`` as before."""

    def __init__(self, compiled: CompiledGraph, source: BaseRetriever) -> None:
        self.compiled = compiled
        self.source = source
        """The retriever that was compiled."""
        super().__init__(callback_manager=getattr(source, "callback_manager", None))

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self.compiled.invoke(query_bundle)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return await self.compiled.ainvoke(query_bundle)


def compiled_front(compiled: CompiledGraph, source: Any) -> Any:
    """``compiled`` as the type of ``source``: a retriever, a query engine, or (anything
    else) the :class:`~agentrt.graph.CompiledGraph` itself."""
    if isinstance(source, BaseRetriever):
        return CompiledRetriever(compiled, source)
    if isinstance(source, BaseQueryEngine):
        return CompiledQueryEngine(compiled, source)
    return compiled
