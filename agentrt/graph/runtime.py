"""The graph scheduler: runs a lowered graph on anyio, each node as soon as its inputs are.

Every node is a task that waits for its parents, then awaits its op with their values, so
independent branches overlap (retrieval while the instruction is prefilled, embedding while
the query is expanded). LLM primitives reach their backend through the one call object
(:class:`agentrt.backends.call.Call`), whose ``RequestOptions`` carry the query (``group``)
and the node's depth to the sink (:data:`agentrt.backends.call.request_tags`, set here per
node); the local engine's scheduler batches primitives of many graphs and queries
topology-aware (Teola Alg. 2; :func:`agentrt.scheduler.policies.topology_order`).

Values between nodes live in a per-run object store. Two markers travel like values:
``SKIPPED`` (a branch not taken) and :class:`Failed` (an error); a node that reads one
becomes one without running, unless it declares ``attrs["select"]`` (picks the first real
value: branch join, fallback join) or ``attrs["catch"]`` (a fallback gate).
"""

from __future__ import annotations

import contextvars
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from agentrt.backends.call import request_tags
from agentrt.graph.ir import Graph, Node

__all__ = ["SKIPPED", "Failed", "GraphRuntime", "NodeContext", "current_node", "gather"]

SKIPPED: Any = type("Skipped", (), {"__repr__": lambda self: "SKIPPED"})()
"""The value of a node on a branch that was not taken."""


@dataclass(frozen=True)
class Failed:
    """The value of a node that raised (or read a failure)."""

    error: BaseException
    node: str


@dataclass
class NodeContext:
    """What an op may know about the run it is part of."""

    node: Node
    query_id: str
    store: dict[str, Any]
    """Per-run scratch space shared by the run's ops; callables appended to
    ``store["cleanup"]`` run when the run ends, however it ends."""
    spawn: Callable[[Callable[[], Awaitable[Any]]], None]
    """Start a background task that lives as long as the run."""
    config: Any = None
    """The caller's per-call config (the framework's own, e.g. LangChain's
    ``RunnableConfig``): ops pass it to the runnables they run."""


_node: contextvars.ContextVar[NodeContext | None] = contextvars.ContextVar(
    "agentrt_graph_node", default=None)
_queries = itertools.count()


def current_node() -> NodeContext:
    """The context of the node whose op is running (raises outside the graph runtime)."""
    ctx = _node.get()
    if ctx is None:
        raise RuntimeError("not inside a graph node's op")
    return ctx


@dataclass
class _Run:
    graph: Graph
    query_id: str
    values: dict[int, Any] = field(default_factory=dict)
    done: dict[int, anyio.Event] = field(default_factory=dict)
    store: dict[str, Any] = field(default_factory=dict)
    trace: list[tuple[str, float, float]] = field(default_factory=list)
    depth_offset: int = 0
    config: Any = None


class GraphRuntime:
    """Runs graphs; one runtime may run many graphs and queries at once."""

    def __init__(self) -> None:
        self.last_trace: list[tuple[str, float, float]] = []
        """(node id, start, end) of the last run's ops, in monotonic seconds."""
        self.last_store: dict[str, Any] = {}
        """The last run's object store (e.g. ``sessions`` its partial prefills opened)."""

    async def arun(self, graph: Graph, value: Any, *, query_id: str | None = None,
                   depth_offset: int = 0, config: Any = None) -> Any:
        """Run ``graph`` on ``value``; returns the output node's value or raises its error.

        A graph run inside a node (one item of a map) passes its query and the node's depth
        as ``depth_offset``, so its requests keep their place in the outer query's bucket.
        ``config`` reaches the ops as :attr:`NodeContext.config`.
        """
        graph.compute_depths()
        run = _Run(graph, query_id or f"query-{next(_queries)}", depth_offset=depth_offset,
                   config=config)
        for node in graph.nodes:
            run.done[id(node)] = anyio.Event()
        try:
            async with anyio.create_task_group() as tg:
                spawn = tg.start_soon
                for node in graph.topological():
                    tg.start_soon(self._run_node, run, node, value, spawn)
        finally:
            for cleanup in run.store.get("cleanup", []):
                cleanup()  # e.g. a prefilled session nobody continued: free its KV
        self.last_trace, self.last_store = run.trace, run.store
        out = run.values[id(graph.output)]
        if isinstance(out, Failed):
            raise out.error
        if out is SKIPPED:
            raise RuntimeError(f"graph {graph.name!r}: no branch produced the output")
        return out

    def run(self, graph: Graph, value: Any, **kwargs: Any) -> Any:
        """Sync twin of :meth:`arun` (not from inside a running event loop)."""
        return anyio.run(lambda: self.arun(graph, value, **kwargs))

    async def _run_node(self, run: _Run, node: Node, value: Any, spawn) -> None:
        try:
            for parent in node.parents:
                await run.done[id(parent)].wait()
            run.values[id(node)] = await self._evaluate(run, node, value, spawn)
        finally:
            run.done[id(node)].set()

    async def _evaluate(self, run: _Run, node: Node, value: Any, spawn) -> Any:
        if node is run.graph.input:
            return value
        args = {port: run.values[id(src)] for port, src in node.inputs.items()}
        marker = _marker(args.values(), node)
        if marker is not None:
            return marker
        ctx = NodeContext(node, run.query_id, run.store, spawn, run.config)
        token = _node.set(ctx)
        tags = request_tags.set({"group": run.query_id, "depth": node.depth + run.depth_offset})
        start = anyio.current_time()
        try:
            return await node.op(args)
        except Exception as exc:  # noqa: BLE001 - a failing node fails its readers, not the run
            return Failed(exc, node.id)
        finally:
            run.trace.append((node.id, start, anyio.current_time()))
            request_tags.reset(tags)
            _node.reset(token)


async def gather(fn: Callable[[Any], Awaitable[Any]], items: list[Any]) -> list[Any]:
    """``[await fn(x) for x in items]``, the calls running concurrently."""
    out: list[Any] = [None] * len(items)

    async def one(i: int) -> None:
        out[i] = await fn(items[i])
    async with anyio.create_task_group() as tg:
        for i in range(len(items)):
            tg.start_soon(one, i)
    return out


def _marker(values, node: Node) -> Any:
    """SKIPPED or the first Failed among ``values`` unless the node handles them."""
    if node.attrs.get("select") or node.attrs.get("catch"):
        return None
    for v in values:
        if v is SKIPPED:
            return SKIPPED
    for v in values:
        if isinstance(v, Failed):
            return v
    return None
