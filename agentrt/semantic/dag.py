"""The request DAG of a semantic session and its objective deduction (Parrot §5.2).

Nodes are semantic-function calls (model requests) and transforms (plain Python on a value);
edges are semantic variables. A node is added after the variables it reads, so the node list
is always in topological order and walking it backwards is a reverse topological walk.

Objective deduction turns the performance criteria given to ``get`` into one objective per
request:

* a THROUGHPUT variable makes all its transitive producers throughput-preferred;
* a LATENCY variable makes its direct producers latency-sensitive, and their immediate
  predecessors too — except predecessors that belong to a task group (parallel requests at
  one stage: the same producers of their inputs and the same depth, two or more of them).
  Only the group's completion time matters to the consumer, so the group runs as a
  throughput-preferred unit (the map stage of a map-reduce);
* latency wins over throughput; everything else is throughput.

The result becomes request priorities (see :meth:`SessionDAG.deduce`);
:class:`agentrt.semantic.executor.DagExecutor` runs the DAG.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from agentrt.semantic.variables import SemanticVariable

__all__ = ["LATENCY_BONUS", "Node", "Perf", "SemanticError", "SessionDAG"]

LATENCY_BONUS = 1000
"""Added to a latency-sensitive request's ``depth``: it outranks every throughput
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


class Perf(enum.Enum):
    """The performance criterion of a ``get``: finish this value soon, or batch for rate."""

    LATENCY = "latency"
    THROUGHPUT = "throughput"


@dataclass(eq=False)
class Node:
    """One call in the DAG: a semantic function (a model request) or a transform."""

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
        """The request ``depth`` of this node (topology-aware batching, deeper first)."""
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


def _unique(nodes: Iterable[Node]) -> list[Node]:
    return list(dict.fromkeys(nodes))
