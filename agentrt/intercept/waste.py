"""InferCept's waste equations: memory × time lost by each way of handling an interception.

C = context tokens of the paused request, C_other = tokens held by the other running
requests, M = KV bytes per token, T_INT = interception duration. Units: bytes·seconds.

    Discard          T_fwd(C)·C·M + T_fwd(C)·C_other·M
    Preserve         T_INT·C·M
    Swap (sync)      2·T_swap(C)·(C + C_other)·M
    Chunked discard  T_fwd(C)·C·M/2 + n·T_fwd⁺(C/n)·C_other·M      (n chunks, T_fwd⁺ marginal)

Swap, budgeted so the copy hides behind the forward pass, is close to free; what is not
swapped is preserved or discarded, whichever wastes less (Eq. 5). Preserving wins while
T_INT < T* = ChunkedDiscard / (C·M).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from agentrt.intercept.cost import CostModel

__all__ = [
    "Strategy", "WasteEstimate", "chunked_discard_waste", "crossover_duration", "discard_waste",
    "estimate", "preserve_waste", "swap_waste",
]


class Strategy(enum.Enum):
    """What happens to a paused request's KV cache."""

    PRESERVE = "preserve"  # blocks stay on the device, locked
    DISCARD = "discard"  # blocks go to the prefix cache as evictable; recompute what is lost
    SWAP = "swap"  # blocks are copied to the host pool and back


def discard_waste(c: int, c_other: int, cost: CostModel) -> float:
    """Eq. 1: recompute ``c`` tokens in one iteration that stalls everyone else."""
    t = cost.t_fwd(c)
    return t * c * cost.kv_bytes_per_token + t * c_other * cost.kv_bytes_per_token


def preserve_waste(duration: float, c: int, cost: CostModel) -> float:
    """Eq. 2: ``c`` tokens of KV idle for the whole interception."""
    return duration * c * cost.kv_bytes_per_token


def swap_waste(c: int, c_other: int, cost: CostModel) -> float:
    """Eq. 3: a synchronous swap out and in stalls the whole batch twice."""
    return 2 * cost.t_swap(c) * (c + c_other) * cost.kv_bytes_per_token


def num_recompute_chunks(c: int, running_tokens: int, cost: CostModel) -> int:
    """n: iterations to recompute ``c`` tokens in chunks of S − running tokens."""
    chunk = max(1, cost.saturation_tokens - running_tokens)
    return max(1, math.ceil(c / chunk))


def chunked_discard_waste(c: int, c_other: int, cost: CostModel, running_tokens: int = 0) -> float:
    """Eq. 4: recompute in n chunks that fill each iteration's spare token budget."""
    n = num_recompute_chunks(c, running_tokens, cost)
    own = cost.t_fwd(c) * c * cost.kv_bytes_per_token / 2
    others = n * cost.t_fwd_marginal(c / n, running_tokens) * c_other * cost.kv_bytes_per_token
    return own + others


def crossover_duration(c: int, c_other: int, cost: CostModel, running_tokens: int = 0) -> float:
    """T*: the interception length where preserving starts to waste more than discarding."""
    if c <= 0:
        return math.inf
    return chunked_discard_waste(c, c_other, cost, running_tokens) / (c * cost.kv_bytes_per_token)


@dataclass(frozen=True)
class WasteEstimate:
    """The waste of each strategy for one interception, and the least of preserve/discard."""

    preserve: float
    discard: float
    swap: float

    @property
    def best_on_device(self) -> Strategy:
        """Eq. 5: preserve or (chunked) discard, whichever wastes less; ties preserve."""
        return Strategy.PRESERVE if self.preserve <= self.discard else Strategy.DISCARD

    @property
    def least(self) -> float:
        """min(Preserve, ChunkedDiscard): the waste swapping would save."""
        return min(self.preserve, self.discard)

    def best(self, *, can_swap: bool = True) -> Strategy:
        """The argmin over all three (swap only if ``can_swap``); ties prefer to keep KV."""
        if can_swap and self.swap < self.least:
            return Strategy.SWAP
        return self.best_on_device


def estimate(c: int, c_other: int, duration: float, cost: CostModel,
             running_tokens: int = 0) -> WasteEstimate:
    """Waste of preserving, chunk-discarding and (synchronously) swapping one interception."""
    return WasteEstimate(preserve=preserve_waste(duration, c, cost),
                         discard=chunked_discard_waste(c, c_other, cost, running_tokens),
                         swap=swap_waste(c, c_other, cost))
