"""Request ids, as vLLM sets them: an incoming ``X-Request-Id`` is kept, else one is made up.

:class:`RequestIdMiddleware` (outermost, so a 401 carries it too) puts the id in the
response's ``X-Request-Id`` header and in :func:`current_request_id` for the duration of the
request; :class:`RequestIdFilter` writes it into log records (``agentrt serve`` adds it to
uvicorn's access lines: ``... "POST /v1/chat/completions HTTP/1.1" 200 request_id=abc``).
The answer's ``id`` stays OpenAI's (``chatcmpl-...``), whatever the client sent.
"""

from __future__ import annotations

import logging
import uuid
from contextvars import ContextVar

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["HEADER", "RequestIdFilter", "RequestIdMiddleware", "current_request_id"]

HEADER = "X-Request-Id"
_MAX_LEN = 256
"""A longer incoming id is replaced by one of ours rather than echoed."""
_current: ContextVar[str | None] = ContextVar("agentrt_request_id", default=None)


def current_request_id() -> str | None:
    """The id of the HTTP request being served (None outside one)."""
    return _current.get()


class RequestIdMiddleware:
    """Honour ``X-Request-Id`` (or set one: a uuid4's hex) and echo it in the response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(HEADER.lower().encode(), b"").decode("latin-1")
        request_id = given.strip() if 0 < len(given.strip()) <= _MAX_LEN else uuid.uuid4().hex
        token = _current.set(request_id)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [h for h in message.get("headers", ())
                           if h[0].lower() != HEADER.lower().encode()]
                headers.append((HEADER.lower().encode(), request_id.encode("latin-1")))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            _current.reset(token)


class RequestIdFilter(logging.Filter):
    """Adds ``record.request_id``: the request's id, or ``-`` outside a request."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = current_request_id() or "-"
        return True
