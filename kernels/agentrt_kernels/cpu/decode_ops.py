"""Fused small ops of the forward pass (``decode_ops.cpp``), each with its torch twin.

A decode step of a small model is hundreds of tiny torch ops; their dispatch, not their
arithmetic, is what costs. These replace the commonest: RMSNorm (six torch ops; seven with
the residual add before it), rotary embedding (five, applied in place here), SwiGLU's
``silu(gate) * up`` (three) and single-token attention over the paged KV cache (a gather of
every K and V slot plus SDPA, per layer). Each call falls back to the torch
reference when the kernel cannot run (no compiler or AVX2, another dtype, another layout).
"""

from __future__ import annotations

import ctypes
import functools

import torch

from agentrt.models.ops import add_rms_norm as ref_add_rms_norm
from agentrt.models.ops import apply_rope as ref_apply_rope
from agentrt.models.ops import rms_norm as ref_rms_norm
from agentrt.models.ops import silu_mul as ref_silu_mul
from agentrt_kernels.cpu.build import KernelUnavailable, load_library

__all__ = ["add_rms_norm_", "apply_rope_", "decode_attention", "kernels_available",
           "ref_add_rms_norm", "ref_apply_rope", "ref_rms_norm", "ref_silu_mul", "rms_norm",
           "silu_mul"]


def kernels_available() -> bool:
    return _lib() is not None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """:func:`ref_rms_norm` of the rows of a float32 (T, dim) ``x`` in one call."""
    lib = _lib()
    if lib is None or x.dtype != torch.float32 or x.dim() != 2 or x.shape[1] % 8:
        return ref_rms_norm(x, weight, eps)
    x = x.contiguous()
    out = torch.empty_like(x)
    lib.agentrt_rms_norm(x.data_ptr(), weight.data_ptr(), out.data_ptr(), x.shape[0],
                         x.shape[1], ctypes.c_float(eps))
    return out


def add_rms_norm_(x: torch.Tensor, a: torch.Tensor, weight: torch.Tensor,
                  eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`ref_add_rms_norm` with the sum written into ``x`` itself where the kernel runs
    (``x`` a contiguous float32 (T, dim) tensor the caller owns, e.g. the residual stream)."""
    lib = _lib()
    if (lib is None or x.dtype != torch.float32 or a.dtype != torch.float32 or x.dim() != 2
            or x.shape[1] % 8 or not x.is_contiguous()):
        return ref_add_rms_norm(x, a, weight, eps)
    a = a.contiguous()
    out = torch.empty_like(x)
    lib.agentrt_add_rms_norm(x.data_ptr(), a.data_ptr(), weight.data_ptr(), out.data_ptr(),
                             x.shape[0], x.shape[1], ctypes.c_float(eps))
    return x, out


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """:func:`ref_silu_mul` of a float32 (T, 2 * inter) fused gate/up output in one call
    (equal to the reference within a few float32 ulps: another ``exp``)."""
    lib = _lib()
    if (lib is None or gate_up.dtype != torch.float32 or gate_up.dim() != 2
            or gate_up.shape[1] % 16 or not gate_up.is_contiguous()):
        return ref_silu_mul(gate_up)
    t, width = gate_up.shape
    out = torch.empty(t, width // 2, dtype=torch.float32)
    lib.agentrt_silu_mul(gate_up.data_ptr(), out.data_ptr(), t, width // 2)
    return out


def apply_rope_(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """:func:`ref_apply_rope`, written into ``x`` itself where the kernel runs (``x`` a (T, H, D)
    float32 view whose heads are contiguous, e.g. a slice of the fused QKV output)."""
    lib = _lib()
    t, heads, d = x.shape
    if (lib is None or x.dtype != torch.float32 or d % 16 or x.stride(2) != 1
            or x.stride(1) != d or not cos.is_contiguous() or not sin.is_contiguous()):
        return ref_apply_rope(x, cos, sin)
    lib.agentrt_rope(x.data_ptr(), x.stride(0), t, heads, d, cos.data_ptr(), sin.data_ptr())
    return x


def decode_attention(q: torch.Tensor, k_slots: torch.Tensor, v_slots: torch.Tensor,
                     slots: torch.Tensor, lens: torch.Tensor, rows: torch.Tensor,
                     max_len: int, scale: float, out: torch.Tensor) -> bool:
    """Attention of the single-token query rows ``rows`` of ``q`` (T, H, D) over their KV
    slots (``slots``: (B * max_len,) int64, the first ``lens[b]`` of row b valid), written to
    the same rows of ``out``. False (nothing written) where the kernel cannot run (head_dim
    above 256, more than 8 query heads per kv head, another dtype or layout)."""
    lib = _lib()
    if (lib is None or q.dtype != torch.float32 or k_slots.dtype != torch.float32
            or q.shape[-1] % 8 or not (q.stride(2) == 1 and q.stride(1) == q.shape[2])
            or not (k_slots.is_contiguous() and v_slots.is_contiguous() and out.is_contiguous())):
        return False
    t, heads, d = q.shape
    return 0 == lib.agentrt_decode_attention(
        q.data_ptr(), q.stride(0), k_slots.data_ptr(), v_slots.data_ptr(), slots.data_ptr(),
        lens.data_ptr(), rows.data_ptr(), rows.numel(), max_len, heads, k_slots.shape[1], d,
        ctypes.c_float(scale), out.data_ptr(), torch.get_num_threads())


@functools.cache
def _lib() -> ctypes.CDLL | None:
    try:
        lib = load_library("decode_ops")
    except KernelUnavailable:
        return None
    p, i64, f32, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_int32
    lib.agentrt_rms_norm.argtypes = [p, p, p, i64, i64, f32]
    lib.agentrt_add_rms_norm.argtypes = [p, p, p, p, i64, i64, f32]
    lib.agentrt_silu_mul.argtypes = [p, p, i64, i64]
    lib.agentrt_rope.argtypes = [p, i64, i64, i64, i64, p, p]
    lib.agentrt_decode_attention.argtypes = [p, i64, p, p, p, p, p, i64, i64, i64, i64, i64,
                                             f32, p, i32]
    for fn in (lib.agentrt_rms_norm, lib.agentrt_add_rms_norm, lib.agentrt_silu_mul,
               lib.agentrt_rope):
        fn.restype = None
    lib.agentrt_decode_attention.restype = ctypes.c_int
    return lib
