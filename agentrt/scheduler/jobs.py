"""JobView: a waiting request as a scheduling policy sees it, with its predictions.

Policies (:mod:`agentrt.scheduler.policies`) order plain numbers. The predictions LAMPS needs
come from history on this engine: the mean segment length (tokens generated between
interceptions) and, per tool kind, the mean interception duration. A request that asked to
keep its KV (``keep_kv``) is expected to be intercepted at the end of its segment.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from agentrt.core.request import Request
from agentrt.intercept import DurationEstimator, Strategy

__all__ = ["JobView", "SegmentPredictor"]


@dataclass
class JobView:
    job_id: str
    arrival_time: float
    enqueue_time: float
    context_len: int
    predicted_output: int
    predicted_after: int
    predicted_interception: float | None
    strategy: Strategy | None = None
    request: Request | None = None
    group: str | None = None
    depth: int = 0


class SegmentPredictor:
    """Predicts a request's next segment from what this engine has seen so far."""

    def __init__(self, estimator: DurationEstimator, window: int = 256) -> None:
        self.estimator = estimator
        self._lengths: deque[int] = deque(maxlen=window)

    def observe_segment(self, num_outputs: int) -> None:
        self._lengths.append(num_outputs)

    def segment_len(self, req: Request) -> int:
        mean = sum(self._lengths) / len(self._lengths) if self._lengths else 64
        return max(1, min(req.params.max_tokens, round(mean)))

    def view(self, req: Request) -> JobView:
        a = self.segment_len(req)
        pause = req.pending_pause
        kind = pause.kind if pause else (req.interception.kind if req.interception else "tool")
        t_int = None
        if req.keep_kv:
            hint = pause.expected_duration if pause else None
            t_int = self.estimator.estimate(kind, 0.0, hint)
        # NOTE: c0 is the whole context; prefilling it takes a few iterations, not a tokens'
        # worth of decode steps, so pending prompt or recompute tokens are not added to a.
        return JobView(req.request_id, req.arrival_time, req.enqueue_time, req.num_tokens,
                       a, a if t_int is not None else 0, t_int, request=req,
                       group=req.group, depth=req.depth)
