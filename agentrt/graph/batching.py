"""Batch formation for one engine: blind FIFO vs Teola's topology-aware batching.

The engine's scheduler applies the same order (:func:`agentrt.scheduler.policies.
topology_order`) to its waiting queue every step; :func:`form_batch` is the stand-alone
form used to reason about a single scheduling period (Teola's Fig. 7).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentrt.graph.ir import Graph, Node
from agentrt.scheduler.policies import topology_order

__all__ = ["Pending", "form_batch", "pending_from"]


@dataclass(frozen=True)
class Pending:
    """A primitive waiting for the engine."""

    name: str
    group: str
    """The query (graph run) it belongs to."""
    depth: int
    num_tokens: int
    arrival: float


def pending_from(graph: Graph, nodes: Sequence[Node], query: str, num_tokens: int,
                 arrival: float) -> list[Pending]:
    """``nodes`` of ``graph`` queued at ``arrival`` (in order), depths from the graph."""
    graph.compute_depths()
    return [Pending(n.name, query, n.depth, num_tokens, arrival + i * 1e-3)
            for i, n in enumerate(nodes)]


def form_batch(queue: Sequence[Pending], max_tokens: int, *,
               topology: bool = True) -> list[Pending]:
    """The primitives one period runs: in arrival order (FIFO) or topology-aware order,
    taken while they fit in ``max_tokens``."""
    ordered = sorted(queue, key=lambda p: p.arrival)
    if topology:
        ordered = topology_order(ordered)
    batch, used = [], 0
    for p in ordered:
        if used + p.num_tokens <= max_tokens:
            batch.append(p)
            used += p.num_tokens
    return batch
