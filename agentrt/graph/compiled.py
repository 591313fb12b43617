"""compile(chain): lower a framework object, optimise its graph, run it like the original.

Lowerings are registered by the top-level package of the object's class (``langchain_core``
→ :mod:`langchain_agentrt.lowering`, ``llama_index`` → :mod:`llama_index.llms.agentrt.
lowering`) and imported only when such an object is compiled. A lowering is called as
``lowering(obj, backend=backend)``: its LLM primitives run through the one call object
(:class:`agentrt.backends.call.Call`) on ``backend`` — None: on the chain's own (the backend
of its ``ChatAgentRT`` / ``AgentRT``, by default the local engine).

A package may also register a *front* (:data:`FRONTS`): ``front(compiled, obj)`` wraps the
:class:`CompiledGraph` in the framework's own type, so that the result goes where ``obj``
went — a LangChain ``Runnable`` (``|`` composition, ``with_config``, ``astream_events``,
LangServe), a LlamaIndex query engine (``query`` / ``aquery``).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import anyio

from agentrt.core.registry import Registry
from agentrt.graph.ir import Graph
from agentrt.graph.passes import optimize
from agentrt.graph.runtime import GraphRuntime

if TYPE_CHECKING:
    from agentrt.backends.base import Backend

__all__ = ["FRONTS", "LOWERINGS", "CompiledFront", "CompiledGraph", "compile", "lower",
           "register_lowering"]

LOWERINGS: Registry[Callable[..., Graph]] = Registry("lowering", {
    "langchain_core": "langchain_agentrt.lowering:lower_runnable",
    "langchain": "langchain_agentrt.lowering:lower_runnable",
    "langchain_agentrt": "langchain_agentrt.lowering:lower_runnable",
    "llama_index": "llama_index.llms.agentrt.lowering:lower_query_engine",
})
"""Top-level package of a class in the object's MRO → its lowering (or "module:function")."""

FRONTS: Registry[Callable[[CompiledGraph, Any], Any]] = Registry("compiled front", {
    "langchain_core": "langchain_agentrt.lowering.compiled:CompiledRunnable",
    "langchain": "langchain_agentrt.lowering.compiled:CompiledRunnable",
    "langchain_agentrt": "langchain_agentrt.lowering.compiled:CompiledRunnable",
    "llama_index": "llama_index.llms.agentrt.compiled:compiled_front",
})
"""The same packages → ``front(compiled, obj)``: the compiled graph as the framework's own
type (a package without one gets the :class:`CompiledGraph` itself)."""

_batches = itertools.count()


def register_lowering(package: str, lowering: str | Callable[..., Graph],
                      front: str | Callable[[CompiledGraph, Any], Any] | None = None) -> None:
    """Lower objects whose classes come from ``package`` with ``lowering`` (called as
    ``lowering(obj, backend=backend)``); ``front``, if given, wraps what :func:`compile`
    returns for them (called as ``front(compiled, obj)``)."""
    LOWERINGS.register(package, lowering)
    if front is not None:
        FRONTS.register(package, front)


def _package(obj: Any) -> str:
    """The registered package of the first class in ``obj``'s MRO that has a lowering."""
    for cls in type(obj).__mro__:
        package = cls.__module__.split(".")[0]
        if package in LOWERINGS:
            return package
    raise TypeError(f"don't know how to lower a {type(obj).__name__}; register a lowering "
                    f"for its package with agentrt.graph.register_lowering")


def lower(obj: Any, *, backend: Backend | None = None) -> Graph:
    """The (unoptimised) primitive graph of a framework object; its LLM primitives run on
    ``backend`` (None: the backend of the object's own agentrt model)."""
    return LOWERINGS.get(_package(obj))(obj, backend=backend)


def compile(obj: Any, *, backend: Backend | None = None,  # noqa: A001
            optimized: bool = True) -> Any:
    """Lower ``obj`` and (by default) optimise the graph; the result runs like ``obj``.

    The result is a :class:`CompiledGraph`, wrapped in the framework's own type where its
    package registered a front (:data:`FRONTS`): a LangChain runnable compiles to a
    ``Runnable``, a LlamaIndex query engine to a query engine (each with ``.graph``, the
    primitive graph, and ``.compiled``, the :class:`CompiledGraph`).

    ``backend`` (e.g. ``agentrt.get_backend("sglang", url=...)``) runs the chain's agentrt
    model calls there instead of on the model's own backend; other models run as they are.
    """
    package = _package(obj)
    graph = LOWERINGS.get(package)(obj, backend=backend)
    compiled = CompiledGraph(optimize(graph) if optimized else graph)
    return FRONTS.get(package)(compiled, obj) if package in FRONTS else compiled


class CompiledGraph:
    """A lowered chain with a runnable's call protocol: invoke/ainvoke, batch/abatch (with
    ``return_exceptions``), stream/astream (the result as one chunk), each taking the
    framework's per-call ``config`` (LangChain: callbacks, tags, run_name, max_concurrency).
    """

    def __init__(self, graph: Graph, runtime: GraphRuntime | None = None) -> None:
        self.graph = graph
        self.runtime = runtime or GraphRuntime()

    async def ainvoke(self, value: Any, config: Any = None, *,
                      query_id: str | None = None) -> Any:
        """Run the graph on ``value``; ``config`` reaches every runnable the graph runs."""
        async def run(value: Any, child_config: Any) -> Any:
            return await self.runtime.arun(self.graph, value, query_id=query_id,
                                           config=child_config)
        if self.graph.around is None:
            return await run(value, config)
        return await self.graph.around(run, value, config)

    def invoke(self, value: Any, config: Any = None, **kwargs: Any) -> Any:
        """Sync twin of :meth:`ainvoke` (inside a running event loop: blocks it, as
        LangChain's ``invoke`` does, running the graph on a loop of its own thread)."""
        return _run_sync(lambda: self.ainvoke(value, config, **kwargs))

    async def abatch(self, values: Sequence[Any], config: Any = None, *,
                     return_exceptions: bool = False) -> list[Any]:
        """Run one query per value, concurrently (at most ``config["max_concurrency"]`` at
        once): the engine batches their primitives topology-aware (each query is one
        bucket). ``config`` is one for all or a list, one per value. An error fails the
        batch, or with ``return_exceptions`` takes its value's slot."""
        values = list(values)
        configs = config if isinstance(config, list) else [config] * len(values)
        if len(configs) != len(values):
            raise ValueError(f"{len(configs)} configs for {len(values)} inputs")
        limit = max((c or {}).get("max_concurrency") or 0 for c in configs or [None])
        slots = anyio.CapacityLimiter(limit or max(len(values), 1))
        tag = next(_batches)
        out: list[Any] = [None] * len(values)

        async def one(i: int) -> None:
            async with slots:
                try:
                    out[i] = await self.ainvoke(values[i], configs[i],
                                                query_id=f"batch{tag}-q{i}")
                except Exception as exc:  # noqa: BLE001 - reported in its slot or raised below
                    out[i] = _Raised(exc)
        async with anyio.create_task_group() as tg:
            for i in range(len(values)):
                tg.start_soon(one, i)
        for i, v in enumerate(out):
            if isinstance(v, _Raised):
                if not return_exceptions:
                    raise v.error
                out[i] = v.error
        return out

    def batch(self, values: Sequence[Any], config: Any = None, *,
              return_exceptions: bool = False) -> list[Any]:
        """Sync twin of :meth:`abatch`."""
        return _run_sync(lambda: self.abatch(list(values), config,
                                             return_exceptions=return_exceptions))

    async def astream(self, value: Any, config: Any = None) -> AsyncIterator[Any]:
        """The result as one chunk (a compiled graph does not stream token by token)."""
        yield await self.ainvoke(value, config)

    def stream(self, value: Any, config: Any = None) -> Iterator[Any]:
        """Sync twin of :meth:`astream`."""
        yield self.invoke(value, config)

    def __repr__(self) -> str:
        return f"CompiledGraph({self.graph.name!r}, {len(self.graph)} nodes)"


class CompiledFront:
    """Base of a framework's front (see :data:`FRONTS`): it holds the :class:`CompiledGraph`
    as ``compiled`` and shows its graph and runtime."""

    compiled: CompiledGraph

    @property
    def graph(self) -> Graph:
        """The (optimised) primitive graph the calls run."""
        return self.compiled.graph

    @property
    def runtime(self) -> GraphRuntime:
        """What runs the graph (``last_trace``: the nodes the last run ran)."""
        return self.compiled.runtime

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.graph.name!r}, {len(self.graph)} nodes)"


class _Raised:
    """An error a batch item raised (kept apart from a value that is an exception)."""

    def __init__(self, error: Exception) -> None:
        self.error = error


def _run_sync(fn: Callable[[], Awaitable[Any]]) -> Any:
    """``anyio.run(fn)``; from inside a running event loop, on a thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return anyio.run(fn)
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(anyio.run, fn).result()
