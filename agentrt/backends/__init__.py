"""Backends behind one interface: where an agent run's tokens come from.

- ``local``: agentrt's engine in this process (the default; pauses requests in place).
- ``sglang``: an SGLang server or sglang-router over SGLang's native HTTP API (httpx).

Implementations are imported only when asked for, so ``import agentrt.backends`` pulls in
neither httpx nor an engine::

    backend = get_backend("sglang", url="http://127.0.0.1:30000")
    out = backend.generate(prompt_ids, SamplingParams(max_tokens=16))
"""

from __future__ import annotations

import importlib
from typing import Any

from agentrt.backends.base import (
    Backend,
    BackendCapabilities,
    FinishReason,
    Generation,
    GenerationChunk,
)

__all__ = ["BACKENDS", "Backend", "BackendCapabilities", "FinishReason", "Generation",
           "GenerationChunk", "get_backend"]

BACKENDS: dict[str, str] = {
    "local": "agentrt.backends.local:LocalBackend",
    "sglang": "agentrt.backends.sglang:SGLangBackend",
}
"""Backend name → ``module:class``."""


def get_backend(name: str, **kwargs: Any) -> Backend:
    """A new backend of kind ``name`` (see :data:`BACKENDS`); ``kwargs`` go to its class."""
    try:
        target = BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; choose from {sorted(BACKENDS)}") from None
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)(**kwargs)
