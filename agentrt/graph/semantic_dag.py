"""The request DAG of a semantic session: objective deduction and the prefix store (Parrot).

Nodes are semantic-function calls (engine requests) and transforms (plain Python on a value);
edges are semantic variables. A node is added after the variables it reads, so the node list
is always in topological order and walking it backwards is a reverse topological walk.

Objective deduction (Parrot §5.2) turns the performance criteria given to ``get`` into one
objective per request:

* a THROUGHPUT variable makes all its transitive producers throughput-preferred;
* a LATENCY variable makes its direct producers latency-sensitive, and their immediate
  predecessors too — except predecessors that belong to a task group (parallel requests at
  one stage: the same producers of their inputs and the same depth, two or more of them).
  Only the group's completion time matters to the consumer, so the group runs as a
  throughput-preferred unit (the map stage of a map-reduce);
* latency wins over throughput; everything else is throughput.

The result becomes engine priorities (see :meth:`SessionDAG.deduce`). :class:`DagExecutor`
runs the DAG: a driver task dispatches each node once its inputs are done, fills prompt
prefixes that ready requests share, and generates each request's outputs on one engine
request (see :mod:`agentrt.graph.semantic` for the multi-output continuation).
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import anyio

from agentrt.core.sampling_params import SamplingParams
from agentrt.session import common_prefix_len

if TYPE_CHECKING:
    from agentrt.engine.engine import Engine
    from agentrt.engine.outputs import RequestOutput
    from agentrt.graph.semantic import SemanticVariable

__all__ = [
    "LATENCY_BONUS", "DagExecutor", "Node", "Perf", "PrefixStore", "SemanticError",
    "SemanticStats", "SessionDAG", "common_prefix",
]

LATENCY_BONUS = 1000
"""Added to a latency-sensitive request's engine ``depth``: it outranks every throughput
request of its session (graphs deeper than this are not expected)."""

Objective = Literal["latency", "throughput"]
NodeState = Literal["pending", "running", "done", "failed"]


class SemanticError(RuntimeError):
    """A semantic function or transform failed; ``get`` raises it on every variable
    downstream of the failure. ``function`` names the failing call, ``error`` is the cause."""

    def __init__(self, function: str, error: BaseException) -> None:
        super().__init__(f"semantic function {function!r} failed: "
                         f"{type(error).__name__}: {error}")
        self.function = function
        self.error = error


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


class Perf(enum.Enum):
    """The performance criterion of a ``get``: finish this value soon, or batch for rate."""

    LATENCY = "latency"
    THROUGHPUT = "throughput"


@dataclass(eq=False)
class Node:
    """One call in the DAG: a semantic function (an engine request) or a transform."""

    name: str
    inputs: dict[str, SemanticVariable]
    outputs: list[SemanticVariable]
    call: Any
    """The :class:`SemanticFunction` of a request, the callable of a transform."""
    is_request: bool = True
    state: NodeState = "pending"
    depth: int = 0
    """Longest distance to a sink of the DAG, counted in requests."""
    objective: Objective = "throughput"
    prompt_ids: list[int] = field(default_factory=list)
    """The tokenized prompt of the first output (set when the node is dispatched)."""
    segments: list[str] = field(default_factory=list)
    """Rendered text before each output (set when the node is dispatched)."""

    @property
    def priority(self) -> int:
        """The engine ``depth`` of this request (topology-aware batching, deeper first)."""
        return self.depth + (LATENCY_BONUS if self.objective == "latency" else 0)


class SessionDAG:
    """The nodes of one session and the variable edges between them."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.marks: dict[SemanticVariable, Perf] = {}
        """Variables fetched with a performance criterion."""
        self._consumers: dict[int, list[Node]] = {}
        self._deduced_version = -1
        self.version = 0

    def add(self, node: Node) -> None:
        """Append ``node`` (its inputs must already be in the DAG or constants)."""
        self.nodes.append(node)
        for var in node.inputs.values():
            self._consumers.setdefault(id(var), []).append(node)
        self.version += 1

    def mark(self, var: SemanticVariable, perf: Perf) -> None:
        """Record that ``var`` was fetched with ``perf`` (the latest criterion wins)."""
        if self.marks.get(var) is not perf:
            self.marks[var] = perf
            self.version += 1

    # --- primitives ------------------------------------------------------------------------
    @staticmethod
    def producer(var: SemanticVariable) -> Node | None:
        """GetProducer: the node that computes ``var`` (None for a constant)."""
        return var.producer

    def consumers(self, var: SemanticVariable) -> list[Node]:
        """GetConsumers: the nodes that read ``var``."""
        return list(self._consumers.get(id(var), ()))

    def request_producers(self, var: SemanticVariable) -> list[Node]:
        """The nearest requests upstream of ``var``, looking through transforms."""
        node = var.producer
        if node is None:
            return []
        if node.is_request:
            return [node]
        return _unique(p for v in node.inputs.values() for p in self.request_producers(v))

    def predecessors(self, node: Node) -> list[Node]:
        """The requests that produce ``node``'s inputs."""
        return _unique(p for v in node.inputs.values() for p in self.request_producers(v))

    def ancestors(self, var: SemanticVariable) -> set[Node]:
        """Every request ``var`` transitively depends on."""
        seen: set[Node] = set()
        stack = self.request_producers(var)
        while stack:
            node = stack.pop()
            if node not in seen:
                seen.add(node)
                stack += self.predecessors(node)
        return seen

    # --- analysis --------------------------------------------------------------------------
    def compute_depths(self) -> None:
        """Set each node's longest distance (in requests) to a sink; sinks are 0."""
        for node in reversed(self.nodes):
            node.depth = max((c.depth + c.is_request for v in node.outputs
                              for c in self.consumers(v)), default=0)

    def task_groups(self) -> list[list[Node]]:
        """Parallel requests at one stage: same input producers, same depth, two or more."""
        stages: dict[tuple, list[Node]] = {}
        for node in self.nodes:
            if node.is_request:
                key = (frozenset(self.predecessors(node)), node.depth)
                stages.setdefault(key, []).append(node)
        return [group for group in stages.values() if len(group) >= 2]

    def deduce(self) -> None:
        """Set every node's ``depth`` and ``objective`` from the marks (idempotent).

        Engine mapping: a request is submitted with ``group=<session id>`` and
        ``depth = longest distance to the sink + (LATENCY_BONUS if latency-sensitive)``.
        """
        if self._deduced_version == self.version:
            return
        self.compute_depths()
        grouped = {n for group in self.task_groups() for n in group}
        latency: set[Node] = set()
        for var, perf in self.marks.items():
            if perf is Perf.LATENCY:
                for node in self.request_producers(var):
                    latency.add(node)
                    latency.update(p for p in self.predecessors(node) if p not in grouped)
        for node in self.nodes:
            node.objective = "latency" if node in latency else "throughput"
        self._deduced_version = self.version


class PrefixStore:
    """PrefixHash → requests, checked online when requests become ready.

    A request's hashes cover its prompt text up to each input-variable boundary (and the
    whole prompt); requests sharing a hash share at least that much text.
    """

    def __init__(self) -> None:
        self.requests: dict[str, list[Node]] = {}
        self._order: dict[Node, list[str]] = {}
        self._filled: dict[str, Any] = {}  # prefix hash -> anyio.Event, set when filled

    @staticmethod
    def hash_text(text: str) -> str:
        return hashlib.sha1(text.encode()).hexdigest()

    def add(self, node: Node, prefixes: Iterable[str]) -> None:
        """Register ``node`` under the hash of each prefix (shortest first)."""
        hashes = [self.hash_text(p) for p in prefixes if p]
        self._order[node] = hashes
        for h in hashes:
            self.requests.setdefault(h, []).append(node)

    def groups(self, ready: list[Node]) -> list[list[Node]]:
        """Partition ``ready`` requests into groups of two or more that share a prefix.

        Each request joins the group of its shortest boundary prefix that another ready
        request shares (the static text before the first variable matters most).
        """
        ready_set, assigned = set(ready), set()
        groups: list[list[Node]] = []
        for node in ready:
            for h in self._order.get(node, ()):
                members = [n for n in self.requests[h] if n in ready_set and n not in assigned]
                if len(members) >= 2:
                    groups.append(members)
                    assigned.update(members)
                    break
        return groups

    def fill_of(self, prefix_ids: list[int]) -> tuple[Any, bool]:
        """The event set once these prefix tokens are filled, and whether the caller is the
        first to ask (and must fill them); later groups sharing the prefix wait on it."""
        key = self.hash_text(",".join(map(str, prefix_ids)))
        event = self._filled.get(key)
        if event is not None:
            return event, False
        event = self._filled[key] = anyio.Event()
        return event, True


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


def common_prefix(sequences: list[list[int]]) -> list[int]:
    """The longest common prefix of token lists."""
    first = sequences[0]
    n = min(len(s) for s in sequences)
    for s in sequences[1:]:
        i = 0
        while i < n and s[i] == first[i]:
            i += 1
        n = i
    return first[:n]


def _unique(nodes: Iterable[Node]) -> list[Node]:
    return list(dict.fromkeys(nodes))
