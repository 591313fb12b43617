"""Errors in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``.

Every failure a client can cause answers with this body and a 4xx status, so OpenAI's
clients raise their usual exceptions (``BadRequestError``, ``NotFoundError``) with a
readable message: :class:`APIError` raised by the endpoints, FastAPI's request validation
(malformed JSON, wrong types, ``max_tokens`` below 1 — 400 naming the field, as OpenAI does,
not FastAPI's 422), Starlette's own HTTP errors (unknown route, wrong method, a body that is
not UTF-8 JSON), and — as a 500 — anything else (:class:`InternalErrorMiddleware`: logged
with its traceback and request id, the connection kept open for the client's next request).
The endpoints turn a ``ValueError`` of the chat layer or the engine (input they cannot
honour) into a 400 themselves; a stray ``ValueError`` elsewhere is a bug, not the client's.
:func:`check_context` rejects a ``max_tokens`` that does not fit the context with the
prompt, in OpenAI's words (``context_length_exceeded``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentrt.server.request_ids import current_request_id

__all__ = ["APIError", "InternalErrorMiddleware", "check_context", "error_response",
           "install_error_handlers", "internal_error", "rejected_as_400"]

T = TypeVar("T")

_TYPES = {500: "server_error", 502: "server_error", 503: "server_error"}
"""Other statuses are ``invalid_request_error``."""
_log = logging.getLogger("uvicorn.error")
"""Where uvicorn logs a failure of the app (``agentrt serve`` configures it)."""


class APIError(Exception):
    """A failure to report to the client as an OpenAI error body."""

    def __init__(self, status_code: int, message: str, *, param: str | None = None,
                 code: str | None = None, type: str | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.param = param
        self.code = code
        self.type = type or _TYPES.get(status_code, "invalid_request_error")

    @classmethod
    def bad_request(cls, exc: Exception, param: str | None = None) -> APIError:
        """A 400 for input the runtime rejected with ``exc``."""
        return cls(400, str(exc), param=param)

    def body(self) -> dict[str, Any]:
        """OpenAI's error body."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}


def check_context(max_model_len: int, num_prompt_tokens: int, max_tokens: int, *,
                  param: str, chat: bool) -> None:
    """Raise a 400 unless ``num_prompt_tokens + max_tokens`` fits the model's context.

    ``param`` is the field that asked for ``max_tokens`` (named when it alone cannot fit);
    ``chat`` picks OpenAI's wording for chat (the messages) or legacy completions (the
    prompt). As in OpenAI's API and vLLM, the request is rejected rather than clamped.
    """
    if max_tokens >= max_model_len:
        raise APIError(400, f"{param} is too large: {max_tokens}. This model's maximum context "
                            f"length is {max_model_len} tokens, prompt and completion together.",
                       param=param, code="invalid_value")
    total = num_prompt_tokens + max_tokens
    if total <= max_model_len:
        return
    if chat:
        message = (f"This model's maximum context length is {max_model_len} tokens. However, "
                   f"you requested {total} tokens ({num_prompt_tokens} in the messages, "
                   f"{max_tokens} in the completion). Please reduce the length of the "
                   "messages or completion.")
    else:
        message = (f"This model's maximum context length is {max_model_len} tokens, however "
                   f"you requested {total} tokens ({num_prompt_tokens} in your prompt; "
                   f"{max_tokens} for the completion). Please reduce your prompt; or "
                   "completion length.")
    raise APIError(400, message, param="messages" if chat else "prompt",
                   code="context_length_exceeded")


async def rejected_as_400(stream: AsyncIterator[T]) -> AsyncIterator[T]:
    """``stream`` (an engine stream), with the ``ValueError`` by which the engine rejects a
    request when it is queued — before the first item — raised as a 400."""
    async with aclosing(stream):  # type: ignore[type-var]
        try:
            first = await anext(stream)
        except ValueError as exc:
            raise APIError.bad_request(exc) from exc
        yield first
        async for item in stream:
            yield item


def error_response(error: APIError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status_code)


def install_error_handlers(app: FastAPI, on_error: Callable[[Request, int], None]) -> None:
    """Answer every error in OpenAI's shape; ``on_error(request, status)`` counts them."""

    def handler(convert: Callable[[Request, Any], APIError]) -> Callable[..., Any]:
        async def handle(request: Request, exc: Exception) -> JSONResponse:
            error = convert(request, exc)
            on_error(request, error.status_code)
            response = error_response(error)
            if isinstance(exc, HTTPException) and exc.headers:  # a 405's Allow
                response.headers.update(exc.headers)
            return response

        return handle

    app.add_exception_handler(APIError, handler(lambda _, e: e))
    app.add_exception_handler(RequestValidationError, handler(_from_validation))
    app.add_exception_handler(HTTPException, handler(_from_http))
    # NOTE: not as Starlette's handler of Exception: that one runs outside every middleware
    # (no X-Request-Id) and re-raises, so uvicorn closes the client's keep-alive connection
    app.add_middleware(InternalErrorMiddleware, on_error=on_error)


class InternalErrorMiddleware:
    """Answer any other exception with :func:`internal_error`'s body (a 500, or a backend's
    status), log it with its traceback and request id, and keep the connection open. One
    raised after the response started (a stream) is re-raised: the connection must close."""

    def __init__(self, app: ASGIApp, on_error: Callable[[Request, int], None]) -> None:
        self.app = app
        self.on_error = on_error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception as exc:
            if started:
                raise
            error = internal_error(exc)
            if error.status_code >= 500:
                _log.error("Exception in ASGI application (request_id=%s, %s %s)",
                           current_request_id(), scope["method"], scope["path"], exc_info=exc)
            self.on_error(Request(scope), error.status_code)
            await error_response(error)(scope, receive, send)


def internal_error(exc: BaseException) -> APIError:
    """``exc`` as the client's answer: a backend's failure as the backend's (see
    :func:`_from_backend`), anything else a 500 for a failure of the server itself (logged by
    the ASGI server too)."""
    return _from_backend(exc) or APIError(500, f"internal error: {type(exc).__name__}: {exc}")


def _from_backend(exc: BaseException) -> APIError | None:
    """A front server's backend that failed (an ``SGLangError``): one that did not answer, or
    answered 5xx, is a 502 naming it; its own 4xx (a request it refused) keeps that status
    and message. None for any other exception."""
    from agentrt.backends.sglang_protocol import SGLangError

    if not isinstance(exc, SGLangError):
        return None
    if 400 <= exc.status_code < 500:
        return APIError(exc.status_code, exc.message)
    return APIError(502, f"the backend failed: {exc}", code="backend_unavailable")


def _from_http(request: Request, exc: HTTPException) -> APIError:
    where = f"{request.method} {request.url.path}"
    if exc.status_code == 404:
        return APIError(404, f"Unknown endpoint {where}; see /docs for the API.",
                        code="unknown_url")
    if exc.status_code == 413:
        return APIError(413, str(exc.detail), code="request_too_large")
    if exc.status_code == 400 and exc.__cause__ is not None:  # FastAPI could not read the body
        return APIError(400, f"We could not parse the JSON body of your request: "
                             f"{_unreadable(exc.__cause__)}. Send a JSON object as UTF-8 with "
                             "Content-Type: application/json.", code="invalid_json")
    return APIError(exc.status_code, f"{exc.detail}: {where}")


def _unreadable(cause: BaseException) -> str:
    """Why FastAPI could not read a body, in a client's words."""
    if isinstance(cause, UnicodeDecodeError):
        return f"it is not valid UTF-8 (byte {cause.object[cause.start]:#04x} at " \
               f"position {cause.start})"
    if isinstance(cause, RecursionError):
        return "it is nested too deeply"
    return type(cause).__name__


def _from_validation(_: Request, exc: RequestValidationError) -> APIError:
    # NOTE: deepest first: of a union's failed branches, the one the client meant
    errors = sorted(exc.errors(), key=lambda e: -len(e.get("loc", ())))
    if not errors:
        return APIError(400, "invalid request")
    first = errors[0]
    if isinstance(first.get("input"), bytes) and not _param(first):
        return APIError(400, "The request body must be a JSON object sent with Content-Type: "
                             "application/json.", code="invalid_json")
    if first.get("type") == "json_invalid":
        reason = (first.get("ctx") or {}).get("error", "not valid JSON")
        return APIError(400, f"We could not parse the JSON body of your request: {reason}. "
                             "Send a JSON object with Content-Type: application/json.",
                        code="invalid_json")
    messages = [_describe(e) for e in errors[:3]]
    return APIError(400, "; ".join(messages), param=_param(first) or None,
                    code="invalid_value")


def _describe(error: dict[str, Any]) -> str:
    param = _param(error)
    message = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
    if error.get("type") == "missing":
        return f"{param or 'the request body'} is required"
    if error.get("type") == "value_error":  # ours: the message names the field and value
        return message
    shown = repr(error.get("input"))
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    where = f"{param}: " if param else ""
    return f"{where}{message} (got {shown})"


def _param(error: dict[str, Any]) -> str:
    """The field's dotted path, without FastAPI's ``body`` and pydantic's union-branch names."""
    loc = [str(p) for p in error.get("loc", ()) if p != "body"]
    fields = [p for p in loc if not _is_type_name(p)]
    return ".".join(fields)


def _is_type_name(part: str) -> bool:
    """pydantic names union branches in ``loc`` (``str``, ``list[int]``, ...)."""
    return part in ("str", "int", "float", "bool", "dict") or "[" in part
