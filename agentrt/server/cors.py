"""Cross-origin requests from browsers: off unless origins are given.

``agentrt serve --cors-origin http://localhost:3000`` (repeatable; ``*`` = any origin;
``create_app(cors_origins=[...])``) answers browsers' preflight ``OPTIONS`` requests and
adds ``Access-Control-Allow-Origin`` to the answers for those origins, with every method
and header allowed and ``X-Request-Id`` readable, through Starlette's ``CORSMiddleware``.
vLLM, SGLang and llama-server allow every origin by default; agentrt allows none until asked,
because a server without ``--api-key`` would otherwise serve any web page its user opens.
Credentials (cookies) are never allowed: the API key travels in ``Authorization``.
"""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

__all__ = ["add_cors"]


def add_cors(app: FastAPI, origins: Sequence[str]) -> None:
    """Let browsers on ``origins`` call ``app`` (nothing when empty); a ``ValueError`` for
    an origin that is not ``*`` nor ``scheme://host[:port]``."""
    origins = list(origins)
    for origin in origins:
        if origin != "*" and ("://" not in origin or origin.rstrip("/") != origin
                              or origin.count("/") != 2):
            raise ValueError(f"cors origin {origin!r} must be '*' or scheme://host[:port] "
                             "(e.g. http://localhost:3000), without a path")
    if origins:
        app.add_middleware(CORSMiddleware, allow_origins=origins, allow_methods=["*"],
                           allow_headers=["*"], expose_headers=["X-Request-Id"])
