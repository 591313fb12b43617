"""Interception handling policies: what to do, each step, with the KV of paused requests.

* ``preserve``    — keep every paused request's blocks on the device (pinned).
* ``discard``     — release them to the prefix cache at once (recompute on resume what was
                    evicted meanwhile).
* ``swap``        — copy every paused request to the host pool at once, synchronously.
* ``least-waste`` — InferCept: estimate each preserved request's interception length (per tool
                    kind, never below the time elapsed), compute its waste
                    min(Preserve, ChunkedDiscard), swap out in descending waste order within the
                    step's swap budget, and discard the rest whose preserve waste has grown
                    past the discard cost (rent-or-buy, re-evaluated every step). Held
                    memory is only waste when someone could use it: with nobody waiting and
                    the pool not nearly full, everything stays preserved.

Like :mod:`agentrt.scheduler.policies`, this sees plain numbers only (the :class:`Paused`
protocol), so the engine and the simulator share it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from agentrt.core.registry import Registry
from agentrt.intercept.cost import CostModel
from agentrt.intercept.estimator import DurationEstimator
from agentrt.intercept.swap_budget import SwapBudget
from agentrt.intercept.waste import Strategy, estimate

__all__ = [
    "HANDLINGS", "Decision", "DiscardHandling", "HandlingPolicy", "LeastWasteHandling", "Paused",
    "PreserveHandling", "StepContext", "SwapHandling", "get_handling",
]


class Paused(Protocol):
    """What a handling policy may know about a paused request whose KV is on the device."""

    job_id: str
    context_len: int
    """C: tokens of KV the request holds."""
    elapsed: float
    """Seconds since the interception began."""
    kind: str
    """Tool kind (calculator, search, human, ...), for the duration estimate."""
    expected_duration: float | None
    """The caller's own estimate of the whole interception, if it gave one."""


P = TypeVar("P", bound=Paused)


@dataclass(frozen=True)
class Decision:
    job_id: str
    strategy: Strategy
    waste: float
    """The waste the chosen strategy avoids or incurs, for ordering and reporting."""


@dataclass
class StepContext:
    """The engine (or simulator) state a handling policy decides against."""

    cost: CostModel
    estimator: DurationEstimator
    budget: SwapBudget
    running_tokens: int = 0
    """Tokens held by running requests (C_other)."""
    batch_tokens: int = 0
    """Tokens scheduled in the last iteration."""
    memory_pressure: bool = True
    """Whether anyone could use the memory a paused request holds (requests waiting, or the
    pool nearly full). Without pressure, preserved KV wastes nothing."""


class HandlingPolicy(ABC):
    name: str = ""

    @abstractmethod
    def decide(self, paused: Sequence[P], ctx: StepContext) -> list[Decision]:
        """Strategies for the ``paused`` requests still on the device; one that is not
        returned stays preserved this step. Swaps must be granted from ``ctx.budget``."""


class PreserveHandling(HandlingPolicy):
    name = "preserve"

    def decide(self, paused: Sequence[P], ctx: StepContext) -> list[Decision]:
        return []


class DiscardHandling(HandlingPolicy):
    name = "discard"

    def decide(self, paused: Sequence[P], ctx: StepContext) -> list[Decision]:
        return [Decision(p.job_id, Strategy.DISCARD, 0.0) for p in paused]


class SwapHandling(HandlingPolicy):
    """Swap everything out at once (synchronous: ignores the budget; preserves when the host
    pool is full)."""

    name = "swap"

    def decide(self, paused: Sequence[P], ctx: StepContext) -> list[Decision]:
        out, host_free = [], ctx.budget.host_free
        for p in paused:
            if p.context_len <= host_free:
                host_free -= p.context_len
                out.append(Decision(p.job_id, Strategy.SWAP, 0.0))
        return out


class LeastWasteHandling(HandlingPolicy):
    name = "least-waste"

    def decide(self, paused: Sequence[P], ctx: StepContext) -> list[Decision]:
        if not ctx.memory_pressure:
            return []
        scored = []
        for p in paused:
            t_int = ctx.estimator.estimate(p.kind, p.elapsed, p.expected_duration)
            w = estimate(p.context_len, ctx.running_tokens, t_int, ctx.cost, ctx.batch_tokens)
            scored.append((w.least, w, p))
        scored.sort(key=lambda s: -s[0])
        decisions = []
        for least, w, p in scored:
            if ctx.budget.grant_out(p.context_len):
                decisions.append(Decision(p.job_id, Strategy.SWAP, least))
            elif w.best_on_device is Strategy.DISCARD:
                decisions.append(Decision(p.job_id, Strategy.DISCARD, least))
        return decisions


HANDLINGS: Registry[Callable[[], HandlingPolicy]] = Registry("interception handling", {
    "preserve": PreserveHandling, "discard": DiscardHandling, "swap": SwapHandling,
    "least-waste": LeastWasteHandling,
})


def get_handling(name: str) -> HandlingPolicy:
    """An interception handling policy by name."""
    return HANDLINGS.create(name)
