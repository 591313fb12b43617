"""Server-sent events, and the guarantee that a client who leaves frees its request's KV.

Every answer is produced by an async generator chain ending in ``Engine.astream``, whose
closing aborts the engine request and frees its KV. So the one rule is: whatever happens to
the client, the chain gets closed, promptly.

- A stream (:class:`EventStreamResponse`): Starlette cancels the response when the client
  disconnects. If the generator was suspended inside the engine, the cancellation unwinds
  it; if it was suspended at a ``yield`` (the response was writing), nothing would close it
  until garbage collection — so the response closes its body iterator itself, shielded
  from the cancellation, whatever ended the stream. Each layer of the chain closes its
  source with ``contextlib.aclosing`` (``async for`` alone does not).
- A whole answer (:func:`cancel_on_disconnect`): the work runs as a task next to a watcher
  of the connection; a disconnect cancels the task, which closes the chain.

Both report how the answer ended through ``on_end(status)`` — the endpoints count it in
the metrics: 200 when the whole answer went out, 499 (nginx's "client closed request") when
the client left first, although a stream's status line already said 200.

:func:`start_stream` runs a stream up to its first event before the response starts, so
that input the engine rejects when the request is queued (a prompt longer than the context)
still gets a 400 instead of a broken stream.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Any, TypeVar

import anyio
from fastapi import Request
from pydantic import BaseModel
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from agentrt.server.errors import APIError, internal_error

__all__ = ["CLIENT_CLOSED", "DONE", "EventStreamResponse", "OnEnd", "cancel_on_disconnect",
           "sse", "start_stream"]

T = TypeVar("T")
DONE = "data: [DONE]\n\n"
CLIENT_CLOSED = 499
"""The status a request is counted with when its client left before the answer ended."""
OnEnd = Callable[[int], None]
"""Called once with the status an answer ended with (200, or 499 if the client left)."""


def sse(payload: BaseModel | dict[str, Any]) -> str:
    """One ``data:`` event carrying ``payload`` as JSON."""
    data = payload.model_dump_json() if isinstance(payload, BaseModel) else json.dumps(payload)
    return f"data: {data}\n\n"


class EventStreamResponse(StreamingResponse):
    """A ``text/event-stream`` response that always closes its generator when it ends, and
    tells ``on_end`` whether every event went out (200) or the client left first (499)."""

    media_type = "text/event-stream"

    def __init__(self, events: AsyncIterator[str], on_end: OnEnd | None = None) -> None:
        self.on_end = on_end
        self.is_complete = False
        super().__init__(self._tracked(events), headers={"Cache-Control": "no-cache",
                                                         "X-Accel-Buffering": "no"})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self.body_iterator.aclose()  # type: ignore[attr-defined]
            if not self.is_complete:
                self._end(CLIENT_CLOSED)

    async def _tracked(self, events: AsyncIterator[str]) -> AsyncIterator[str]:
        async with aclosing(events):  # type: ignore[type-var]
            async for event in events:
                yield event
        # NOTE: counted before the response's last (empty) body message, so a client that
        # has read the whole stream finds it counted
        self.is_complete = True
        self._end(200)

    def _end(self, status: int) -> None:
        if self.on_end is not None:
            self.on_end(status)


async def start_stream(events: AsyncIterator[str], on_end: OnEnd | None = None
                       ) -> EventStreamResponse:
    """Wait for the first event of ``events`` (errors raise here), then stream them all;
    ``on_end(status)`` when the stream ends."""
    try:
        first = await anext(events)
    except BaseException:
        await events.aclose()  # type: ignore[attr-defined]
        raise
    return EventStreamResponse(_guarded(first, events), on_end)


async def _guarded(first: str, events: AsyncIterator[str]) -> AsyncIterator[str]:
    """``first``, then ``events``; a failure midway becomes an error event, not a cut."""
    async with aclosing(events):  # type: ignore[type-var]
        yield first
        try:
            async for event in events:
                yield event
        except Exception as exc:  # noqa: BLE001 - the status line is already sent
            error = exc if isinstance(exc, APIError) else internal_error(exc)
            yield sse(error.body())
            yield DONE


async def cancel_on_disconnect(request: Request, work: Awaitable[T],
                               on_end: OnEnd | None = None) -> T | Response:
    """Await ``work``; if the client disconnects first, cancel it and return an empty 499.

    ``on_end(status)`` hears 200 or 499 (not a failure of ``work``: that raises here).
    """
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    status = CLIENT_CLOSED if task.cancelled() else 200
    result = Response(status_code=status) if task.cancelled() else task.result()
    if on_end is not None:
        on_end(status)
    return result  # NOTE: nobody reads a 499


async def _disconnected(request: Request) -> None:
    """Return when the client closes the connection (the body is already read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
