"""Scheduling policies: in which order waiting requests get admitted.

A policy sees requests only through the :class:`Job` protocol — plain numbers, no tensors —
so the same code orders the engine's waiting queue and the discrete-event simulator's.

* ``fcfs``    — by the time a request last entered the queue: a request resumed after a tool
                goes to the tail, like a new one (vLLM).
* ``arrival`` — by the request's original arrival time (InferCept).
* ``lamps``   — lowest predicted memory-over-time first (LAMPS), with a starvation counter:
                a request passed over ``starvation_threshold`` times goes to the head and keeps
                priority until it completes. Multi-tool requests are scored segment by
                segment: each resumed segment is a new job with its own context and prediction.

Whatever the policy, :func:`topology_order` then applies Teola's topology-aware batching to
requests that belong to a dataflow graph (``group`` = the query, ``depth`` = the primitive's
distance to the graph's sink); requests outside any graph keep the policy's order.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, TypeVar

from agentrt.core.registry import Registry
from agentrt.intercept.cost import CostModel
from agentrt.intercept.waste import Strategy, chunked_discard_waste, preserve_waste, swap_waste

__all__ = [
    "POLICIES", "ArrivalPolicy", "FCFSPolicy", "Job", "LampsPolicy", "SchedulingPolicy",
    "get_policy", "lamps_score", "topology_order",
]


class Job(Protocol):
    """What a policy may know about a waiting request."""

    job_id: str
    arrival_time: float
    """When the request first arrived."""
    enqueue_time: float
    """When it last entered the waiting queue (arrival, or resume after a tool)."""
    context_len: int
    """c0: tokens of context at the start of its next segment."""
    predicted_output: int
    """a: tokens it is predicted to generate before its next interception (or its end)."""
    predicted_after: int
    """b: tokens predicted after that interception (0 if none is expected)."""
    predicted_interception: float | None
    """Predicted duration of the interception ending this segment; None = no interception."""
    strategy: Strategy | None
    """A fixed handling for that interception, or None to take the least waste."""


J = TypeVar("J", bound=Job)


def topology_order(jobs: Sequence[J]) -> list[J]:
    """Teola's topology-aware batching (Alg. 2) as an admission order.

    Jobs of one graph query (same ``group``) form a bucket; buckets keep the order of their
    first job in ``jobs``. Each bucket first offers its deepest jobs (the primitives furthest
    from the sink advance the query most), bucket after bucket; then the rest, deepest first.
    A job without a group is a bucket of its own, so ungrouped jobs keep their order.
    """
    buckets: dict[object, list[J]] = {}
    for i, job in enumerate(jobs):
        key = getattr(job, "group", None)
        buckets.setdefault(i if key is None else key, []).append(job)
    first: list[J] = []
    rest: list[J] = []
    for bucket in buckets.values():
        top = max(getattr(j, "depth", 0) for j in bucket)
        first += [j for j in bucket if getattr(j, "depth", 0) == top]
        rest += sorted((j for j in bucket if getattr(j, "depth", 0) != top),
                       key=lambda j: -getattr(j, "depth", 0))
    return first + rest


class SchedulingPolicy(ABC):
    """Orders waiting jobs; told every step which were admitted and which passed over."""

    name: str = ""

    @abstractmethod
    def order(self, jobs: Sequence[J], held_tokens: int = 0) -> list[J]:
        """``jobs`` in admission order. ``held_tokens``: KV tokens held by running requests."""

    def on_step(self, admitted: Iterable[Job], passed_over: Iterable[Job]) -> None:
        """Called once per scheduling step (policies with memory override this)."""
        return None

    def forget(self, job_id: str) -> None:
        """The job's request finished or was aborted."""
        return None


class FCFSPolicy(SchedulingPolicy):
    name = "fcfs"

    def order(self, jobs: Sequence[J], held_tokens: int = 0) -> list[J]:
        return sorted(jobs, key=lambda j: j.enqueue_time)


class ArrivalPolicy(SchedulingPolicy):
    name = "arrival"

    def order(self, jobs: Sequence[J], held_tokens: int = 0) -> list[J]:
        return sorted(jobs, key=lambda j: j.arrival_time)


def lamps_score(job: Job, cost: CostModel, c_other: int) -> float:
    """Predicted memory × time of the job's next segment, its interception and what follows:

    ``M·τ·(c0·a + a²/2) + waste(handling) + M·τ·(C·b + b²/2)``, C = c0 + a.
    The handling waste is the fixed strategy's, or the least of the three; it includes the
    memory other requests hold (C_other), without which Discard would wrongly rank first.
    """
    m, tau = cost.kv_bytes_per_token, cost.decode_step_seconds
    c0, a, b = job.context_len, job.predicted_output, job.predicted_after
    c = c0 + a
    score = m * tau * (c0 * a + a * a / 2)
    if job.predicted_interception is not None:
        wastes = {Strategy.PRESERVE: preserve_waste(job.predicted_interception, c, cost),
                  Strategy.DISCARD: chunked_discard_waste(c, c_other, cost),
                  Strategy.SWAP: swap_waste(c, c_other, cost)}
        score += wastes[job.strategy] if job.strategy else min(wastes.values())
        score += m * tau * (c * b + b * b / 2)
    return score


class LampsPolicy(SchedulingPolicy):
    name = "lamps"

    def __init__(self, cost: CostModel, starvation_threshold: int = 100,
                 refresh_interval: int = 1) -> None:
        self.cost = cost
        self.starvation_threshold = starvation_threshold
        self.refresh_interval = max(1, refresh_interval)
        self._passed: dict[str, int] = {}
        self._starving: dict[str, int] = {}  # job id -> order it started starving in
        self._scores: dict[str, tuple[int, float]] = {}  # job id -> (context_len, score)
        self._num_orders = 0
        self._seq = itertools.count()

    def order(self, jobs: Sequence[J], held_tokens: int = 0) -> list[J]:
        refresh = self._num_orders % self.refresh_interval == 0
        self._num_orders += 1
        total = held_tokens + sum(j.context_len + j.predicted_output for j in jobs)
        for j in jobs:
            cached = self._scores.get(j.job_id)
            # NOTE: a new context length means a new segment (a resumed or preempted request):
            # its old score must not survive until the next refresh.
            if refresh or cached is None or cached[0] != j.context_len:
                c_other = total - (j.context_len + j.predicted_output)
                self._scores[j.job_id] = (j.context_len, lamps_score(j, self.cost, c_other))
        starving = sorted((j for j in jobs if j.job_id in self._starving),
                          key=lambda j: self._starving[j.job_id])
        rest = sorted((j for j in jobs if j.job_id not in self._starving),
                      key=lambda j: self._scores[j.job_id][1])
        return starving + rest

    def on_step(self, admitted: Iterable[Job], passed_over: Iterable[Job]) -> None:
        for j in admitted:
            self._passed[j.job_id] = 0
        for j in passed_over:
            n = self._passed.get(j.job_id, 0) + 1
            self._passed[j.job_id] = n
            if n >= self.starvation_threshold and j.job_id not in self._starving:
                self._starving[j.job_id] = next(self._seq)

    def forget(self, job_id: str) -> None:
        for d in (self._passed, self._starving, self._scores):
            d.pop(job_id, None)

    def is_starving(self, job_id: str) -> bool:
        return job_id in self._starving


POLICIES: Registry[Callable[..., SchedulingPolicy]] = Registry("scheduling policy", {
    "fcfs": lambda cost=None, **kw: FCFSPolicy(),
    "arrival": lambda cost=None, **kw: ArrivalPolicy(),
    "lamps": lambda cost, **kw: LampsPolicy(cost, **kw),
})
"""Policy name → factory ``(cost, **options)``."""


def get_policy(name: str, cost: CostModel | None = None, **options) -> SchedulingPolicy:
    """A scheduling policy by name (``fcfs``, ``arrival``, ``lamps``)."""
    factory = POLICIES.get(name)
    if name == "lamps" and cost is None:
        raise ValueError("the lamps policy needs a CostModel")
    return factory(cost, **options)
