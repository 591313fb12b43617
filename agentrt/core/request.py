"""Request: one sequence's state as the scheduler, KV manager and engine see it.

The token list only grows: prompt, then sampled tokens, then (on resume) appended tokens.
``num_computed_tokens`` says how many of them have KV in the cache; the scheduler's only job
for a request is to bring that count up to ``num_tokens`` and sample when it gets there.
"""

from __future__ import annotations

import enum
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from agentrt.core.sampling_params import SamplingParams

__all__ = [
    "FinishReason", "HookAction", "Interception", "Pause", "Request", "RequestStats",
    "RequestStatus",
]

FinishReason = Literal["stop", "length", "abort"]
HookAction = Literal["continue", "pause", "abort"]
# A hook may also return a Pause(kind, expected_duration) instead of "pause".


class RequestStatus(enum.Enum):
    WAITING = "waiting"  # queued; holds no blocks (or only matched prefix blocks)
    RUNNING = "running"  # scheduled each step; holds its blocks
    INTERCEPTED = "intercepted"  # paused for a tool; its KV preserved, swapped or discarded
    FINISHED = "finished"  # done; holds nothing
    PAUSED = "intercepted"  # alias of INTERCEPTED

    @property
    def is_finished(self) -> bool:
        return self is RequestStatus.FINISHED


@dataclass
class RequestStats:
    """Token counters of one request over its whole life (all segments)."""

    num_cached_tokens: int = 0
    """Prompt tokens whose KV came from the prefix cache instead of being computed."""
    num_prefill_tokens: int = 0
    """Tokens computed in prefill chunks (prompt, appended tokens, recompute)."""
    num_decode_tokens: int = 0
    """Tokens computed one at a time after being sampled."""
    num_preemptions: int = 0
    first_token_time: float | None = None
    num_interceptions: int = 0
    num_recomputed_tokens: int = 0
    """Tokens computed again because their KV was discarded or evicted while paused."""
    num_swapped_tokens: int = 0
    """Token slots of KV (whole pages) copied to the host pool and back (out + in)."""
    intercepted_seconds: float = 0.0
    """Time spent paused for tools (excluded from normalised latency)."""
    preserved_seconds: float = 0.0
    """Paused time during which the KV stayed on the device."""
    waste_bytes_seconds: float = 0.0
    """Memory × time the interceptions wasted (preserved KV idle, recompute, sync swaps)."""
    strategies: list[str] = field(default_factory=list)
    """The strategy each interception ended with (preserve, discard, swap), in order."""


@dataclass(frozen=True)
class Pause:
    """A hook's answer that pauses the request for a tool of ``kind``.

    ``expected_duration`` (seconds), when the caller knows it, steers what happens to the KV
    while the tool runs; otherwise it is estimated from earlier interceptions of ``kind``.
    """

    kind: str = "tool"
    expected_duration: float | None = None


@dataclass
class Interception:
    """One pause of a request for a tool: what it waits for and what its KV went through."""

    kind: str
    expected_duration: float | None
    start_time: float
    context_len: int
    """Tokens of KV the request held when it paused."""
    strategy: str = "preserve"
    """Where its KV is now: preserve (device), swap (host) or discard (prefix cache / gone)."""
    changed_time: float = 0.0
    """When ``strategy`` last changed (the preserved interval ends there)."""


@dataclass(eq=False)
class Request:
    request_id: str
    token_ids: list[int]
    params: SamplingParams
    namespace: str = ""
    arrival_time: float = field(default_factory=time.monotonic)
    hook: Callable[[Request, list[int]], HookAction | Pause | None] | None = None
    """Sees each step's new tokens; may answer "pause" or "abort" (None = continue)."""
    keep_kv: bool = False
    """On finishing a segment, pause with KV kept instead of releasing it."""
    forced_token_ids: deque[int] = field(default_factory=deque)
    """Tokens that replace the sampled ones, one per step (trace replay, forced output)."""
    enqueue_time: float = 0.0
    """When it last entered the waiting queue (arrival, or resume after a tool)."""
    interception: Interception | None = None
    """The current (or last) interception; set while INTERCEPTED."""
    pending_pause: Pause | None = None
    """What the request will be intercepted for when this segment ends."""
    recompute_until: int = 0
    """Tokens below this index whose KV was computed once and dropped (recompute counter)."""
    group: str | None = None
    """The graph query this request serves (topology-aware batching buckets; None = alone)."""
    depth: int = 0
    """Its primitive's longest distance to the graph's sink: deeper goes first in its group."""

    status: RequestStatus = RequestStatus.WAITING
    num_computed_tokens: int = 0
    block_table: list[int] = field(default_factory=list)
    prefix_handle: Any = None
    segment_start: int = 0
    """Index in ``token_ids`` where this segment's outputs start."""
    segment_prefill_start: int = 0
    """``stats.num_prefill_tokens`` when this segment started (its own prefill is the rest)."""
    num_segment_outputs: int = 0
    last_is_sampled: bool = False
    finish_reason: FinishReason | None = None
    stop_reason: str | int | None = None
    output_text: str = ""
    num_emitted_chars: int = 0
    """How much of ``output_text`` has been streamed out."""
    logprobs: list[dict[int, float]] = field(default_factory=list)
    stats: RequestStats = field(default_factory=RequestStats)
    detok: Any = None
    generator: Any = None

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        """Tokens generated in the current segment."""
        return self.token_ids[self.segment_start :]

    @property
    def num_pending_tokens(self) -> int:
        """Tokens still to be computed before the next sample."""
        return self.num_tokens - self.num_computed_tokens
