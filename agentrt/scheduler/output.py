"""What the scheduler hands the model runner for one step."""

from __future__ import annotations

from dataclasses import dataclass, field

from agentrt.core.request import Request

__all__ = ["ScheduledChunk", "SchedulerOutput"]


@dataclass(frozen=True)
class ScheduledChunk:
    """``num_tokens`` tokens of ``request`` starting at its ``num_computed_tokens``."""

    request: Request
    num_tokens: int

    @property
    def samples(self) -> bool:
        """Whether this chunk reaches the end of the request's tokens (so a token is sampled)."""
        return self.request.num_computed_tokens + self.num_tokens == self.request.num_tokens


@dataclass
class SchedulerOutput:
    chunks: list[ScheduledChunk] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)
    num_cached_tokens: int = 0
    """Prompt tokens of newly admitted requests found in the prefix cache."""

    @property
    def num_tokens(self) -> int:
        return sum(c.num_tokens for c in self.chunks)

    @property
    def is_empty(self) -> bool:
        return not self.chunks
