"""Attention backends behind one interface, chosen by name through a lazy registry."""

from __future__ import annotations

import importlib

from agentrt.attention.base import AttentionBackend, AttentionMetadata, KVCacheTensors

__all__ = ["BACKENDS", "AttentionBackend", "AttentionMetadata", "KVCacheTensors", "get_backend"]

# name -> "module:class"; imported only when chosen, so a CPU install never imports GPU code
BACKENDS: dict[str, str] = {
    "torch": "agentrt.attention.torch_ref:TorchRefBackend",
}


def get_backend(name: str) -> type[AttentionBackend]:
    """The backend class registered as ``name``."""
    if name not in BACKENDS:
        raise ValueError(f"unknown attention backend {name!r}; choose from {sorted(BACKENDS)}")
    module, cls = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module), cls)
