"""What one request may hold, so that it cannot harm the others: a 4xx instead.

- The body: at most :data:`MAX_BODY_BYTES` (:class:`BodyLimitMiddleware`). A larger
  ``Content-Length`` is a 413 before a byte of the body is read; a body without one
  (chunked) is counted as it arrives and refused when it passes the limit.
- Stop strings: at most :data:`MAX_STOPS`, each at most :data:`MAX_STOP_CHARS` characters
  (:func:`check_stop`). The engine matches every stop string of every request in the batch
  after every token, on its one driver thread, so 100,000 of them slowed every client's
  stream; OpenAI takes 4.
- Text: valid Unicode (:func:`check_text`). JSON may carry a lone UTF-16 surrogate
  (``"\\ud800"``), which no tokenizer can encode.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentrt.server.errors import APIError, error_response

__all__ = ["MAX_BODY_BYTES", "MAX_STOPS", "MAX_STOP_CHARS", "BodyLimitMiddleware",
           "check_stop", "check_text"]

MAX_BODY_BYTES = 32 * 1024 * 1024
"""The largest request body served (32 MiB: far above any prompt a context holds)."""
MAX_STOPS = 64
MAX_STOP_CHARS = 512


def too_large(limit: int) -> APIError:
    """The 413 of a body over ``limit`` bytes."""
    return APIError(413, f"The request body is larger than this server's limit of {limit} "
                         "bytes.", code="request_too_large")


class BodyLimitMiddleware:
    """Answer 413 to a request whose body is over ``max_body_bytes``, reading no more of it."""

    def __init__(self, app: ASGIApp, max_body_bytes: int = MAX_BODY_BYTES,
                 on_refused: Callable[[str], None] | None = None) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.on_refused = on_refused
        """Called with the path of each request refused from its ``Content-Length``."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            if self.on_refused is not None:
                self.on_refused(scope["path"])
            response = error_response(too_large(self.max_body_bytes))
            response.headers["Connection"] = "close"  # NOTE: the body stays unread
            await response(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_body_bytes:
                # NOTE: FastAPI re-raises an HTTPException met while reading the body
                raise HTTPException(413, too_large(self.max_body_bytes).message)
            return message

        await self.app(scope, counted, send)


def check_stop(stop: str | list[str] | None, param: str = "stop") -> str | list[str] | None:
    """``stop`` unless it has more than :data:`MAX_STOPS` strings or one longer than
    :data:`MAX_STOP_CHARS` (a ``ValueError`` naming ``param``)."""
    stops = [stop] if isinstance(stop, str) else stop or []
    if len(stops) > MAX_STOPS:
        raise ValueError(f"{param} takes at most {MAX_STOPS} strings, got {len(stops)}")
    longest = max(map(len, stops), default=0)
    if longest > MAX_STOP_CHARS:
        raise ValueError(f"{param} strings are at most {MAX_STOP_CHARS} characters long, "
                         f"got one of {longest}")
    return stop


def check_text(value: Any, param: str) -> Any:
    """``value`` unless a string in it (at any depth) holds a lone UTF-16 surrogate: then a
    ``ValueError`` naming where (``messages.0.content``)."""
    where = _lone_surrogate(value, param)
    if where is not None:
        raise ValueError(f"{where} is not valid Unicode: it holds a lone UTF-16 surrogate "
                         "(an unpaired \\ud800-\\udfff escape); send text as UTF-8")
    return value


def _lone_surrogate(value: Any, path: str) -> str | None:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path
        return None
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = _lone_surrogate(key, path) if isinstance(key, str) else None
        found = found or _lone_surrogate(item, f"{path}.{key}")
        if found is not None:
            return found
    return None
