"""DagExecutor: runs a semantic session's DAG, each request as soon as its inputs are done.

A driver task dispatches each node once its inputs have values, fills the prompt prefixes
that ready requests share (:mod:`agentrt.semantic.prefixes`), and generates each request's
outputs on one model request (see :mod:`agentrt.semantic.functions` for the multi-output
continuation). Requests carry ``group=<session id>`` and ``depth=<priority>`` (see
:meth:`agentrt.semantic.dag.SessionDAG.deduce`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from agentrt.core.sampling_params import SamplingParams
from agentrt.semantic.dag import Node, Perf, SemanticError, SessionDAG
from agentrt.semantic.prefixes import PrefixStore, common_prefix
from agentrt.session import common_prefix_len

if TYPE_CHECKING:
    from agentrt.engine.engine import Engine
    from agentrt.engine.outputs import RequestOutput
    from agentrt.semantic.variables import SemanticVariable

__all__ = ["DagExecutor", "SemanticStats"]


@dataclass
class SemanticStats:
    """What a session's requests cost the engine."""

    num_requests: int = 0
    """Semantic-function calls run (one engine request each, whatever its outputs)."""
    num_prompt_tokens: int = 0
    """Sum of each generation's whole prompt (what a stateless backend would prefill)."""
    num_prefill_tokens: int = 0
    """Tokens the engine computed in prefill for the session, shared-prefix fills included."""
    num_cached_tokens: int = 0
    """Prompt tokens the requests took from the engine's prefix cache."""
    num_shared_prefix_fills: int = 0
    """Shared prefixes filled once ahead of the requests that share them."""



class DagExecutor:
    """Runs a session's DAG on ``engine`` inside its own anyio task group.

    Lives in one event loop (the caller's, or a background thread's): every DAG mutation
    and every variable update happens there. Requests are submitted with
    ``group=session_id`` and ``depth=node.priority``.
    """

    def __init__(self, engine: Engine, dag: SessionDAG, session_id: str, *, namespace: str,
                 share_prefixes: bool, min_shared_tokens: int) -> None:
        self.engine = engine
        self.dag = dag
        self.session_id = session_id
        self.namespace = namespace
        self.share_prefixes = share_prefixes and engine.config.enable_prefix_cache
        self.min_shared_tokens = min_shared_tokens
        self.prefixes = PrefixStore()
        self.stats = SemanticStats()
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
            prompt = fn.render_prompt(rendered, self.engine.tokenizer)
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
        """Prefill ``prefix_ids``; on finishing, its KV pages go to the radix prefix cache."""
        try:
            out = await self.engine.agenerate(
                prefix_ids, SamplingParams(max_tokens=1), namespace=self.namespace,
                group=self.session_id, depth=depth)
        except Exception:  # noqa: BLE001 - an optimisation: the requests still run unshared
            return
        self.stats.num_shared_prefix_fills += 1
        self.stats.num_prefill_tokens += out.num_prefill_tokens

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
        """Generate each output in turn on one engine request, its KV kept in between."""
        params, rid = node.call.params, f"{self.session_id}/{node.name}"
        context, text = node.prompt_ids, node.segments[0]
        values: list[str] = []
        held: list[int] = []
        is_paused = False
        try:
            for k, segment in enumerate(node.segments):
                is_last = k == len(node.segments) - 1
                if k == 0:
                    out = await self.engine.agenerate(
                        context, params, request_id=rid, keep_kv=not is_last,
                        namespace=self.namespace, group=self.session_id, depth=node.priority)
                else:
                    text += segment
                    context = self._encode(text)
                    keep = min(common_prefix_len(held, context), len(context) - 1)
                    out = await self.engine.aresume(rid, context[keep:], params,
                                                    keep_kv=not is_last, truncate_to=keep)
                is_paused = not is_last
                if out.finish_reason == "abort":
                    raise RuntimeError(f"the engine aborted request {rid!r}")
                self._count(len(context), out, is_last)
                held = context + out.token_ids
                text += out.text
                values.append(out.text.strip())
            return values
        finally:
            if is_paused:  # failed or cancelled between two outputs: free the kept KV
                self.engine.abort(rid)

    def _count(self, prompt_len: int, out: RequestOutput, is_last: bool) -> None:
        self.stats.num_prompt_tokens += prompt_len
        self.stats.num_prefill_tokens += out.num_prefill_tokens
        if is_last:
            self.stats.num_requests += 1
            self.stats.num_cached_tokens += out.stats.num_cached_tokens

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
        return self.engine.tokenizer.encode(text, add_special_tokens=False)
