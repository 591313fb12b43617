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

:func:`start_stream` runs a stream up to its first event before the response starts, so
that input the engine rejects when the request is queued (a prompt longer than the context)
still gets a 400 instead of a broken stream.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable
from contextlib import aclosing
from typing import Any, TypeVar

import anyio
from fastapi import Request
from pydantic import BaseModel
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from agentrt.server.errors import APIError, internal_error

__all__ = ["DONE", "EventStreamResponse", "cancel_on_disconnect", "sse", "start_stream"]

T = TypeVar("T")
DONE = "data: [DONE]\n\n"


def sse(payload: BaseModel | dict[str, Any]) -> str:
    """One ``data:`` event carrying ``payload`` as JSON."""
    data = payload.model_dump_json() if isinstance(payload, BaseModel) else json.dumps(payload)
    return f"data: {data}\n\n"


class EventStreamResponse(StreamingResponse):
    """A ``text/event-stream`` response that always closes its generator when it ends."""

    media_type = "text/event-stream"

    def __init__(self, events: AsyncIterator[str]) -> None:
        super().__init__(events, headers={"Cache-Control": "no-cache",
                                          "X-Accel-Buffering": "no"})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self.body_iterator.aclose()  # type: ignore[attr-defined]


async def start_stream(events: AsyncIterator[str]) -> EventStreamResponse:
    """Wait for the first event of ``events`` (errors raise here), then stream them all."""
    try:
        first = await anext(events)
    except BaseException:
        await events.aclose()  # type: ignore[attr-defined]
        raise
    return EventStreamResponse(_guarded(first, events))


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


async def cancel_on_disconnect(request: Request, work: Awaitable[T]) -> T | Response:
    """Await ``work``; if the client disconnects first, cancel it and return an empty 499."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if task.cancelled():
        return Response(status_code=499)  # nginx's "client closed request"; nobody reads it
    return task.result()


async def _disconnected(request: Request) -> None:
    """Return when the client closes the connection (the body is already read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
