"""The primitive-level dataflow graph (Teola's e-graph) that chains are lowered into.

A :class:`Node` is one primitive — an embedding batch, a vector search, the prefill or the
decode half of an LLM call, a branch condition, a join — with the ports it reads
(``inputs``: port name → producing node), the engine it runs on and the attributes the
passes read (``batchable``, ``splittable``, prompt parts). ``after`` holds control edges:
an ordering the source program imposed that carries no data (dependency pruning drops them).
``op`` is what the runtime awaits with the node's input values; a node whose behaviour
agentrt cannot model is an ``Opaque`` node whose op runs the original object.

:class:`Graph` owns the nodes, answers ``parents``/``children``, orders them topologically,
computes each node's depth to the sink (Teola Alg. 2) and prints itself as text or Mermaid.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Around", "Graph", "Kind", "Node", "Op"]

Op = Callable[[dict[str, Any]], Awaitable[Any]]
"""A node's work: awaited with ``{port: value}``; returns the node's output value."""
Around = Callable[[Callable[[Any, Any], Awaitable[Any]], Any, Any], Awaitable[Any]]
"""A framework's wrapper of one run (see :attr:`Graph.around`)."""


class Kind(enum.StrEnum):
    """Primitive kinds: Teola's Table 1, plus ToolCall, Opaque and the graph's plumbing."""

    INPUT = "Input"
    EMBEDDING = "Embedding"
    INGESTION = "Ingestion"
    SEARCHING = "Searching"
    RERANKING = "Reranking"
    PREFILLING = "Prefilling"
    PARTIAL_PREFILLING = "PartialPrefilling"
    FULL_PREFILLING = "FullPrefilling"
    DECODING = "Decoding"
    PARTIAL_DECODING = "PartialDecoding"
    CONDITION = "Condition"
    AGGREGATE = "Aggregate"
    TOOL_CALL = "ToolCall"
    TRANSFORM = "Transform"
    """A cheap in-process step agentrt knows (pick keys, passthrough, parse, format)."""
    OPAQUE = "Opaque"
    """Anything that could not be lowered: runs the original object as one node."""

    @property
    def is_llm(self) -> bool:
        return self in _LLM_KINDS


_LLM_KINDS = {Kind.PREFILLING, Kind.PARTIAL_PREFILLING, Kind.FULL_PREFILLING, Kind.DECODING,
              Kind.PARTIAL_DECODING}


@dataclass(eq=False)
class Node:
    """One primitive of a graph."""

    id: str
    kind: Kind
    name: str
    op: Op | None = None
    inputs: dict[str, Node] = field(default_factory=dict)
    """Port name → the node producing that value, in the order the op expects them."""
    after: set[Node] = field(default_factory=set)
    """Control edges: nodes that must finish first although no data flows (prunable)."""
    engine: str = "cpu"
    """Where it runs: ``llm``, ``embedding``, ``vector`` or ``cpu``."""
    attrs: dict[str, Any] = field(default_factory=dict)
    depth: int = 0
    """Longest distance to the sink (set by :meth:`Graph.compute_depths`)."""

    @property
    def parents(self) -> list[Node]:
        seen: dict[int, Node] = {}
        for n in [*self.inputs.values(), *sorted(self.after, key=lambda n: n.id)]:
            seen.setdefault(id(n), n)
        return list(seen.values())

    def __repr__(self) -> str:
        return f"<{self.kind.value} {self.id} {self.name!r}>"


class Graph:
    """Nodes of one lowered chain; ``output`` is the sink whose value is the result."""

    def __init__(self, name: str = "graph") -> None:
        self.name = name
        self.nodes: list[Node] = []
        self._ids = itertools.count()
        self.input = self.add(Kind.INPUT, "input")
        self.output: Node = self.input
        self.applied: list[str] = []
        """The passes :func:`agentrt.graph.optimize` applied, in order."""
        self.around: Around | None = None
        """How the framework wraps one run (set by its lowering): awaited as
        ``around(run, value, config)``, it awaits ``run(value, child_config)`` inside its own
        bookkeeping (LangChain: the root run its callbacks see; children get its config)."""

    # --- building ---------------------------------------------------------------------------
    def add(self, kind: Kind, name: str, op: Op | None = None,
            inputs: dict[str, Node] | None = None, *, engine: str = "cpu",
            **attrs: Any) -> Node:
        """Add a node; ``inputs`` maps port names to producers already in the graph."""
        node = Node(f"n{next(self._ids)}", kind, name, op, dict(inputs or {}), engine=engine,
                    attrs=attrs)
        self.nodes.append(node)
        return node

    def remove(self, node: Node) -> None:
        """Drop ``node``; nobody may still read it."""
        if self.children(node):
            raise ValueError(f"{node} still has children")
        self.nodes.remove(node)

    def replace_input(self, old: Node, new: Node) -> None:
        """Make every reader of ``old`` read ``new`` instead (ports and control edges)."""
        for n in self.nodes:
            for port, src in n.inputs.items():
                if src is old:
                    n.inputs[port] = new
            if old in n.after:
                n.after.discard(old)
                n.after.add(new)
        if self.output is old:
            self.output = new

    # --- queries ----------------------------------------------------------------------------
    def children(self, node: Node) -> list[Node]:
        return [n for n in self.nodes if node in n.parents]

    def find(self, kind: Kind) -> list[Node]:
        return [n for n in self.nodes if n.kind is kind]

    def topological(self) -> list[Node]:
        """Nodes parents-first (stable: insertion order among ready nodes)."""
        indeg = {id(n): len(n.parents) for n in self.nodes}
        ready = [n for n in self.nodes if indeg[id(n)] == 0]
        order: list[Node] = []
        while ready:
            node = ready.pop(0)
            order.append(node)
            for child in self.children(node):
                indeg[id(child)] -= 1
                if indeg[id(child)] == 0:
                    ready.append(child)
        if len(order) != len(self.nodes):
            raise ValueError(f"graph {self.name!r} has a cycle")
        return order

    def compute_depths(self) -> None:
        """Teola Alg. 2, event 1: depth = longest distance to a sink, sinks at 0."""
        for node in reversed(self.topological()):
            kids = self.children(node)
            node.depth = max((k.depth + 1 for k in kids), default=0)

    def ancestors(self, node: Node) -> set[Node]:
        out: set[Node] = set()
        stack = list(node.parents)
        while stack:
            n = stack.pop()
            if n not in out:
                out.add(n)
                stack.extend(n.parents)
        return out

    def structure_key(self) -> tuple:
        """What the optimised-graph cache keys on: kinds, names, edges and hint attributes."""
        pos = {id(n): i for i, n in enumerate(self.nodes)}
        return tuple(
            (n.kind.value, n.name, n.engine,
             tuple((p, pos[id(s)]) for p, s in n.inputs.items()),
             tuple(sorted(pos[id(a)] for a in n.after)),
             tuple(sorted((k, repr(v)) for k, v in n.attrs.items() if k in _HINTS)))
            for n in self.nodes)

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    # --- printing ---------------------------------------------------------------------------
    def to_text(self) -> str:
        """One line per node, parents-first: ``id Kind name <- port=src, ... (after ...)``."""
        lines = [f"graph {self.name} ({len(self.nodes)} nodes, output {self.output.id})"]
        for n in self.topological():
            ins = ", ".join(f"{p}={s.id}" for p, s in n.inputs.items())
            extra = f" after {','.join(sorted(a.id for a in n.after))}" if n.after else ""
            lines.append(f"  {n.id:<4} {n.kind.value:<17} {n.name}"
                         f"{'  <- ' + ins if ins else ''}{extra}  [{n.engine}]")
        return "\n".join(lines)

    def to_mermaid(self) -> str:
        """A Mermaid flowchart (data edges solid, control edges dotted)."""
        lines = ["flowchart TD"]
        for n in self.nodes:
            label = f"{n.kind.value}: {n.name}".replace('"', "'")
            lines.append(f'  {n.id}["{label}"]')
        for n in self.nodes:
            for port, src in n.inputs.items():
                lines.append(f"  {src.id} -->|{port}| {n.id}")
            for src in sorted(n.after, key=lambda a: a.id):
                lines.append(f"  {src.id} -.-> {n.id}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_text()


_HINTS = ("batchable", "batch_size", "splittable", "num_items", "max_batch_size", "variables",
          "early")
