"""Attention backends behind one interface, chosen by name through a lazy registry."""

from __future__ import annotations

import importlib

from agentrt.attention.base import AttentionBackend, AttentionMetadata, KVCacheTensors

__all__ = ["BACKENDS", "AttentionBackend", "AttentionMetadata", "KVCacheTensors", "get_backend"]

# name -> "module:class"; imported only when chosen, so a CPU install never imports GPU code.
# The *_cascade variants attend to a prefix shared by several requests once per group; "cpu"
# is "torch" with single-token queries attended by agentrt's C++ kernel.
BACKENDS: dict[str, str] = {
    "torch": "agentrt.attention.torch_ref:TorchRefBackend",
    "torch_cascade": "agentrt.attention.torch_cascade:TorchCascadeBackend",
    "cpu": "agentrt_kernels.cpu.attention:CpuDecodeBackend",
    "flashinfer": "agentrt_kernels.flashinfer_backend:FlashInferBackend",
    "flashinfer_cascade": "agentrt_kernels.flashinfer_backend:FlashInferCascadeBackend",
}


def get_backend(name: str) -> type[AttentionBackend]:
    """The backend class registered as ``name``."""
    if name not in BACKENDS:
        raise ValueError(f"unknown attention backend {name!r}; choose from {sorted(BACKENDS)}")
    module, cls = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module), cls)
