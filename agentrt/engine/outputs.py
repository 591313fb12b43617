"""What the engine reports besides the output pair: :class:`EngineLoad`.

:class:`StreamDelta` and :class:`RequestOutput` live in :mod:`agentrt.core.outputs` (every
layer uses them) and are re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentrt.core.outputs import RequestOutput, StreamDelta

__all__ = ["EngineLoad", "RequestOutput", "StreamDelta"]


@dataclass(frozen=True)
class EngineLoad:
    """The scheduler's queues and the KV pool at one instant (see ``Engine.load``)."""

    num_running: int
    num_waiting: int
    num_free_blocks: int
    num_evictable_blocks: int
    """Blocks held only by the prefix cache (reclaimed on demand)."""
    num_total_blocks: int

    @property
    def kv_usage(self) -> float:
        """Share of the KV pool in use by requests (prefix-cache-only blocks count as free)."""
        used = self.num_total_blocks - self.num_free_blocks - self.num_evictable_blocks
        return used / self.num_total_blocks if self.num_total_blocks else 0.0
