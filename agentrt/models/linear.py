"""The linear layers of the forward pass, chosen by name: float weights or quantized ones.

``quantization`` (EngineConfig) is "auto", "gguf" or a name in :data:`LINEARS`;
:func:`resolve_quantization` turns "auto" into "gguf" (a GGUF file runs in its own block
formats, :mod:`agentrt.models.gguf_weights`) or "none". The rest build a layer from float weights:
``none`` keeps the weights in the model's dtype (:class:`SmallBatchLinear`); ``int8`` and
``int4`` store them in GGUF's Q8_0 / Q4_1 group forms and run decode through agentrt's CPU
kernels (``agentrt_kernels.cpu``: 1.125 / 0.75 bytes per weight instead of 4 — decode on a CPU
is bound by reading them). With ``int4`` the output head stays 8-bit (:data:`HEAD`): the
default model ships its embeddings (tied to the head) as Q8_0. Implementations are imported
only when chosen.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F

from agentrt.core.registry import Registry

__all__ = ["HEAD", "LINEARS", "Linear", "SmallBatchLinear", "check_quantization",
           "get_linear", "resolve_quantization"]

LINEARS: Registry[type] = Registry("quantization", {
    "none": "agentrt.models.linear:SmallBatchLinear",
    "int8": "agentrt_kernels.cpu.quant_linear:Q8Linear",
    "int4": "agentrt_kernels.cpu.quant_linear:Q4Linear",
})
"""Layer classes built from float weights: each as ``cls(weight, bias)``, called on (T, in)
rows."""
HEAD: dict[str, str] = {"int4": "int8"}
"""The output head's format where it differs from the layers'."""
_FLOAT32_ONLY = frozenset({"int8", "int4"})


FILE_FORMATS = ("auto", "gguf")
"""The ``quantization`` values that are not layer classes: "auto" and "gguf" (a GGUF file's
own block formats)."""


def check_quantization(name: str) -> None:
    """Raise ``ValueError`` unless ``name`` is "auto", "gguf" or registered in :data:`LINEARS`."""
    LINEARS.check(name, also=FILE_FORMATS)


def resolve_quantization(name: str, gguf_file: bool, device: str | torch.device = "cpu",
                         dtype: str | torch.dtype = "float32") -> str:
    """``name`` as a model of this kind loads: "auto" is "gguf" for a GGUF file computed in
    float32 on the CPU (agentrt's kernels run its blocks), else "none" (float weights);
    "gguf" for anything but a GGUF file raises ``ValueError``."""
    check_quantization(name)
    if name == "auto":
        float32 = dtype in ("float32", torch.float32)
        native = gguf_file and torch.device(device).type == "cpu" and float32
        return "gguf" if native else "none"
    if name == "gguf" and not gguf_file:
        raise ValueError("quantization='gguf' keeps a GGUF file's own block formats, and this "
                         "model is a folder of float weights: use 'auto', 'none', 'int8' or "
                         "'int4'")
    return name


class Linear(Protocol):
    def __call__(self, h: torch.Tensor) -> torch.Tensor: ...


def get_linear(name: str, dtype: torch.dtype = torch.float32) -> type:
    """The linear-layer class registered as ``name`` (``quantization`` in EngineConfig)."""
    LINEARS.check(name)
    if name in _FLOAT32_ONLY and dtype != torch.float32:
        raise ValueError(f"quantization={name!r} computes in float32; use dtype='float32'")
    return LINEARS.get(name)


class SmallBatchLinear:
    """``h @ weight.T`` with a oneDNN-prepacked copy of ``weight`` for decode-sized batches.

    NOTE: for 2..32 rows, CPU GEMM on a plain weight re-packs the whole weight on every call,
    which makes a batch-8 step stream the weights about twice; a weight packed once at load
    time (``torch.ops.mkldnn._reorder_linear_weight``) avoids that. One row (a GEMV) and
    prefill-sized inputs use ``F.linear`` on the plain weight. Falls back to ``F.linear`` when
    oneDNN is unavailable.
    """

    MIN_ROWS, MAX_ROWS = 2, 32

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        self.weight, self.bias = weight, bias
        on_cpu = weight.dtype == torch.float32 and weight.device.type == "cpu"
        self.packed = _pack(weight) if on_cpu else None

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        if self.packed is not None and self.MIN_ROWS <= h.shape[0] <= self.MAX_ROWS:
            return torch.ops.mkldnn._linear_pointwise(h, self.packed, self.bias, "none", [], "")
        return F.linear(h, self.weight, self.bias)


def _pack(weight: torch.Tensor) -> torch.Tensor | None:
    try:
        if not torch.backends.mkldnn.is_available():
            return None
        return torch.ops.mkldnn._reorder_linear_weight(weight, 8)
    except (RuntimeError, AttributeError):
        return None
