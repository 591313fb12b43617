"""Run: one answer in flight, the one loop every generating endpoint shares.

A run pulls the deltas of one backend call (:class:`~agentrt.backends.call.Call`, or the
chat layer's stream on top of one), maps the ``ValueError`` a backend raises when it rejects
the request before the first token to a 400, times it in the metrics, and turns it into the
endpoint's answer — whole (:meth:`Run.complete`) or as server-sent events
(:meth:`Run.events`, ``[DONE]`` last). Endpoints only say what one delta adds
(:meth:`Run.add`), which events it makes (:meth:`Run.events_of`) and what the whole answer
is (:meth:`Run.answer`). Closing a run's stream closes the call, which aborts it on the
backend: a client who leaves frees its request.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Iterable
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from agentrt.server.errors import rejected_as_400
from agentrt.server.streaming import DONE, sse

if TYPE_CHECKING:
    from agentrt.core.outputs import StreamDelta
    from agentrt.server.state import ServerState

__all__ = ["Event", "Run"]

Event = BaseModel | dict[str, Any]
"""One server-sent event's payload."""


class Run(abc.ABC):
    """One answer in flight: backend deltas → endpoint events → the whole answer."""

    counts_prompt = True
    """Whether the metrics count this run's prompt tokens (one choice of several: only the
    first counts the prompt they share)."""
    num_output_tokens = 0
    """The tokens generated so far (endpoints that answer several choices keep it)."""
    num_cached_tokens = 0
    """The prompt tokens the prefix cache served (endpoints that answer several choices
    keep it)."""

    def __init__(self, state: ServerState, started: float) -> None:
        self.state = state
        self.started = started
        """``time.monotonic()`` when the HTTP request arrived (for the latency metrics)."""

    # --- what an endpoint says ------------------------------------------------------------
    @property
    @abc.abstractmethod
    def num_prompt_tokens(self) -> int:
        """The prompt's tokens, as the metrics count them."""

    @abc.abstractmethod
    def source(self) -> AsyncIterator[StreamDelta]:
        """The backend call's deltas (closing it aborts the call)."""

    @abc.abstractmethod
    def add(self, delta: StreamDelta) -> None:
        """Take one delta into the answer so far."""

    @abc.abstractmethod
    def answer(self) -> Any:
        """The whole answer, once the call has finished."""

    def events_of(self, delta: StreamDelta) -> Iterable[Event]:
        """The events one delta (already added) makes; none by default."""
        return ()

    def final_events(self) -> Iterable[Event]:
        """The events after the last delta, before ``[DONE]``; none by default."""
        return ()

    def on_end(self) -> None:  # noqa: B027 - optional
        """Called once when the deltas end, however they end (finished, failed, closed)."""

    # --- the loop -------------------------------------------------------------------------
    async def deltas(self) -> AsyncIterator[StreamDelta]:
        """The call's deltas, added to the answer and timed (closing this aborts the call)."""
        source = rejected_as_400(self.source())
        num_prompt_tokens = self.num_prompt_tokens if self.counts_prompt else 0
        deltas = self.state.metrics.observe(source, num_prompt_tokens, self.started)
        try:
            async with aclosing(deltas):
                async for delta in deltas:
                    self.add(delta)
                    yield delta
        finally:
            self.on_end()

    async def complete(self) -> Any:
        """Run to the end; the whole answer."""
        async with aclosing(self.deltas()) as deltas:
            async for _ in deltas:
                pass
        return self.answer()

    async def choice_events(self) -> AsyncIterator[Event]:
        """The events of every delta, then the final ones."""
        async with aclosing(self.deltas()) as deltas:
            async for delta in deltas:
                for event in self.events_of(delta):
                    yield event
        for event in self.final_events():
            yield event

    async def events(self) -> AsyncIterator[str]:
        """The answer as server-sent events, ``[DONE]`` last."""
        async with aclosing(self.choice_events()) as events:
            async for event in events:
                yield sse(event)
        yield DONE
