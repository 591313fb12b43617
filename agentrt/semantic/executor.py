"""DagExecutor: runs a semantic session's DAG on a backend, each request once its inputs are.

A driver task dispatches each node once its inputs have values, fills the prompt prefixes
that ready requests share (:mod:`agentrt.semantic.prefixes`), and generates each request's
outputs through the one call object (:class:`agentrt.backends.call.Call`) on the session's
:class:`~agentrt.backends.base.Backend`. Requests carry ``group=<session id>`` and
``depth=<priority>`` in their :class:`~agentrt.core.options.RequestOptions` (see
:meth:`agentrt.semantic.dag.SessionDAG.deduce`).

A multi-output template is one backend session (:class:`agentrt.session.Session`): each next
output is the session's next call on the text so far re-encoded — the previous output's raw
text (stop string excluded) and the literal text after it —, of which the session sends only
what the backend does not hold (a seam that re-tokenizes differently is rolled back). So the
model sees exactly the tokens a fresh call on the whole text would, while only the new text
is prefilled: the local engine holds the request paused in place, an SGLang server keeps the
context in its own session.

A shared-prefix fill is a prefill-only call (one token generated) whose KV the backend's
prefix cache then serves to the requests that share it — the local engine's radix cache, or
the SGLang server's — so the same code runs on every backend that has a prefix cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from agentrt.backends.call import Call
from agentrt.core.options import RequestOptions
from agentrt.core.sampling_params import SamplingParams
from agentrt.semantic.dag import Node, Perf, SemanticError, SessionDAG
from agentrt.semantic.prefixes import PrefixStore, common_prefix
from agentrt.session import Session

if TYPE_CHECKING:
    from agentrt.backends.base import Backend
    from agentrt.semantic.variables import SemanticVariable

__all__ = ["DagExecutor", "SemanticStats"]

_PREFILL_ONLY = SamplingParams(max_tokens=1)


@dataclass
class SemanticStats:
    """What a session's requests cost the backend, from the counters of its calls' deltas."""

    backend: str = ""
    """The backend that ran them (``local``, ``sglang``)."""
    num_requests: int = 0
    """Semantic-function calls run (one model request or session each, whatever its
    outputs)."""
    num_prompt_tokens: int = 0
    """Sum of each generation's whole context (what a stateless backend without a prefix
    cache would prefill)."""
    num_prefill_tokens: int = 0
    """Of those, plus the shared-prefix fills' prompts: the tokens the backend computed."""
    num_cached_tokens: int = 0
    """Context tokens the backend did not compute: held by a multi-output request between
    its outputs, or served from its prefix cache."""
    num_shared_prefix_fills: int = 0
    """Shared prefixes filled once (a prefill-only call) ahead of the requests sharing them."""

    def count(self, call: Call) -> None:
        """Add one finished call's counters."""
        self.num_prompt_tokens += call.num_prompt_tokens
        self.num_prefill_tokens += call.num_prefilled_tokens
        self.num_cached_tokens += call.num_cached_tokens



class DagExecutor:
    """Runs a session's DAG on ``backend`` inside its own anyio task group.

    Lives in one event loop (the caller's, or a background thread's): every DAG mutation
    and every variable update happens there. Requests are submitted with
    ``group=session_id`` and ``depth=node.priority``.
    """

    def __init__(self, backend: Backend, dag: SessionDAG, session_id: str, *, namespace: str,
                 share_prefixes: bool, min_shared_tokens: int) -> None:
        self.backend = backend
        self.dag = dag
        self.session_id = session_id
        self.namespace = namespace
        self.share_prefixes = share_prefixes and backend.capabilities.prefix_cache
        self.min_shared_tokens = min_shared_tokens
        self.prefixes = PrefixStore()
        self.stats = SemanticStats(backend=backend.name)
        self._tg: Any = None
        self._changed: Any = None
        self._stopped: Any = None
        self._is_driving = False

    # --- control (called in the loop) ------------------------------------------------------
    async def serve(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Host the executor's tasks until :meth:`stop`."""
        self._stopped = anyio.Event()
        try:
            async with anyio.create_task_group() as tg:
                self._tg, self._changed = tg, anyio.Event()
                task_status.started()
                await anyio.sleep_forever()
        finally:
            self._stopped.set()

    async def stop(self, reason: str) -> None:
        """Fail every unfinished node with ``reason`` and cancel (abort) what runs."""
        for node in self.dag.nodes:
            self._fail(node, SemanticError(node.name, RuntimeError(reason)))
        if self._tg is not None:
            self._tg.cancel_scope.cancel()
            await self._stopped.wait()

    def add(self, node: Node) -> None:
        self.dag.add(node)
        self.notify()

    async def wait(self, var: SemanticVariable, perf: Perf | None = None) -> None:
        """Start dispatching (once) and return when ``var`` has a value or an error."""
        if perf is not None:
            self.dag.mark(var, perf)
        if not self._is_driving:
            self._is_driving = True
            self._tg.start_soon(self._drive)
        self.notify()
        if not var.is_done:
            var.event = var.event or anyio.Event()
            await var.event.wait()

    async def run_all(self) -> None:
        """Return when every node known (also those added meanwhile) is done."""
        while pending := [v for n in self.dag.nodes for v in n.outputs if not v.is_done]:
            await self.wait(pending[0])

    def notify(self) -> None:
        if self._changed is not None:
            self._changed.set()

    # --- dispatch --------------------------------------------------------------------------
    async def _drive(self) -> None:
        """Dispatch every node whose inputs are done, round after round. Requests that share
        a prompt prefix start once it is filled; the rest start at once."""
        while True:
            self._changed = anyio.Event()
            self.dag.deduce()
            ready = self._take_ready()
            requests = [n for n in ready if n.is_request and self._prepare(n)]
            groups = self.prefixes.groups(requests) if self.share_prefixes and requests else []
            sharing = {n for group in groups for n in group}
            self._start([n for n in ready if n not in sharing])
            for group in groups:
                self._tg.start_soon(self._share_then_start, group)
            await self._changed.wait()

    def _start(self, nodes: list[Node]) -> None:
        for node in nodes:
            if node.state == "running":
                self._tg.start_soon(self._execute, node)

    def _take_ready(self) -> list[Node]:
        """Mark running the pending nodes whose inputs are done; fail those fed an error."""
        ready = []
        for node in self.dag.nodes:
            inputs = node.inputs.values()
            if node.state != "pending" or not all(v.is_done for v in inputs):
                continue
            error = next((v.error for v in inputs if v.error is not None), None)
            if error is not None:
                self._fail(node, error)
            else:
                node.state = "running"
                ready.append(node)
        return ready

    def _prepare(self, node: Node) -> bool:
        """Render and tokenize a ready request and register its prefix hashes."""
        fn = node.call
        try:
            values = {k: v.value if isinstance(v.value, str) else str(v.value)
                      for k, v in node.inputs.items()}
            rendered = fn.template.render(values)
            prompt = fn.render_prompt(rendered, self.backend.tokenizer)
            node.prompt_ids = self._encode(prompt)
        except Exception as exc:  # noqa: BLE001 - surfaced on get()
            self._fail(node, SemanticError(node.name, exc))
            return False
        node.segments = [prompt, *rendered.segments[1:]]
        tag = "chat\0" if fn.chat else ""
        self.prefixes.add(node, [tag + rendered.segments[0][:b] for b in rendered.boundaries])
        return True

    async def _share_then_start(self, group: list[Node]) -> None:
        """Fill the token prefix ``group`` shares (the common prefix of its tokenized prompts,
        so a seam never splits differently) once, then start the group's requests."""
        shared = common_prefix([n.prompt_ids for n in group])
        shared = shared[: min(len(n.prompt_ids) for n in group) - 1]
        if len(shared) >= self.min_shared_tokens:
            filled, first = self.prefixes.fill_of(shared)
            if first:
                try:
                    await self._fill(shared, max(n.priority for n in group))
                finally:
                    filled.set()
            else:
                await filled.wait()
        self._start(group)

    async def _fill(self, prefix_ids: list[int], depth: int) -> None:
        """Prefill ``prefix_ids`` (a one-token call); the backend's prefix cache keeps them."""
        call = Call(self.backend, prefix_ids, _PREFILL_ONLY, options=self._options(depth))
        try:
            await call.agenerate()
        except Exception:  # noqa: BLE001 - an optimisation: the requests still run unshared
            return
        self.stats.num_shared_prefix_fills += 1
        self.stats.num_prefill_tokens += call.num_prefilled_tokens

    # --- execution -------------------------------------------------------------------------
    async def _execute(self, node: Node) -> None:
        try:
            if node.is_request:
                values = await self._generate(node)
            else:
                values = [node.call(node.inputs["value"].value)]
        except Exception as exc:  # noqa: BLE001 - surfaced on get() downstream
            self._fail(node, SemanticError(node.name, exc))
            return
        self._resolve(node, values)

    async def _generate(self, node: Node) -> list[str]:
        """Generate each output in turn: one call, or the calls of one backend session."""
        params, options = node.call.params, self._options(node.priority)
        if len(node.segments) == 1:
            call = Call(self.backend, node.prompt_ids, params, options=options)
            return [self._text(call, await call.agenerate(), is_last=True).strip()]
        session = Session(self.backend, namespace=self.namespace)
        context, text, values = node.prompt_ids, node.segments[0], []
        try:
            for k, segment in enumerate(node.segments):
                if k > 0:
                    text += segment
                    context = self._encode(text)
                call = session.call(context, params, options)
                out = self._text(call, await call.agenerate(), k == len(node.segments) - 1)
                text += out
                values.append(out.strip())
            return values
        finally:
            with anyio.CancelScope(shield=True):  # also when cancelled: free the held KV
                await session.aclose()

    def _text(self, call: Call, out: Any, is_last: bool) -> str:
        """The raw text of a finished call (counted); an aborted call raises."""
        if out.finish_reason == "abort":
            raise RuntimeError(f"the backend aborted request {call.request_id!r}")
        self.stats.count(call)
        self.stats.num_requests += is_last
        return out.text

    def _options(self, depth: int) -> RequestOptions:
        return RequestOptions(namespace=self.namespace, group=self.session_id, depth=depth)

    def _resolve(self, node: Node, values: list[Any]) -> None:
        if node.state == "running":
            node.state = "done"
            for var, value in zip(node.outputs, values, strict=True):
                var.value, var.is_ready = value, True
            self._wake(node)

    def _fail(self, node: Node, error: SemanticError) -> None:
        if node.state in ("pending", "running"):
            node.state = "failed"
            for var in node.outputs:
                var.error = error
            self._wake(node)

    def _wake(self, node: Node) -> None:
        for var in node.outputs:
            if var.event is not None:
                var.event.set()
        self.notify()

    def _encode(self, text: str) -> list[int]:
        return self.backend.tokenizer.encode(text, add_special_tokens=False)
