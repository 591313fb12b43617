"""Backends behind one interface: where an agent run's tokens come from.

- ``local``: agentrt's engine in this process (the default; pauses requests in place).
- ``sglang``: an SGLang server or sglang-router over SGLang's native HTTP API (httpx).

Implementations are imported only when asked for, so ``import agentrt.backends`` pulls in
neither httpx nor an engine::

    backend = get_backend("sglang", url="http://127.0.0.1:30000")
    out = backend.generate(prompt_ids, SamplingParams(max_tokens=16))
"""

from __future__ import annotations

from typing import Any

from agentrt.backends.base import Backend, BackendCapabilities, FinishReason
from agentrt.backends.call import Call, as_backend
from agentrt.core.registry import Registry

__all__ = ["BACKENDS", "Backend", "BackendCapabilities", "Call", "FinishReason", "as_backend",
           "get_backend"]

BACKENDS: Registry[type[Backend]] = Registry("backend", {
    "local": "agentrt.backends.local:LocalBackend",
    "sglang": "agentrt.backends.sglang:SGLangBackend",
})
"""Backend name → ``module:class`` (see :class:`~agentrt.core.registry.Registry`)."""


def get_backend(name: str, **kwargs: Any) -> Backend:
    """A new backend of kind ``name`` (see :data:`BACKENDS`); ``kwargs`` go to its class."""
    return BACKENDS.create(name, **kwargs)
