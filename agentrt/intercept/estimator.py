"""DurationEstimator: how long will this interception last? Learned per tool kind.

Each finished interception adds its duration to its kind's history; the estimate for a new
one is the kind's recent mean. With no history the estimate is the time elapsed so far
(InferCept's rent-or-buy: keep preserving until elapsed·C·M exceeds the cost of discarding),
and an estimate never falls below the time already elapsed.
"""

from __future__ import annotations

from collections import defaultdict, deque

__all__ = ["DurationEstimator"]


class DurationEstimator:
    def __init__(self, window: int = 64) -> None:
        self._history: defaultdict[str, deque[float]] = defaultdict(lambda: deque(maxlen=window))

    def observe(self, kind: str, seconds: float) -> None:
        """Record the duration of a finished interception of ``kind``."""
        self._history[kind].append(max(0.0, seconds))

    def mean(self, kind: str) -> float | None:
        """Mean observed duration of ``kind``; None before the first observation."""
        h = self._history.get(kind)
        return sum(h) / len(h) if h else None

    def estimate(self, kind: str, elapsed: float = 0.0, hint: float | None = None) -> float:
        """Expected total duration of an interception of ``kind`` that has lasted ``elapsed``.

        ``hint`` (the caller's own expectation, e.g. a tool's declared timeout) wins over
        history; both are raised to ``elapsed``.
        """
        expected = hint if hint is not None else self.mean(kind)
        return max(elapsed, expected if expected is not None else 0.0)

    def num_observed(self, kind: str) -> int:
        return len(self._history.get(kind, ()))
