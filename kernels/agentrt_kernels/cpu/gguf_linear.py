"""Linear layers on a GGUF tensor's own blocks, with their torch reference.

A GGUF file stores each weight row as blocks of its quantization type (Q4_K, Q6_K, Q8_0...).
:class:`GGUFLinear` keeps those bytes exactly as the file has them -- resident memory is the
file's, no float copy -- and multiplies activations into them in C++ (``gguf_linear.cpp``):

- decode-sized batches (up to :data:`MAX_KERNEL_ROWS` rows) dequantize one weight row at a time
  into a cache-resident float buffer, with ggml's own float32 operations, and take its dot
  product with every activation row (AVX-512 where the CPU has it, else AVX2);
- prefill-sized batches dequantize :data:`TILE_BYTES` of weight rows at a time in C++ and run
  one float32 GEMM per tile, never the whole matrix at once.

Either way the result equals :func:`ref_gguf_linear` -- ``h @ W.T`` with ``W`` from
``gguf.quants.dequantize``, the gguf package's reference -- up to float32 summation order.

``activations="int8"`` is the other numeric path, llama.cpp's (``gguf_int8.cpp``): batches of
any size quantize the activations to 8 bits per 32 values (ggml's Q8_0 against Q4_0/Q5_0/Q8_0,
Q8_1 -- the same plus an f16 ``d * sum(q)`` -- against Q4_1/Q5_1, as its x86 code makes them)
or per 256 (ggml's Q8_K, against the k-quants) and take integer dot products with the blocks
(AVX-512 VNNI where the CPU has it, else AVX2), prefill included, as llama.cpp does; its twin
is ``ref_gguf_linear(..., activations="int8")``: ``q8(h) @ W.T`` (Q4_1/Q5_1: their minimums
times Q8_1's ``s``). Float formats (F32, F16, BF16) always run float32. On SmolLM2's Q4_1
file (``benchmarks/quant_quality.py``: 8 chat prompts, 48 greedy tokens) this path
reproduced 2 of llama.cpp's 8 outputs, as the float32 path does, and 149 of 282 tokens
before the first difference (float32: 132): neither matches it everywhere (llama.cpp keeps
an f16 KV cache, for one). ``EngineConfig.gguf_activations`` picks the path of an engine.
:func:`dequantize_rows` gives float rows for an embedding lookup. Without a compiler or AVX2
the layer runs the reference.
"""

from __future__ import annotations

import ctypes
from typing import Any, Literal, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize as gguf_dequantize

from agentrt_kernels.cpu.build import KernelUnavailable, load_library

__all__ = ["INT8_FORMATS", "MAX_KERNEL_ROWS", "SUPPORTED", "TILE_BYTES", "Activations",
           "GGUFLinear", "bytes_per_row", "dequantize", "dequantize_rows", "ref_gguf_linear",
           "ref_int8_activations"]

_T = GGMLQuantizationType
SUPPORTED: frozenset[GGMLQuantizationType] = frozenset({
    _T.F32, _T.F16, _T.BF16, _T.Q4_0, _T.Q4_1, _T.Q5_0, _T.Q5_1, _T.Q8_0, _T.Q4_K, _T.Q5_K,
    _T.Q6_K})
"""The block formats the kernels run (others -- IQ*, Q2_K, Q3_K, TQ* -- raise ValueError)."""
INT8_FORMATS: frozenset[GGMLQuantizationType] = SUPPORTED - {_T.F32, _T.F16, _T.BF16}
"""The formats ``activations="int8"`` applies to (the others run float32)."""
_K_QUANTS = frozenset({_T.Q4_K, _T.Q5_K, _T.Q6_K})
_Q8_1_FORMATS = frozenset({_T.Q4_1, _T.Q5_1})  # ggml runs them against Q8_1 blocks
Activations = Literal["float32", "int8"]
MAX_KERNEL_ROWS = 32
"""Float32 batches up to this many rows run the kernel; larger ones a GEMM per dequantized
tile (the int8 path runs its kernel at any size)."""
TILE_BYTES = 8 << 20
"""Float32 bytes of weight rows one prefill tile dequantizes at a time."""
SERIAL_FLOATS = 1 << 16
"""Dequantizing fewer floats than this (a decode step's embedding rows) runs on one thread."""


def _check(qtype: GGMLQuantizationType, shape: tuple[int, int]) -> None:
    if qtype not in SUPPORTED:
        name = getattr(qtype, "name", str(qtype))
        names = ", ".join(sorted(t.name for t in SUPPORTED))
        raise ValueError(f"GGUF tensor type {name} is not supported by agentrt's kernels "
                         f"(supported: {names})")
    out_features, in_features = shape
    block = GGML_QUANT_SIZES[qtype][0]
    if out_features <= 0 or in_features <= 0 or in_features % block:
        raise ValueError(f"shape {tuple(shape)}: a {qtype.name} weight needs positive sizes "
                         f"and in_features a multiple of its block of {block}")


def bytes_per_row(qtype: GGMLQuantizationType, in_features: int) -> int:
    """Bytes one weight row of ``in_features`` values takes in ``qtype``'s blocks."""
    _check(qtype, (1, in_features))
    block, size = GGML_QUANT_SIZES[qtype]
    return in_features // block * size


def _rows_of(raw: torch.Tensor, qtype: GGMLQuantizationType,
             shape: tuple[int, int]) -> torch.Tensor:
    """``raw`` checked and viewed as (out_features, bytes_per_row) contiguous uint8."""
    _check(qtype, shape)
    if raw.dtype != torch.uint8:
        raise ValueError(f"raw GGUF bytes must be a uint8 tensor, got {raw.dtype}")
    width = bytes_per_row(qtype, shape[1])
    if raw.numel() != shape[0] * width:
        raise ValueError(f"{raw.numel()} bytes do not hold a {qtype.name} weight of shape "
                         f"{tuple(shape)} ({shape[0]} rows x {width} bytes)")
    return raw.contiguous().reshape(shape[0], width)


def _ref_dequantize(raw: torch.Tensor, qtype: GGMLQuantizationType,
                    shape: tuple[int, int]) -> torch.Tensor:
    rows = _rows_of(raw, qtype, shape).numpy()
    return torch.from_numpy(np.ascontiguousarray(gguf_dequantize(rows, qtype))).reshape(shape)


def ref_gguf_linear(raw: torch.Tensor, qtype: GGMLQuantizationType, shape: tuple[int, int],
                    h: torch.Tensor, bias: torch.Tensor | None = None, *,
                    activations: Activations = "float32") -> torch.Tensor:
    """Torch reference: ``h @ W.T + bias``, ``W`` dequantized by ``gguf.quants.dequantize``;
    with ``activations="int8"`` (a format of :data:`INT8_FORMATS`), ``h`` is first quantized
    and dequantized as ggml's Q8_0 / Q8_K would (:func:`ref_int8_activations`), and a Q4_1 /
    Q5_1 block's minimum meets the f16 ``s = d * sum(q)`` of ggml's Q8_1 block."""
    if activations == "int8" and qtype in _Q8_1_FORMATS:
        return _ref_q8_1_linear(raw, qtype, shape, h, bias)
    if activations == "int8" and qtype in INT8_FORMATS:
        h = ref_int8_activations(h, qtype)
    return F.linear(h, _ref_dequantize(raw, qtype, shape).to(h.dtype), bias)


def ref_int8_activations(h: torch.Tensor, qtype: GGMLQuantizationType) -> torch.Tensor:
    """``h`` as the integer path sees it: ``q * d`` per value, ggml's Q8_K blocks of 256 for a
    k-quant weight (``d = xm / -127``, ``xm`` the value of largest magnitude), else Q8_0 / Q8_1
    blocks of 32 as its x86 code makes them (``d = max|x| / 127``, kept as f16; ``q = x * (127
    / max|x|)``); ``q`` rounded half to even."""
    q, d, _ = _q8(h, 256 if qtype in _K_QUANTS else 32)
    return (q * d).reshape(h.shape)


def _q8(h: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ggml's 8-bit blocks of ``size`` values of ``h``: ``q`` (..., blocks, size), ``d`` and
    Q8_1's ``s`` (..., blocks, 1)."""
    x = h.to(torch.float32).reshape(*h.shape[:-1], -1, size)
    one = torch.ones(())  # NOTE: `c / t` in torch is c * (1 / t): two roundings, not ggml's one
    if size == 32:
        peak = x.abs().amax(-1, keepdim=True)
        scale = peak / 127
        q = torch.round(x * torch.where(peak != 0, 127 * one / peak, 0.0)).clamp(-127, 127)
        return q, scale.half().float(), (scale * q.sum(-1, keepdim=True)).half().float()
    peak = x.gather(-1, x.abs().argmax(-1, keepdim=True))
    inverse = torch.where(peak != 0, -127 * one / peak, 0.0)
    q = torch.round(inverse * x).clamp(-127, 127)
    return q, torch.where(peak != 0, one / inverse, 0.0), torch.zeros_like(peak)


def _ref_q8_1_linear(raw: torch.Tensor, qtype: GGMLQuantizationType, shape: tuple[int, int],
                     h: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """Q4_1 / Q5_1 on the integer path: ``d_w * q_w`` meets ``q * d`` and each block's minimum
    meets Q8_1's f16 ``s``, as ggml's ``vec_dot_q4_1_q8_1`` sums them."""
    q, d, s = _q8(h, 32)
    block_bytes = GGML_QUANT_SIZES[qtype][1]
    rows = _rows_of(raw, qtype, shape).numpy().reshape(shape[0], -1, block_bytes)
    mins = torch.from_numpy(np.ascontiguousarray(rows[:, :, 2:4]).view(np.float16)[..., 0]
                            .astype(np.float32))  # (out_features, blocks)
    scaled = _ref_dequantize(raw, qtype, shape) - mins.repeat_interleave(32, dim=1)
    x = (q * d).reshape(*h.shape[:-1], -1)
    return F.linear(x, scaled, bias) + s.reshape(*h.shape[:-1], -1) @ mins.T


def dequantize(raw: torch.Tensor, qtype: GGMLQuantizationType,
               shape: tuple[int, int]) -> torch.Tensor:
    """The float32 (out_features, in_features) weight the GGUF bytes stand for (in C++)."""
    return _dequantize(_rows_of(raw, qtype, shape), qtype, shape, None, 0, shape[0])


def dequantize_rows(raw: torch.Tensor, qtype: GGMLQuantizationType, shape: tuple[int, int],
                    rows: torch.Tensor) -> torch.Tensor:
    """Float32 rows ``rows`` (any shape of indices) of the weight: an embedding lookup.

    Returns:
        ``(*rows.shape, in_features)`` float32.
    """
    weight = _rows_of(raw, qtype, shape)
    index = rows.reshape(-1).to(torch.int64).contiguous()
    if index.numel() and (int(index.min()) < 0 or int(index.max()) >= shape[0]):
        raise IndexError(f"row indices must lie in [0, {shape[0]}), got "
                         f"[{int(index.min())}, {int(index.max())}]")
    out = _dequantize(weight, qtype, shape, index, 0, index.numel())
    return out.reshape(*rows.shape, shape[1])


def _dequantize(weight: torch.Tensor, qtype: GGMLQuantizationType, shape: tuple[int, int],
                index: torch.Tensor | None, first: int, count: int,
                isa: int | None = None) -> torch.Tensor:
    """Float rows ``index`` (or ``first .. first + count``) of (N, bytes) ``weight``, by the
    kernel at vector width ``isa`` (default: the widest this CPU runs)."""
    kernel = _kernel()
    rows = index if index is not None else torch.arange(first, first + count)
    if kernel is None:
        picked = weight[rows].numpy()
        return torch.from_numpy(np.ascontiguousarray(gguf_dequantize(picked, qtype)))
    out = torch.empty(count, shape[1], dtype=torch.float32)
    # a few rows (a decode step's embeddings) on this thread alone: waking the OpenMP team
    # costs more than the rows, and would set its threads spinning beside a smaller decode team
    threads = 1 if count * shape[1] < SERIAL_FLOATS else torch.get_num_threads()
    kernel.dequantize(int(qtype), weight.data_ptr(), shape[1],
                      None if index is None else index.data_ptr(), first, count,
                      out.data_ptr(), threads, isa or kernel.best_isa)
    return out


class GGUFLinear:
    """``h @ W.T (+ bias)`` with ``W`` kept in the GGUF file's own blocks (see the module docs).

    Args:
        raw: the tensor's bytes exactly as stored in the file (uint8, 1-D or
            ``(out_features, bytes_per_row)``); kept by reference, not copied when contiguous.
        qtype: its GGML type; one of :data:`SUPPORTED`, else ``ValueError``.
        shape: ``(out_features, in_features)``.
        bias: optional ``(out_features,)``, added in float32.
        activations: ``"float32"`` (exact weights) or ``"int8"`` (llama.cpp's integer dot
            products on 8-bit activations, for the formats of :data:`INT8_FORMATS`).
    """

    def __init__(self, raw: torch.Tensor, qtype: GGMLQuantizationType, shape: tuple[int, int],
                 bias: torch.Tensor | None = None, *,
                 activations: Activations = "float32") -> None:
        if activations not in ("float32", "int8"):
            raise ValueError(f"activations={activations!r}: expected 'float32' or 'int8'")
        self.activations: Activations = activations
        self.qtype = GGMLQuantizationType(qtype)
        self.out_features, self.in_features = int(shape[0]), int(shape[1])
        self.raw = _rows_of(raw, self.qtype, (self.out_features, self.in_features))
        self.bias = None if bias is None else bias.detach().to(torch.float32).contiguous()
        self._kernel = _kernel()
        self._is_int8 = activations == "int8" and self.qtype in INT8_FORMATS
        self._int8 = _int8_kernel() if self._is_int8 else None
        self._isa = self._best_isa()
        self._type = int(self.qtype)
        self._pointer = self.raw.data_ptr()  # NOTE: taken once: ~120 calls a decode step

    @property
    def shape(self) -> tuple[int, int]:
        """``(out_features, in_features)``."""
        return self.out_features, self.in_features

    def c_entry(self) -> tuple[int, int, int] | None:
        """The C kernel a call runs, for callers that call it from C++ (a whole decode step,
        ``decode_step.py``): ``(function address, kind, bytes per weight row)``, kind 0 being
        ``agentrt_gguf_linear`` (the float path) and 1 ``agentrt_gguf_int8_linear``; None where
        the torch twin runs instead. The weight is ``raw``, the type ``int(qtype)``, the vector
        width :attr:`isa`; a bias is the caller's to add."""
        if self._int8 is not None:
            return ctypes.cast(self._int8.linear, ctypes.c_void_p).value, 1, self.raw.shape[1]
        if self._is_int8 or self._kernel is None:
            return None
        return ctypes.cast(self._kernel.linear, ctypes.c_void_p).value, 0, self.raw.shape[1]

    @property
    def nbytes(self) -> int:
        """Bytes of weight one call streams (the file's bytes for this tensor)."""
        return self.raw.numel()

    @property
    def isa(self) -> int:
        """Vector width the kernel runs at: 512 (AVX-512), 256 (AVX2), 0 (the torch reference).
        Settable to a narrower width this CPU also runs (the tests compare both forms)."""
        return self._isa

    @isa.setter
    def isa(self, width: int) -> None:
        best = self._best_isa()
        runs = [w for w in (256, 512) if w <= best]
        if width not in runs:
            raise ValueError(f"isa={width}: on this machine the kernel runs at {runs or 'none'}")
        self._isa = width

    def _best_isa(self) -> int:
        if self._kernel is None:
            return 0
        return min(self._kernel.best_isa, self._int8.best_isa if self._int8 else 512)

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        """``(T, in_features)`` float32 rows -> ``(T, out_features)`` float32."""
        if h.dim() != 2 or h.shape[1] != self.in_features:
            raise ValueError(f"expected (T, {self.in_features}) activations, got "
                             f"{tuple(h.shape)}")
        missing = self._kernel is None or (self._int8 is None and self._is_int8)
        if missing or h.dtype != torch.float32:
            return ref_gguf_linear(self.raw, self.qtype, self.shape, h, self.bias,
                                   activations=self.activations)
        if h.shape[0] > MAX_KERNEL_ROWS and self._int8 is None:
            return self._tiled(h)
        h = h.contiguous()
        out = torch.empty(h.shape[0], self.out_features, dtype=torch.float32)
        if self._int8 is not None:
            self._int8.linear(self._type, self._pointer, self.raw.shape[1], h.data_ptr(),
                              h.shape[0], self.in_features, self.out_features, out.data_ptr(),
                              torch.get_num_threads(), self._isa)
        else:
            self._kernel.linear(self._type, self._pointer, h.data_ptr(), h.shape[0],
                                self.in_features, self.out_features, out.data_ptr(),
                                torch.get_num_threads(), self._isa)
        if self.bias is not None:
            out += self.bias
        return out

    def _tiled(self, h: torch.Tensor) -> torch.Tensor:
        """Prefill: a GEMM per tile of dequantized weight rows."""
        out = torch.empty(h.shape[0], self.out_features, dtype=torch.float32)
        step = max(1, TILE_BYTES // (4 * self.in_features))
        for first in range(0, self.out_features, step):
            count = min(step, self.out_features - first)
            tile = _dequantize(self.raw, self.qtype, self.shape, None, first, count, self._isa)
            bias = None if self.bias is None else self.bias[first:first + count]
            out[:, first:first + count] = F.linear(h, tile, bias)
        return out

    def dequantized(self) -> torch.Tensor:
        """The whole float32 weight (for tests and conversions; the layer never holds it)."""
        return _dequantize(self.raw, self.qtype, self.shape, None, 0, self.out_features,
                           self._isa)


class _Kernels(NamedTuple):
    linear: Any
    dequantize: Any
    best_isa: int  # 512 with AVX-512 (F, BW, VL), else 256


_loaded: list[_Kernels | None] = []
_loaded_int8: list[Any] = []


def _kernel() -> _Kernels | None:
    """The C entry points, or None (the reference runs) where they cannot be built."""
    if not _loaded:
        _loaded.append(_open())
    return _loaded[0]


def _open() -> _Kernels | None:
    try:
        lib = load_library("gguf_linear")
    except KernelUnavailable:
        return None
    p, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32
    lib.agentrt_gguf_linear.argtypes = [i32, p, p, i64, i64, i64, p, i32, i32]
    lib.agentrt_gguf_dequantize.argtypes = [i32, p, i64, p, i64, i64, p, i32, i32]
    lib.agentrt_gguf_linear.restype = lib.agentrt_gguf_dequantize.restype = i32
    lib.agentrt_gguf_isa.restype = i32
    return _Kernels(lib.agentrt_gguf_linear, lib.agentrt_gguf_dequantize, lib.agentrt_gguf_isa())


class _Int8Kernels(NamedTuple):
    linear: Any
    activations: Any
    best_isa: int  # 512 with AVX-512 VNNI, else 256


def _int8_kernel() -> _Int8Kernels | None:
    """The integer-path entry points, or None (the int8 reference runs)."""
    if not _loaded_int8:
        _loaded_int8.append(_open_int8())
    return _loaded_int8[0]


def _open_int8() -> _Int8Kernels | None:
    try:
        lib = load_library("gguf_int8")
    except KernelUnavailable:
        return None
    p, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32
    lib.agentrt_gguf_int8_linear.argtypes = [i32, p, i64, p, i64, i64, i64, p, i32, i32]
    lib.agentrt_gguf_int8_linear.restype = i32
    lib.agentrt_gguf_int8_activations.argtypes = [i32, p, i64, i64, p]
    lib.agentrt_gguf_int8_activations.restype = None
    lib.agentrt_gguf_int8_isa.restype = i32
    return _Int8Kernels(lib.agentrt_gguf_int8_linear, lib.agentrt_gguf_int8_activations,
                        lib.agentrt_gguf_int8_isa())
