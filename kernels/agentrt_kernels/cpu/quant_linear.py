"""Weight-only quantized linear layers for CPU decode, with their torch reference.

Decode on a CPU is bound by reading the weights: float32 costs 4 bytes per weight per step.
Two group-wise forms, GGUF's own (groups of 32 weights along the input dimension):

- **8-bit** (Q8_0): ``w = d * q``, ``q`` in -127..127, one float32 ``d`` per group (1.125 B/w);
- **4-bit** (Q4_1): ``w = d * q + mn``, ``q`` in 0..15, ``d`` and ``mn`` per group (0.75 B/w).

A weight that came from a GGUF file of the same form (the default model's linear layers are
Q4_1, its embeddings Q8_0) is recovered exactly: GGUF's quantizers put each group's extreme
values at the ends of the grid, which is where :func:`quantize` puts them again.
:class:`QuantLinear` runs decode-sized batches through the C++ kernel
(``quant_linear.cpp``: AVX-512 where the CPU has it, else AVX2) and prefill-sized ones by
dequantizing (also in C++) into a float32 GEMM, where compute, not bandwidth, is the limit.
:func:`ref_quant_linear` is the torch twin the tests compare to; without a compiler or AVX2
the layer runs it.
"""

from __future__ import annotations

import ctypes
from typing import Any, Literal, NamedTuple

import torch
import torch.nn.functional as F

from agentrt_kernels.cpu.build import KernelUnavailable, load_library

__all__ = ["GROUP", "Q4Linear", "Q8Linear", "QuantLinear", "QuantWeight", "dequantize",
           "quantize", "ref_quant_linear"]

GROUP = 32
"""Weights per quantization group (along the input dimension)."""
MAX_KERNEL_ROWS = 32
"""Batches up to this many rows use the kernel; larger ones dequantize into a GEMM."""
Bits = Literal[4, 8]


class QuantWeight(NamedTuple):
    bits: int
    q: torch.Tensor  # (N, K) int8 for 8 bits; (N, K / 2) uint8, two 4-bit values a byte
    d: torch.Tensor  # (N, K / GROUP) float32 scales
    mn: torch.Tensor | None  # (N, K / GROUP) float32 minimums (4 bits)


def quantize(weight: torch.Tensor, bits: Bits) -> QuantWeight:
    """Group-wise quantization of a (N, K) weight (``K`` a multiple of :data:`GROUP`)."""
    n, k = weight.shape
    if k % GROUP:
        raise ValueError(f"in_features {k} is not a multiple of the group size {GROUP}")
    w = weight.detach().to(torch.float32).reshape(n, k // GROUP, GROUP)
    if bits == 8:
        d = w.abs().amax(-1) / 127.0
        q = torch.round(w / _nonzero(d)[..., None]).clamp(-127, 127).to(torch.int8)
        return QuantWeight(8, q.reshape(n, k).contiguous(), d.contiguous(), None)
    lo, hi = w.amin(-1), w.amax(-1)
    d = (hi - lo) / 15.0
    q = torch.round((w - lo[..., None]) / _nonzero(d)[..., None]).clamp(0, 15).to(torch.uint8)
    packed = q[..., : GROUP // 2] | (q[..., GROUP // 2 :] << 4)  # byte j: q[j], q[j + 16]
    return QuantWeight(4, packed.reshape(n, k // 2).contiguous(), d.contiguous(),
                       lo.contiguous())


def dequantize(weight: QuantWeight) -> torch.Tensor:
    """The float32 (N, K) weight a quantized one stands for."""
    n, groups = weight.d.shape
    if weight.bits == 8:
        q = weight.q.reshape(n, groups, GROUP).to(torch.float32)
        return (q * weight.d[..., None]).reshape(n, groups * GROUP)
    packed = weight.q.reshape(n, groups, GROUP // 2)
    q = torch.cat([packed & 0x0F, packed >> 4], dim=-1).to(torch.float32)
    return (q * weight.d[..., None] + weight.mn[..., None]).reshape(n, groups * GROUP)


def ref_quant_linear(h: torch.Tensor, weight: QuantWeight,
                     bias: torch.Tensor | None = None) -> torch.Tensor:
    """Torch reference: ``h @ dequantize(weight).T + bias``."""
    return F.linear(h, dequantize(weight), bias)


class QuantLinear:
    """``h @ weight.T (+ bias)`` with the weight stored quantized (see the module docs)."""

    bits: Bits = 8

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        self._weight = quantize(weight, self.bits)
        self.bias = None if bias is None else bias.to(torch.float32)
        self.out_features, self.in_features = weight.shape
        self._kernel = _kernel(self.bits)
        self._isa = self._kernel.best_isa if self._kernel else 0
        w = self._weight  # NOTE: pointers taken once: a decode step makes ~120 of these calls
        self._pointers = (w.q.data_ptr(), w.d.data_ptr(), *_minimums(w))

    @property
    def isa(self) -> int:
        """Vector width the kernel runs at: 512 (AVX-512), 256 (AVX2), 0 (the torch reference).
        Settable to a narrower width this CPU also runs (the tests compare both forms)."""
        return self._isa

    @isa.setter
    def isa(self, width: int) -> None:
        best = self._kernel.best_isa if self._kernel else 0
        runs = [w for w in (256, 512) if w <= best]
        if width not in runs:
            raise ValueError(f"isa={width}: on this machine the kernel runs at {runs or 'none'}")
        self._isa = width

    @property
    def weight(self) -> QuantWeight:
        """The quantized weight (read-only: the kernel holds pointers into it)."""
        return self._weight

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        rows = h.shape[0]
        if self._kernel is None or h.dtype != torch.float32:
            return ref_quant_linear(h, self.weight, self.bias).to(h.dtype)
        if rows > MAX_KERNEL_ROWS:
            return F.linear(h, self.dequantized(), self.bias)
        h = h.contiguous()
        out = torch.empty(rows, self.out_features, dtype=torch.float32)
        self._kernel.linear(h.data_ptr(), rows, self.in_features, *self._pointers,
                            self.out_features, out.data_ptr(), torch.get_num_threads(), self.isa)
        if self.bias is not None:
            out += self.bias
        return out

    def dequantized(self) -> torch.Tensor:
        """The float32 weight, equal to :func:`dequantize` (by the kernel when it runs)."""
        if self._kernel is None:
            return dequantize(self.weight)
        out = torch.empty(self.out_features, self.in_features, dtype=torch.float32)
        self._kernel.dequantize(self.out_features, self.in_features, *self._pointers,
                                out.data_ptr(), torch.get_num_threads())
        return out

    @property
    def nbytes(self) -> int:
        """Bytes of weight data one call reads (values, scales, minimums)."""
        w = self.weight
        return w.q.numel() + 4 * w.d.numel() * (1 if w.mn is None else 2)


class Q8Linear(QuantLinear):
    """8-bit groups (GGUF Q8_0)."""

    bits = 8


class Q4Linear(QuantLinear):
    """4-bit groups with a minimum (GGUF Q4_1)."""

    bits = 4


def _nonzero(d: torch.Tensor) -> torch.Tensor:
    return torch.where(d == 0, torch.ones_like(d), d)


def _minimums(w: QuantWeight) -> tuple[int, ...]:
    return () if w.mn is None else (w.mn.data_ptr(),)


class _Kernels(NamedTuple):
    linear: Any
    dequantize: Any
    best_isa: int  # 512 with AVX-512 (F, BW, VL), else 256


def _kernel(bits: int) -> _Kernels | None:
    """The C entry points for ``bits``, or None (the reference runs) where they cannot be
    built."""
    try:
        lib = load_library("quant_linear")
    except KernelUnavailable:
        return None
    p, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32
    scales = [p] if bits == 8 else [p, p]  # d, and mn for 4 bits
    linear = getattr(lib, f"agentrt_q{bits}_linear")
    linear.argtypes = [p, i64, i64, p, *scales, i64, p, i32, i32]
    dequant = getattr(lib, f"agentrt_q{bits}_dequantize")
    dequant.argtypes = [i64, i64, p, *scales, p, i32]
    for fn in (linear, dequant):
        fn.restype = None
    lib.agentrt_quant_isa.restype = i32
    return _Kernels(linear, dequant, lib.agentrt_quant_isa())
