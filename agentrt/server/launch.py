"""``serve``: load the engine, then run the app under uvicorn until interrupted."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["serve"]


def serve(model: str | None = None, *, host: str = "127.0.0.1", port: int = 8000,
          model_names: Sequence[str] = (), log_level: str = "info",
          **engine_options: Any) -> None:
    """Serve ``model`` (None = the embedded default) on ``http://host:port/v1``.

    ``engine_options`` are :class:`agentrt.EngineConfig` fields (``dtype``, ``max_num_seqs``,
    ``kv_cache_gb``, ...). The model is loaded before the port opens, so ``/health``
    answers only once requests can be served. Blocks; the engine is closed on exit.
    """
    import uvicorn

    from agentrt import Engine
    from agentrt.server.app import create_app

    engine = Engine(model, **engine_options)
    try:
        app = create_app(engine, model_names=model_names)
        names = ", ".join(app.state.agentrt.model_names)
        print(f"agentrt serve: {names} on http://{host}:{port}/v1 "
              f"(max batch {engine.config.max_num_seqs})", flush=True)
        # NOTE: open streams get 5 s to finish on Ctrl-C, then they are cut (and aborted)
        uvicorn.run(app, host=host, port=port, log_level=log_level,
                    timeout_graceful_shutdown=5)
    finally:
        engine.close()
