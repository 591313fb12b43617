"""The API key, as vLLM's and SGLang's ``--api-key``: a request without it is a 401.

OpenAI's clients send ``Authorization: Bearer <key>``; a missing or wrong key answers
OpenAI's ``invalid_api_key`` error (the SDK raises ``AuthenticationError``). Every route is
behind the key — generation, and also ``/flush_cache`` and ``/abort_request``, which act on
other clients' requests — except the probes a load balancer or scraper calls without one:
``/health`` and ``/metrics``. A plain ASGI middleware, so that streams and the disconnect
watch of :mod:`.streaming` see the untouched connection. Each refusal is counted in
``/metrics`` as ``agentrt_requests_total{endpoint=..., status="401"}``.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send

from agentrt.server.errors import APIError, error_response

__all__ = ["OPEN_PATHS", "APIKeyMiddleware"]

OPEN_PATHS = frozenset({"/health", "/metrics"})
"""Paths served without the key."""


class APIKeyMiddleware:
    """Answer 401 unless the request carries ``Authorization: Bearer <api_key>``."""

    def __init__(self, app: ASGIApp, api_key: str,
                 on_refused: Callable[[str], None] | None = None) -> None:
        self.app = app
        self.expected = f"Bearer {api_key}".encode()
        self.on_refused = on_refused
        """Called with the path of each request refused (the metrics count it)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS or self._has_key(scope):
            await self.app(scope, receive, send)
            return
        error = APIError(401, "Incorrect API key provided: send it as "
                              "'Authorization: Bearer <key>' (the server's --api-key).",
                         code="invalid_api_key")
        if self.on_refused is not None:
            self.on_refused(scope["path"])
        await error_response(error)(scope, receive, send)

    def _has_key(self, scope: Scope) -> bool:
        given = dict(scope["headers"]).get(b"authorization", b"")
        return hmac.compare_digest(given, self.expected)
