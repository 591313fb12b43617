"""What the engine returns: a whole segment's result, or one streamed delta."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from agentrt.core.request import FinishReason, Request, RequestStats

__all__ = ["EngineLoad", "RequestOutput", "StreamDelta"]


@dataclass(frozen=True)
class StreamDelta:
    """New text and token ids of one request after one step."""

    request_id: str
    text: str
    token_ids: list[int]
    finished: bool = False
    finish_reason: FinishReason | None = None


@dataclass(frozen=True)
class RequestOutput:
    """Result of one generation segment (a ``generate`` or a ``resume`` call)."""

    request_id: str
    prompt_len: int
    """Tokens before this segment's outputs (the prompt, or the whole context on resume)."""
    token_ids: list[int]
    """Tokens generated in this segment (including a final EOS / stop token)."""
    text: str
    """Decoded output, stop string and special tokens removed."""
    finish_reason: FinishReason | None
    stop_reason: str | int | None = None
    logprobs: list[dict[int, float]] = field(default_factory=list)
    num_cached_tokens: int = 0
    """Prompt tokens served from the prefix cache (over the request's life)."""
    num_prefill_tokens: int = 0
    """Tokens computed in prefill chunks in this segment (prompt / appended / recompute)."""
    is_paused: bool = False
    """True when the KV was kept (``keep_kv``): the request can be resumed."""
    stats: RequestStats = field(default_factory=RequestStats)
    """A snapshot of the request's counters over its whole life (interceptions included)."""

    @classmethod
    def of(cls, req: Request, prefill_before: int = 0) -> RequestOutput:
        return cls(
            request_id=req.request_id,
            prompt_len=req.segment_start,
            token_ids=list(req.output_token_ids),
            text=req.output_text,
            finish_reason=req.finish_reason,
            stop_reason=req.stop_reason,
            logprobs=list(req.logprobs),
            num_cached_tokens=req.stats.num_cached_tokens,
            num_prefill_tokens=req.stats.num_prefill_tokens - prefill_before,
            is_paused=req.status.name == "INTERCEPTED",
            stats=copy.deepcopy(req.stats),
        )


@dataclass(frozen=True)
class EngineLoad:
    """The scheduler's queues and the KV pool at one instant (see ``Engine.load``)."""

    num_running: int
    num_waiting: int
    num_free_blocks: int
    num_evictable_blocks: int
    """Blocks held only by the prefix cache (reclaimed on demand)."""
    num_total_blocks: int
