"""``serve``: load the engine (or connect to the backend), then run the app under uvicorn
until interrupted."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentrt import env

__all__ = ["serve"]


def serve(model: str | None = None, *, host: str = "127.0.0.1", port: int = 8000,
          model_names: Sequence[str] = (), log_level: str = "info", backend: str = "local",
          backend_url: str | None = None, api_key: str | None = None,
          **engine_options: Any) -> None:
    """Serve ``model`` (None = the embedded default) on ``http://host:port/v1``.

    ``backend="local"``: ``engine_options`` are :class:`agentrt.EngineConfig` fields
    (``dtype``, ``max_num_seqs``, ``kv_cache_gb``, ...); the model is loaded before the port
    opens, so ``/health`` answers only once requests can be served. ``backend="sglang"``:
    this server fronts the SGLang server or router at ``backend_url`` (chat templates, tool
    calls, grammars and both APIs here; the tokens there); ``model`` then only names where
    the tokenizer is when the backend's own path is not on this machine; a backend that does
    not answer is a ``ConnectionError`` before the port opens. ``api_key``: requests must
    send ``Authorization: Bearer <api_key>`` (None = any request is served). Blocks; the
    engine (or the backend's connections) is closed on exit.
    """
    import uvicorn

    from agentrt.server.app import create_app

    target = _target(model, backend, backend_url, engine_options)
    try:
        app = create_app(target, model_names=model_names, backend_url=backend_url,
                         api_key=api_key)
        state = app.state.agentrt
        names = ", ".join(state.model_names)
        where = f"max batch {state.engine.config.max_num_seqs}" if state.engine is not None \
            else f"{backend} backend at {backend_url}"
        print(f"agentrt serve: {names} on http://{host}:{port}/v1 ({where})", flush=True)
        # NOTE: open streams get 5 s to finish on Ctrl-C, then they are cut (and aborted)
        uvicorn.run(app, host=host, port=port, log_level=log_level,
                    timeout_graceful_shutdown=5, use_colors=False if env.no_color() else None)
    finally:
        target.close()


def _target(model: str | None, backend: str, backend_url: str | None,
            engine_options: dict[str, Any]) -> Any:
    """The local engine, or the named backend at ``backend_url`` (checked reachable)."""
    if backend == "local":
        if backend_url is not None:
            raise ValueError("--backend-url needs --backend sglang")
        from agentrt import Engine

        return Engine(model, **engine_options)
    if backend_url is None:
        raise ValueError(f"--backend {backend} needs --backend-url URL")
    import httpx

    from agentrt.backends import get_backend
    from agentrt.backends.sglang_protocol import SGLangError

    target = get_backend(backend, url=backend_url, model=model)
    try:
        target.model_info  # noqa: B018 - fail now, not at the first request
    except (httpx.HTTPError, OSError, SGLangError) as exc:  # refused, down, or a 401
        target.close()
        raise ConnectionError(f"the {backend} backend at {backend_url} did not answer "
                              f"/model_info: {exc}") from exc
    return target
