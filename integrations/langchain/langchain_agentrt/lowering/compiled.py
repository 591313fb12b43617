"""A compiled LangChain chain as a LangChain ``Runnable`` (the ``langchain_core`` front of
:func:`agentrt.graph.compile`).

>>> from agentrt.graph import compile
>>> fast = compile(prompt | ChatAgentRT() | StrOutputParser())
>>> chain = fast | (lambda text: text.upper())        # composes like any runnable
>>> fast.with_config(run_name="qa").invoke({"question": "..."})
>>> async for event in fast.astream_events({"question": "..."}, version="v2"): ...

Runs go through the :class:`~agentrt.graph.CompiledGraph` (``invoke``/``ainvoke``/``batch``/
``abatch``, one root run per call for the config's callbacks); everything else a runnable
has — ``|``, ``with_config``/``with_retry``/``with_fallbacks``, ``stream``/``astream`` (the
result as one chunk), ``astream_events``, ``batch_as_completed`` — is LangChain's own on top
of those. The input and output schemas, name and drawing are the source chain's, so code that
reads them (a server building its request model from ``get_input_schema()``) sees what it saw
before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.graph import Graph as DrawableGraph
from pydantic import BaseModel

from agentrt.graph import CompiledGraph
from agentrt.graph.compiled import CompiledFront

__all__ = ["CompiledRunnable"]


class CompiledRunnable(CompiledFront, Runnable[Any, Any]):
    """``source`` compiled into a primitive graph, callable wherever ``source`` was."""

    def __init__(self, compiled: CompiledGraph, source: Runnable) -> None:
        self.compiled = compiled
        """The :class:`~agentrt.graph.CompiledGraph` every call runs."""
        self.source = source
        """The chain that was compiled (its schemas and drawing are this runnable's)."""
        self.name = source.get_name()

    # --- calls -------------------------------------------------------------------------------
    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Run the graph on ``input``; ``config``'s callbacks, tags, metadata and
        ``run_name`` reach one root run and, below it, every node's runnable."""
        return self.compiled.invoke(input, config)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None,
                      **kwargs: Any) -> Any:
        """Async twin of :meth:`invoke`."""
        return await self.compiled.ainvoke(input, config)

    def batch(self, inputs: list[Any], config: RunnableConfig | list[RunnableConfig] | None = None,
              *, return_exceptions: bool = False, **kwargs: Any) -> list[Any]:
        """One query per input, run concurrently so the engine batches their primitives
        (at most ``config["max_concurrency"]`` at once); ``config`` is one or one per input."""
        return self.compiled.batch(inputs, config, return_exceptions=return_exceptions)

    async def abatch(self, inputs: list[Any],
                     config: RunnableConfig | list[RunnableConfig] | None = None, *,
                     return_exceptions: bool = False, **kwargs: Any) -> list[Any]:
        """Async twin of :meth:`batch`."""
        return await self.compiled.abatch(inputs, config, return_exceptions=return_exceptions)

    # --- what the source chain declares ------------------------------------------------------
    @property
    def InputType(self) -> Any:  # noqa: N802 - LangChain's name
        return self.source.InputType

    @property
    def OutputType(self) -> Any:  # noqa: N802 - LangChain's name
        return self.source.OutputType

    def get_input_schema(self, config: RunnableConfig | None = None) -> type[BaseModel]:
        return self.source.get_input_schema(config)

    def get_output_schema(self, config: RunnableConfig | None = None) -> type[BaseModel]:
        return self.source.get_output_schema(config)

    @property
    def config_specs(self) -> Sequence[Any]:
        return self.source.config_specs

    def get_graph(self, config: RunnableConfig | None = None) -> DrawableGraph:
        """The source chain's drawing (``.graph`` is the primitive graph)."""
        return self.source.get_graph(config)
