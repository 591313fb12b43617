"""What the engine reports besides the output pair: :class:`EngineLoad`, :class:`EngineStats`.

:class:`StreamDelta` and :class:`RequestOutput` live in :mod:`agentrt.core.outputs` (every
layer uses them) and are re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentrt.core.outputs import RequestOutput, StreamDelta
from agentrt.scheduler.interceptions import InterceptionStats

__all__ = ["EngineLoad", "EngineStats", "RequestOutput", "StreamDelta"]


@dataclass(frozen=True)
class EngineLoad:
    """The scheduler's queues and the KV pool at one instant (see ``Engine.load``)."""

    num_running: int
    num_waiting: int
    num_free_blocks: int
    num_evictable_blocks: int
    """Blocks held only by the prefix cache (reclaimed on demand)."""
    num_total_blocks: int
    num_paused: int = 0
    """Requests paused for a tool or between a session's calls (their KV preserved on the
    device, swapped to the host pool or discarded; neither running nor waiting)."""
    num_free_host_blocks: int = 0
    """Free blocks of the host pool that swapped-out KV goes to (0 without one)."""
    num_total_host_blocks: int = 0
    """Blocks of the host pool (``host_kv_cache_gb``; 0 without one)."""

    @property
    def kv_usage(self) -> float:
        """Share of the KV pool in use by requests (prefix-cache-only blocks count as free)."""
        used = self.num_total_blocks - self.num_free_blocks - self.num_evictable_blocks
        return used / self.num_total_blocks if self.num_total_blocks else 0.0


@dataclass
class EngineStats:
    """Engine-wide counters since start."""

    num_steps: int = 0
    num_prefill_tokens: int = 0
    num_decode_tokens: int = 0
    num_cached_tokens: int = 0
    num_preemptions: int = 0
    num_finished: int = 0
    num_aborted: int = 0
    num_recomputed_tokens: int = 0
    """Tokens computed again after their KV was discarded or evicted during an interception."""
    forward_seconds: float = 0.0
    recompute_seconds: float = 0.0
    """The share of ``forward_seconds`` spent on recomputed tokens (pro rata per step)."""
    interceptions: InterceptionStats = field(default_factory=InterceptionStats)
