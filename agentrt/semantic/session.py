"""SemanticSession (Parrot): one application DAG of semantic-function calls, run as a whole.

Calls made inside ``with SemanticSession(...)`` only submit; the first ``get`` / ``aget`` /
``run`` starts an executor that dispatches a request as soon as its inputs have values —
values flow between requests without a client round trip — with per-request objectives
deduced from the criteria given to ``get`` (:mod:`agentrt.semantic.dag`) and prompt prefixes
shared by ready requests filled once (:mod:`agentrt.semantic.prefixes`).
"""

from __future__ import annotations

import contextvars
import itertools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
import anyio.from_thread
import anyio.to_thread

from agentrt.backends.call import as_backend
from agentrt.semantic.dag import Node, Perf, SessionDAG
from agentrt.semantic.executor import DagExecutor, SemanticStats
from agentrt.semantic.variables import SemanticVariable

if TYPE_CHECKING:
    from agentrt.backends.base import Backend
    from agentrt.engine.engine import Engine
    from agentrt.semantic.functions import SemanticFunction

__all__ = ["SemanticSession", "current_session"]

_current: contextvars.ContextVar[SemanticSession | None] = contextvars.ContextVar(
    "agentrt_semantic_session", default=None)
_session_ids = itertools.count()


def current_session() -> SemanticSession | None:
    """The session entered innermost in this context (where a call is recorded), if any."""
    return _current.get()


class SemanticSession:
    """One application DAG: records semantic-function calls, then runs them on ``backend``.

    ``backend`` is a :class:`~agentrt.backends.base.Backend` (e.g.
    ``agentrt.get_backend("sglang", url=...)``), or an :class:`agentrt.Engine` (run on its
    local backend); None: the process's shared engine of the default model.

    ``with SemanticSession(backend) as s:`` runs the executor in a background event-loop
    thread (``var.get()``); ``async with`` runs it in the caller's loop (``await
    var.aget()``). Execution starts at the first ``get`` / ``aget`` / ``run``, with objectives
    deduced over the DAG known then (again whenever it grows).

    Priority mapping: every request is submitted with ``group=<session id>`` and
    ``depth = longest distance to the DAG's sink (in requests) + LATENCY_BONUS (1000) if
    deduced latency-sensitive``, so within the session latency-sensitive requests are
    admitted before throughput ones, and the further from the sink the earlier.

    With ``share_prefixes`` (and a backend with a prefix cache), when two or more ready
    requests share at least ``min_shared_tokens`` prompt tokens, that prefix is prefilled
    once before they are dispatched. ``namespace`` is the prefix-cache namespace of every
    request. Closing aborts unfinished requests; their ``get`` raises. :attr:`stats` says
    what the backend prefilled.
    """

    def __init__(self, backend: Backend | Engine | None = None, *, share_prefixes: bool = True,
                 min_shared_tokens: int = 32, namespace: str = "") -> None:
        if backend is None:
            from agentrt.chat.engines import get_shared_engine
            backend = get_shared_engine()
        self.backend = as_backend(backend)
        self.session_id = f"semantic-{next(_session_ids)}"
        self.dag = SessionDAG()
        self.executor = DagExecutor(self.backend, self.dag, self.session_id, namespace=namespace,
                                    share_prefixes=share_prefixes,
                                    min_shared_tokens=min_shared_tokens)
        self._names: dict[str, itertools.count] = {}
        self._mode: str | None = None  # "sync" | "async" once entered
        self._closed = False
        self._token: contextvars.Token | None = None
        self._portal: Any = None  # sync mode, once started: the background loop's portal
        self._start_lock = threading.Lock()
        self._outer: Any = None  # async mode: the caller-side task group hosting the executor

    @property
    def stats(self) -> SemanticStats:
        """Requests run and the tokens they cost (see :class:`SemanticStats`)."""
        return self.executor.stats

    # --- building the DAG ----------------------------------------------------------------
    def variable(self, name: str, value: Any) -> SemanticVariable:
        """A variable with a known value."""
        self._check_open()
        return SemanticVariable(self, name, value=value)

    def as_variable(self, name: str, value: Any) -> SemanticVariable:
        """``value`` if it is one of this session's variables, else a constant."""
        if isinstance(value, SemanticVariable):
            self._check_var(value)
            return value
        return self.variable(name, value)

    def add_call(self, fn: SemanticFunction, inputs: dict[str, SemanticVariable]
                 ) -> list[SemanticVariable]:
        """Record a call of ``fn``; returns its output variables."""
        node = Node(self._name(fn.name), inputs, [], fn)
        node.outputs = [SemanticVariable(self, out, node) for out in fn.outputs]
        self._add(node)
        return node.outputs

    def add_transform(self, var: SemanticVariable, fn: Callable[[Any], Any],
                      name: str | None = None) -> SemanticVariable:
        """Record ``fn`` applied to ``var``; returns the variable of its result."""
        self._check_var(var)
        label = getattr(fn, "__name__", "transform")
        node = Node(self._name(label), {"value": var}, [], fn, is_request=False)
        node.outputs = [SemanticVariable(self, name or f"{var.name}.{label}", node)]
        self._add(node)
        return node.outputs[0]

    # --- analysis ------------------------------------------------------------------------
    def objectives(self) -> dict[str, str]:
        """Request name → ``"latency"`` or ``"throughput"``, deduced over the DAG known now."""
        self._in_loop(self.dag.deduce)
        return {n.name: n.objective for n in self.dag.nodes if n.is_request}

    def task_groups(self) -> list[list[str]]:
        """The request names of each task group (parallel requests at one stage)."""
        self._in_loop(self.dag.deduce)
        return [[n.name for n in group] for group in self.dag.task_groups()]

    # --- running -------------------------------------------------------------------------
    def wait(self, var: SemanticVariable, perf: Perf = Perf.LATENCY) -> Any:
        """Block until ``var`` is computed and return its value (what ``var.get`` does)."""
        self._check_var(var)
        if self._mode == "async":
            raise RuntimeError("in an `async with SemanticSession` use `await var.aget()`")
        if not var.is_done:
            self._start_sync()
            self._portal.call(self.executor.wait, var, perf)
        return var.result()

    async def await_(self, var: SemanticVariable, perf: Perf = Perf.LATENCY) -> Any:
        """Async twin of :meth:`wait`."""
        self._check_var(var)
        if self._mode == "sync":
            return await anyio.to_thread.run_sync(self.wait, var, perf)
        if not var.is_done:
            self._check_started()
            await self.executor.wait(var, perf)
        return var.result()

    def run(self) -> None:
        """Run every call recorded so far to completion (failures surface on ``get``)."""
        if self._mode == "async":
            raise RuntimeError("in an `async with SemanticSession` use `await session.arun()`")
        self._start_sync()
        self._portal.call(self.executor.run_all)

    async def arun(self) -> None:
        """Async twin of :meth:`run`."""
        if self._mode == "sync":
            return await anyio.to_thread.run_sync(self.run)
        self._check_started()
        await self.executor.run_all()

    # --- lifecycle -----------------------------------------------------------------------
    def __enter__(self) -> SemanticSession:
        self._enter("sync")
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.close()
        finally:
            _current.reset(self._token)

    async def __aenter__(self) -> SemanticSession:
        self._enter("async")
        self._outer = anyio.create_task_group()
        await self._outer.__aenter__()
        await self._outer.start(self.executor.serve)
        return self

    async def __aexit__(self, *exc: Any) -> bool | None:
        try:
            await self.aclose()
        finally:
            _current.reset(self._token)
        return await self._outer.__aexit__(*exc)

    def close(self) -> None:
        """Abort unfinished requests and stop the executor; pending ``get`` calls raise.
        Returns once nothing of the session runs on the backend."""
        if self._mode == "async":
            raise RuntimeError("close an `async with` session with `await session.aclose()`")
        self._closed = True
        if self._portal is not None:
            self._portal.call(self.executor.stop, _CLOSED)

    async def aclose(self) -> None:
        """Async twin of :meth:`close`."""
        if self._mode == "sync":
            return await anyio.to_thread.run_sync(self.close)
        self._closed = True
        await self.executor.stop(_CLOSED)

    # --- helpers -------------------------------------------------------------------------
    def _enter(self, mode: str) -> None:
        self._check_open()
        if self._mode is not None:
            raise RuntimeError("a SemanticSession can be entered once")
        self._mode = mode
        self._token = _current.set(self)

    def _start_sync(self) -> None:
        self._check_open()
        if self._mode != "sync":
            raise RuntimeError("run a SemanticSession inside `with SemanticSession(...)`")
        with self._start_lock:
            if self._portal is None:
                portal = _background_portal()
                portal.start_task(self.executor.serve)
                self._portal = portal

    def _check_started(self) -> None:
        self._check_open()
        if self._mode != "async":
            raise RuntimeError("run a SemanticSession inside `async with SemanticSession(...)`")

    def _add(self, node: Node) -> None:
        self._check_open()
        self._in_loop(self.executor.add, node)

    def _in_loop(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn`` where the executor mutates the DAG (its loop thread once started)."""
        return fn(*args) if self._portal is None else self._portal.call(fn, *args)

    def _name(self, base: str) -> str:
        return f"{base}#{next(self._names.setdefault(base, itertools.count()))}"

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"the SemanticSession {self.session_id} is closed")

    def _check_var(self, var: SemanticVariable) -> None:
        if var.session is not self:
            raise ValueError(f"variable {var.name!r} belongs to {var.session.session_id}, "
                             f"not to {self.session_id}: variables cannot cross sessions")


_CLOSED = "the session was closed before this value was computed"
_portal_lock = threading.Lock()
_portal: Any = None


def _background_portal() -> Any:
    """The portal of the one event loop (a daemon thread) that runs every sync session.

    NOTE: the loop lives as long as the process: the local engine's driver thread may still
    deliver an update of an aborted request to it just after a session closed.
    """
    global _portal
    with _portal_lock:
        if _portal is None:
            ready, box = threading.Event(), []

            async def host() -> None:
                async with anyio.from_thread.BlockingPortal() as portal:
                    box.append(portal)
                    ready.set()
                    await anyio.sleep_forever()

            threading.Thread(target=anyio.run, args=(host,), name="agentrt-semantic",
                             daemon=True).start()
            ready.wait()
            _portal = box[0]
        return _portal
