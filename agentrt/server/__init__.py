"""``agentrt serve``: an OpenAI-compatible HTTP server on agentrt's engine.

One :class:`agentrt.Engine` per process serves every client through its continuous
batching; the endpoints are async and stream from ``Engine.astream``:

- ``POST /v1/chat/completions`` (:mod:`.chat`, on the shared :mod:`agentrt.chat` layer:
  tools, ``tool_choice``, ``response_format``, streamed tool-call deltas, usage)
- ``POST /v1/completions`` (:mod:`.completions`: text or token-id prompts)
- ``GET /v1/models``, ``GET /health``, ``GET /metrics`` (Prometheus, :mod:`.metrics`)
- SGLang's native API (:mod:`.native`, SGLang 0.5.8's shapes): ``POST /generate`` with
  ``rid``, streaming and sessions (``/open_session``, ``/close_session``; a session is a
  paused engine request, :mod:`.native_sessions`), ``/abort_request``; and what
  sglang-router asks of a worker (:mod:`.worker`: ``/server_info``, ``/model_info``,
  ``/get_load``, ``/flush_cache``, ``/health_generate``) — so several ``agentrt serve``
  processes run behind ``sglang-router --policy cache_aware``

Request and answer shapes are in :mod:`.protocol`, OpenAI-style error bodies in
:mod:`.errors`, server-sent events and the closing of a departed client's request in
:mod:`.streaming`. FastAPI, uvicorn and prometheus-client (the ``[server]`` extra) are
imported only here: ``import agentrt`` never imports them.

    >>> from agentrt.server import serve
    >>> serve(port=8000)                       # then: OpenAI(base_url="http://127.0.0.1:8000/v1")
"""

from agentrt.server.app import create_app
from agentrt.server.launch import serve

__all__ = ["create_app", "serve"]
