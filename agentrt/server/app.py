"""The FastAPI app: the OpenAI routes plus ``/health``, ``/v1/models`` and ``/metrics``, and
SGLang's native API (:mod:`.native`) with the worker endpoints sglang-router uses
(:mod:`.worker`), behind an API key when one is given (:mod:`.auth`), refusing bodies over
a size limit (:mod:`.limits`).

:func:`create_app` wires one engine — or any backend, e.g. an SGLang server this one fronts —
into an app; it neither starts nor stops it (:func:`agentrt.server.serve` does both), so tests
and embedders can bring their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio
import httpx
from fastapi import APIRouter, FastAPI
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.responses import JSONResponse, Response

from agentrt import __version__
from agentrt.server import chat, chat_sessions, completions, embeddings, native, tokens, worker
from agentrt.server.auth import APIKeyMiddleware
from agentrt.server.cors import add_cors
from agentrt.server.errors import install_error_handlers
from agentrt.server.limits import MAX_BODY_BYTES, BodyLimitMiddleware
from agentrt.server.native_sessions import NativeState
from agentrt.server.protocol import ModelCard, ModelList
from agentrt.server.request_ids import RequestIdMiddleware
from agentrt.server.state import ServerState, State

if TYPE_CHECKING:
    from agentrt.backends.base import Backend
    from agentrt.engine.engine import Engine
    from agentrt.session_table import SessionTable

__all__ = ["create_app"]

_COUNTED = frozenset({chat.ENDPOINT, completions.ENDPOINT, embeddings.ENDPOINT, "/v1/models",
                      *native.ENDPOINTS})
router = APIRouter()


def create_app(target: Engine | Backend, *, model_names: Sequence[str] = (),
               backend_url: str | None = None, api_key: str | None = None,
               max_body_bytes: int = MAX_BODY_BYTES,
               sessions: SessionTable | None = None, embedder: Any = None,
               cors_origins: Sequence[str] = ()) -> FastAPI:
    """An OpenAI-compatible app serving ``target``: an engine, or a backend.

    ``model_names``: the names clients pass as ``model`` and ``/v1/models`` lists (default:
    the model's short name, e.g. ``SmolLM2-135M-Instruct``). ``backend_url``: the server a
    remote backend talks to, whose load ``/metrics`` and ``/get_load`` report. ``api_key``:
    requests must carry ``Authorization: Bearer <api_key>`` (:mod:`.auth`; None = open).
    ``max_body_bytes``: a larger request body is a 413, unread (:mod:`.limits`).
    ``sessions``: the table of the agents' sessions (``session_id`` on chat requests; its
    ``ttl_s`` and ``max_sessions`` bound them; default 120 s and 64).
    ``embedder``: the embedding model ``/v1/embeddings`` serves (:mod:`.embeddings`; None =
    a 404 there). ``cors_origins``: browser origins allowed to call the API (``"*"`` = any;
    empty = no CORS headers, the default).
    """
    if api_key is not None and not api_key.strip():
        raise ValueError("api_key must be a non-empty string (or None: no key)")
    state = ServerState.of(target, model_names, backend_url=backend_url, sessions=sessions)
    state.embedder = embedder
    where = "agentrt's local engine" if state.engine is not None else \
        f"a {state.backend.name} backend"
    app = FastAPI(title="agentrt", version=__version__,
                  description=f"OpenAI-compatible API on {where}.")
    app.state.agentrt = state
    app.state.native = NativeState(state.backend)
    install_error_handlers(app, lambda request, status: _count(state, request.url.path, status))
    app.include_router(chat.router)
    app.include_router(chat_sessions.router)
    app.include_router(completions.router)
    app.include_router(native.router)
    app.include_router(worker.router)
    app.include_router(tokens.router)
    app.include_router(embeddings.router)
    app.include_router(router)
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=max_body_bytes,
                       on_refused=lambda path: _count(state, path, 413))
    if api_key is not None:
        app.add_middleware(APIKeyMiddleware, api_key=api_key,
                           on_refused=lambda path: _count(state, path, 401))
    add_cors(app, cors_origins)  # NOTE: outside the key check: a preflight carries no key
    app.add_middleware(RequestIdMiddleware)  # NOTE: added last, so outermost: all carry it
    return app


def _count(state: ServerState, path: str, status: int) -> None:
    state.metrics.count(path if path in _COUNTED else "other", status)


@router.get("/health")
async def health(state: State) -> Response:
    """200 once the model is loaded and the server accepts requests. A front server is
    healthy only while its backend's ``/health`` answers 200 (else 503, so that
    sglang-router stops routing to it)."""
    if state.engine is None and state.backend_url and not await _backend_healthy(state):
        return JSONResponse({"status": "backend unavailable", "model": state.model_name,
                             "backend_url": state.backend_url}, status_code=503)
    return JSONResponse({"status": "ok", "model": state.model_name})


async def _backend_healthy(state: ServerState) -> bool:
    try:
        async with httpx.AsyncClient(base_url=state.backend_url or "", timeout=_HEALTH_PROBE_S,
                                     headers=state.backend_headers) as client:
            return (await client.get("/health")).status_code == 200
    except httpx.HTTPError:
        return False


_HEALTH_PROBE_S = 5.0
"""Seconds a front server's ``/health`` waits for its backend's."""


@router.get("/v1/models")
async def list_models(state: State) -> ModelList:
    """The names this server answers to (any of them works as ``model``)."""
    state.metrics.count("/v1/models", 200)
    names = [*state.model_names, *(embeddings.embedding_names(state.embedder)
                                   if state.embedder is not None else ())]
    return ModelList(data=[ModelCard(id=name) for name in names])


@router.get("/v1/models/{model:path}")
async def retrieve_model(model: str, state: State) -> ModelCard:
    """One served model, matched as ``model`` is in requests (404 ``model_not_found``)."""
    return ModelCard(id=state.resolve_model(model))


@router.get("/metrics")
async def metrics(state: State) -> Response:
    """Prometheus metrics (see :mod:`agentrt.server.metrics`)."""
    body = await anyio.to_thread.run_sync(state.metrics.render)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
