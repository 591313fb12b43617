"""``serve``: load the engine (or connect to the backend), then run the app under uvicorn
until interrupted."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from agentrt import env
from agentrt.server.limits import MAX_BODY_BYTES

if TYPE_CHECKING:
    from agentrt.session_table import SessionTable

__all__ = ["serve"]


def serve(model: str | None = None, *, host: str = "127.0.0.1", port: int = 8000,
          model_names: Sequence[str] = (), log_level: str = "info", backend: str = "local",
          backend_url: str | None = None, api_key: str | None = None,
          backend_api_key: str | None = None, max_body_bytes: int = MAX_BODY_BYTES,
          sessions: SessionTable | None = None, embedding_model: str | None = None,
          cors_origins: Sequence[str] = (), **engine_options: Any) -> None:
    """Serve ``model`` (None = the embedded default) on ``http://host:port/v1``.

    ``backend="local"``: ``engine_options`` are :class:`agentrt.EngineConfig` fields
    (``dtype``, ``max_num_seqs``, ``kv_cache_gb``, ...); the model is loaded before the port
    opens, so ``/health`` answers only once requests can be served. ``backend="sglang"``:
    this server fronts the SGLang server or router at ``backend_url`` (chat templates, tool
    calls, grammars and both APIs here; the tokens there); ``model`` then only names where
    the tokenizer is when the backend's own path is not on this machine; a backend that does
    not answer is a ``ConnectionError`` before the port opens. ``api_key``: requests must
    send ``Authorization: Bearer <api_key>`` (None = any request is served);
    ``backend_api_key``: the key a fronted SGLang server was started with (its ``--api-key``),
    sent on every call to it. ``max_body_bytes``: a larger request body is a 413, unread
    (default 32 MiB, :mod:`agentrt.server.limits`). ``sessions``: the table of the agents'
    sessions (``session_id``; :mod:`agentrt.server.chat_sessions`). ``embedding_model``: an
    :data:`~agentrt.server.embeddings.EMBEDDING_MODELS` name served on ``/v1/embeddings``
    (``"all-minilm-l6-v2"``; None = none). ``cors_origins``: browser origins allowed
    (:mod:`agentrt.server.cors`; empty = none). ``port=0`` takes a free
    port, which the banner names. Blocks; the engine (or the backend's connections) is
    closed on exit.
    """
    import uvicorn

    from agentrt.server.app import create_app

    if embedding_model is not None:  # NOTE: a bad name is an error before the model loads
        from agentrt.server.embeddings import EMBEDDING_MODELS

        EMBEDDING_MODELS.check(embedding_model)
    target = _target(model, backend, backend_url, engine_options, backend_api_key)
    try:
        embedder = None
        if embedding_model is not None:
            from agentrt.server.embeddings import load_embedder

            embedder = load_embedder(embedding_model)
        app = create_app(target, model_names=model_names, backend_url=backend_url,
                         api_key=api_key, max_body_bytes=max_body_bytes, sessions=sessions,
                         embedder=embedder, cors_origins=cors_origins)
        state = app.state.agentrt
        names = ", ".join(state.model_names)
        where = f"max batch {state.engine.config.max_num_seqs}" if state.engine is not None \
            else f"{backend} backend at {backend_url}"
        shown = f"[{host}]" if ":" in host else host
        # NOTE: open streams get 5 s to finish on Ctrl-C, then they are cut (and aborted)
        config = uvicorn.Config(app, host=host, port=port, log_level=log_level,
                                log_config=_log_config(), timeout_graceful_shutdown=5,
                                use_colors=False if env.no_color() else None)
        server = _server(config, lambda bound: f"agentrt serve: {names} on "
                                               f"http://{shown}:{bound}/v1 ({where})")
        server.run()
        if not server.started:
            raise SystemExit(3)  # NOTE: uvicorn.run's exit status when startup fails
    finally:
        target.close()


def _server(config: Any, banner: Callable[[int], str]) -> Any:
    """A uvicorn server that prints ``banner(port)`` once it listens: the port it bound,
    which ``--port 0`` leaves to the system."""
    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if self.started:
                print(banner(self.servers[0].sockets[0].getsockname()[1]), flush=True)

    return Server(config)


def _log_config() -> dict[str, Any]:
    """uvicorn's logging, its access lines ending with the request's id (``X-Request-Id``)."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["request_id"] = {
        "()": "agentrt.server.request_ids.RequestIdFilter"}
    config["handlers"]["access"].setdefault("filters", []).append("request_id")
    access = config["formatters"]["access"]
    access["fmt"] = access["fmt"] + " request_id=%(request_id)s"
    return config


def _target(model: str | None, backend: str, backend_url: str | None,
            engine_options: dict[str, Any], backend_api_key: str | None = None) -> Any:
    """The local engine, or the named backend at ``backend_url`` (checked reachable)."""
    if backend == "local":
        if backend_url is not None or backend_api_key is not None:
            raise ValueError("--backend-url and --backend-api-key need --backend sglang")
        from agentrt import Engine

        return Engine(model, **engine_options)
    if backend_url is None:
        raise ValueError(f"--backend {backend} needs --backend-url URL")
    import httpx

    from agentrt.backends import get_backend
    from agentrt.backends.sglang_protocol import SGLangError

    target = get_backend(backend, url=backend_url, model=model, api_key=backend_api_key)
    try:
        target.model_info  # noqa: B018 - fail now, not at the first request
    except (httpx.HTTPError, OSError, SGLangError) as exc:  # refused, down, or a 401
        target.close()
        raise ConnectionError(f"the {backend} backend at {backend_url} did not answer "
                              f"/model_info: {exc}") from exc
    return target
