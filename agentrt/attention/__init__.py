"""Attention backends behind one interface, chosen by name through a lazy registry.

``get_attention_backend(name)`` gives the class; the engine builds one per model. (A *backend*
without qualifier, :func:`agentrt.get_backend`, is where an agent run's tokens come from.)
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from agentrt.attention.base import AttentionBackend, AttentionMetadata, KVCacheTensors
from agentrt.core.registry import Registry

if TYPE_CHECKING:
    from agentrt.config import EngineConfig

__all__ = ["BACKENDS", "AttentionBackend", "AttentionMetadata", "KVCacheTensors",
           "attention_backend_for", "get_attention_backend"]

# NOTE: imported only when chosen, so a CPU install never imports GPU code. The *_cascade
# variants attend to a prefix shared by several requests once per group; "cpu" is "torch"
# with single-token queries attended by agentrt's C++ kernel.
BACKENDS: Registry[type[AttentionBackend]] = Registry("attention backend", {
    "torch": "agentrt.attention.torch_ref:TorchRefBackend",
    "torch_cascade": "agentrt.attention.torch_cascade:TorchCascadeBackend",
    "cpu": "agentrt_kernels.cpu.attention:CpuDecodeBackend",
    "flashinfer": "agentrt_kernels.flashinfer_backend:FlashInferBackend",
    "flashinfer_cascade": "agentrt_kernels.flashinfer_backend:FlashInferCascadeBackend",
})
"""Attention backend name → ``"module:class"`` (see :class:`~agentrt.core.registry.Registry`)."""


def get_attention_backend(name: str) -> type[AttentionBackend]:
    """The attention backend class registered as ``name`` (a ``ValueError`` lists the names)."""
    return BACKENDS.get(name)


def attention_backend_for(config: EngineConfig) -> type[AttentionBackend]:
    """The attention backend class an engine built from ``config`` runs: its
    ``resolved_attention_backend``, probed now, at engine start. When "auto" on a CUDA GPU
    runs the torch backend because FlashInfer's kernels cannot run (FlashInfer missing, or no
    ``nvcc`` nor prebuilt kernels to build or load them), one ``RuntimeWarning`` says why and
    how to get them."""
    reason = config.auto_attention_fallback
    if reason is not None:
        warnings.warn(f"attention_backend='auto' runs the torch backend on "
                      f"{config.resolved_device}: {reason}", RuntimeWarning, stacklevel=2)
    return get_attention_backend(config.resolved_attention_backend)
