"""Semantic variables (Parrot): the values that flow between a session's calls.

A variable is a constant, or the future output of a semantic-function call or a transform;
``get`` / ``aget`` wait for it (starting the session's executor) and name the criterion —
latency or throughput — from which the session deduces each request's objective.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agentrt.semantic.dag import Perf, SemanticError

if TYPE_CHECKING:
    from agentrt.semantic.dag import Node
    from agentrt.semantic.session import SemanticSession

__all__ = ["SemanticVariable"]


class SemanticVariable:
    """A named value of a session: a constant, or the future output of a call or transform."""

    def __init__(self, session: SemanticSession, name: str, producer: Node | None = None,
                 value: Any = None) -> None:
        self.session = session
        self.name = name
        self.producer = producer
        self.value = value
        self.error: SemanticError | None = None
        self.is_ready = producer is None
        self.event: Any = None
        """An anyio.Event set when done (made in the executor's loop by a waiter)."""

    @property
    def is_done(self) -> bool:
        """It has a value or an error."""
        return self.is_ready or self.error is not None

    def get(self, perf: Perf = Perf.LATENCY) -> Any:
        """Block until the value is ready and return it; raises :class:`SemanticError` if
        the call that computes it (or one upstream) failed. Starts the executor."""
        return self.session.wait(self, perf)

    async def aget(self, perf: Perf = Perf.LATENCY) -> Any:
        """Async twin of :meth:`get`."""
        return await self.session.await_(self, perf)

    def transform(self, fn: Callable[[Any], Any], name: str | None = None) -> SemanticVariable:
        """A new variable whose value is ``fn(value)``, computed when this one is ready (in
        the executor's loop: keep ``fn`` quick); if ``fn`` raises, ``get`` on it (and on its
        consumers) raises :class:`SemanticError`."""
        return self.session.add_transform(self, fn, name)

    def result(self) -> Any:
        """The value if ready; the failure as a fresh :class:`SemanticError` otherwise."""
        if self.error is not None:
            raise SemanticError(self.error.function, self.error.error) from self.error.error
        if not self.is_ready:
            raise RuntimeError(f"variable {self.name!r} has no value yet")
        return self.value

    def __repr__(self) -> str:
        state = repr(self.value) if self.is_ready else "error" if self.error else "pending"
        return f"SemanticVariable({self.name!r}, {state})"
