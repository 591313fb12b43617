"""A whole decode step of a Llama-family model in one C++ call (``agentrt_decode_step``).

At batch 1 a step of a 30-layer model is ~300 kernel calls from Python; each costs a few
microseconds of dispatch, and together they were a fifth of the step. :class:`DecodeStep`
describes the model once — per layer its norms, its linear layers in the GGUF file's own
blocks (:class:`~agentrt_kernels.cpu.gguf_linear.GGUFLinear`, fused parts side by side) and its
KV slots — and each step then passes only the step's tensors. The C++ runs the same kernels in
the same order as the Python forward pass, so the result equals it up to float32 summation
order (the q/k norms of Qwen3 sum their squares in another order).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from agentrt_kernels.cpu.decode_ops import _lib
from agentrt_kernels.cpu.gguf_linear import GGUFLinear

__all__ = ["DecodeStep", "LayerWeights", "linear_parts"]

_p, _i64, _i32, _f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_float


class _Part(ctypes.Structure):
    _fields_ = [("fn", _p), ("kind", _i32), ("type", _i32), ("isa", _i32), ("pad", _i32),
                ("w", _p), ("row_bytes", _i64), ("N", _i64), ("bias", _p)]


class _Linear(ctypes.Structure):
    _fields_ = [("parts", ctypes.POINTER(_Part)), ("count", _i64), ("K", _i64), ("N", _i64)]


class _Layer(ctypes.Structure):
    _fields_ = [("input_norm", _p), ("post_norm", _p), ("q_norm", _p), ("k_norm", _p),
                ("qkv", _Linear), ("o", _Linear), ("gate_up", _Linear), ("down", _Linear),
                ("k_slots", _p), ("v_slots", _p)]


class _Model(ctypes.Structure):
    _fields_ = [("layers", ctypes.POINTER(_Layer)), ("final_norm", _p), ("num_layers", _i64),
                ("hidden", _i64), ("heads", _i64), ("kv_heads", _i64), ("head_dim", _i64),
                ("inter", _i64), ("eps", _f32), ("scale", _f32), ("head", _Linear)]


class _Args(ctypes.Structure):
    _fields_ = [("T", _i64), ("x", _p), ("out", _p), ("logits", _p), ("cos", _p), ("sin", _p),
                ("slot_mapping", _p), ("slots", _p), ("lens", _p), ("rows", _p),
                ("max_len", _i64), ("scratch", _p), ("num_threads", _i32),
                ("usage", _p)]


@dataclass(frozen=True)
class LayerWeights:
    """One decoder layer as :class:`DecodeStep` reads it (float32 norms, contiguous)."""

    input_norm: torch.Tensor
    post_norm: torch.Tensor
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None
    qkv: object
    o: object
    gate_up: object
    down: object
    k_slots: torch.Tensor  # (slots, kv_heads, head_dim) float32, this layer's
    v_slots: torch.Tensor


def linear_parts(layer: object) -> list[GGUFLinear] | None:
    """The GGUF kernels a linear layer runs, in output order (a fused layer whose parts differ
    in format is several); None when any part is not a :class:`GGUFLinear` on its C kernel."""
    parts = getattr(layer, "parts", None) or [layer]
    if not all(isinstance(p, GGUFLinear) and p.c_entry() is not None for p in parts):
        return None
    return list(parts)


class DecodeStep:
    """The model's decode step as one C++ call; build with :meth:`build` (None: cannot run).

    Keeps references to every tensor it points at (norms, weights, biases, KV slots).
    """

    def __init__(self, lib: ctypes.CDLL, layers: Sequence[LayerWeights],
                 final_norm: torch.Tensor, *, heads: int, kv_heads: int, head_dim: int,
                 eps: float, scale: float, head: object | None = None) -> None:
        self._lib = lib
        self._keep: list[object] = []
        descs = (_Layer * len(layers))()
        for desc, layer in zip(descs, layers, strict=True):
            desc.input_norm = self._ptr(layer.input_norm)
            desc.post_norm = self._ptr(layer.post_norm)
            desc.q_norm, desc.k_norm = self._ptr(layer.q_norm), self._ptr(layer.k_norm)
            for name in ("qkv", "o", "gate_up", "down"):
                setattr(desc, name, self._linear(getattr(layer, name)))
            desc.k_slots, desc.v_slots = self._ptr(layer.k_slots), self._ptr(layer.v_slots)
        hidden, inter = _sizes(layers)
        self.hidden = hidden
        head_desc = self._linear(head) if _head_runs(head, hidden) else _Linear(None, 0, 0, 0)
        self.vocab: int | None = head_desc.N if head_desc.count else None
        """The output head's width where the step can compute logits (:meth:`run`), else
        None (the caller runs the head)."""
        self._model = _Model(descs, self._ptr(final_norm), len(layers), hidden, heads, kv_heads,
                             head_dim, inter, eps, scale, head_desc)
        self._keep.append(descs)
        self._scratch: dict[int, torch.Tensor] = {}

    @classmethod
    def build(cls, layers: Sequence[LayerWeights], final_norm: torch.Tensor, *, heads: int,
              kv_heads: int, head_dim: int, eps: float, scale: float,
              head: object | None = None) -> DecodeStep | None:
        """The step, or None where it cannot run: no compiled kernel, a linear layer that is not
        GGUF blocks on the C kernel, a shape the kernels do not take (head_dim a multiple of 16
        up to 256, at most 8 query heads per KV head, widths multiples of 16), a weight, norm or
        KV slot array whose shape disagrees with the heads and the first layer's sizes (the C
        code would read past it), non-float32 or non-contiguous tensors. ``head``: the output
        head (hidden -> vocab), computed in the step where it is GGUF blocks on the C kernel of
        a width the kernels take (:attr:`vocab`); otherwise the caller runs it."""
        lib = _lib()
        if lib is None or not layers:
            return None
        if head_dim % 16 or head_dim > 256 or heads % kv_heads or heads // kv_heads > 8:
            return None
        for layer in layers:
            linears = [linear_parts(getattr(layer, n)) for n in ("qkv", "o", "gate_up", "down")]
            if any(parts is None for parts in linears):
                return None
            tensors = [layer.input_norm, layer.post_norm, layer.k_slots, layer.v_slots]
            tensors += [t for t in (layer.q_norm, layer.k_norm) if t is not None]
            if not all(t.dtype == torch.float32 and t.is_contiguous() for t in tensors):
                return None
            if any(p.in_features % 16 or p.out_features % 16 for ps in linears for p in ps):
                return None
        if final_norm.dtype != torch.float32 or not final_norm.is_contiguous():
            return None
        if not _shapes_agree(layers, final_norm, heads, kv_heads, head_dim):
            return None
        _declare(lib)
        return cls(lib, layers, final_norm, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                   eps=eps, scale=scale, head=head)

    def run(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
            slot_mapping: torch.Tensor, slots: torch.Tensor, lens: torch.Tensor,
            rows: torch.Tensor, max_len: int, *, logits: torch.Tensor | None = None,
            num_threads: int | None = None, usage: torch.Tensor | None = None) -> torch.Tensor:
        """The final norm's output (T, hidden) for the embedded tokens ``x`` (T, hidden), each
        the single new token of one sequence. ``x`` is overwritten (the residual stream); every
        layer's K and V of the tokens are written to ``slot_mapping``; ``slots``/``lens``/
        ``rows``/``max_len`` are the attention plan (see ``decode_attention``): int64,
        contiguous. ``cos``/``sin``: (T, head_dim) float32 rows of the tokens' positions.

        ``logits``: None, or a contiguous float32 (T, :attr:`vocab`) tensor that receives the
        output head's logits (only where :attr:`vocab` is not None).
        ``num_threads``: the step's OpenMP team (default ``torch.get_num_threads()``).
        ``usage``: None, or a contiguous float64 tensor of at least ``1 + 2 * num_threads``
        values that receives the step's wall seconds, then for each team thread its CPU
        seconds and its involuntary context switches during the step (-1: not measured).

        Raises:
            RuntimeError: a kernel refused (no output is valid).
        """
        t = x.shape[0]
        out = torch.empty(t, self.hidden, dtype=torch.float32)
        scratch = self._scratch.get(t)
        if scratch is None:
            size = self._lib.agentrt_decode_step_scratch(ctypes.byref(self._model), t)
            scratch = self._scratch[t] = torch.empty(size, dtype=torch.float32)
        threads = torch.get_num_threads() if num_threads is None else num_threads
        if threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {threads}")
        if usage is not None and (usage.dtype != torch.float64 or not usage.is_contiguous()
                                  or usage.numel() < 1 + 2 * threads):
            raise ValueError(f"usage must be a contiguous float64 tensor of at least "
                             f"{1 + 2 * threads} values")
        if logits is not None and (self.vocab is None or logits.dtype != torch.float32
                                   or not logits.is_contiguous()
                                   or tuple(logits.shape) != (t, self.vocab)):
            raise ValueError(f"logits must be a contiguous float32 ({t}, {self.vocab}) tensor "
                             f"(and the step must run the head)")
        args = _Args(t, x.data_ptr(), out.data_ptr(),
                     None if logits is None else logits.data_ptr(), cos.data_ptr(), sin.data_ptr(),
                     slot_mapping.data_ptr(), slots.data_ptr(), lens.data_ptr(), rows.data_ptr(),
                     max_len, scratch.data_ptr(), threads,
                     None if usage is None else usage.data_ptr())
        if self._lib.agentrt_decode_step(ctypes.byref(self._model), ctypes.byref(args)):
            raise RuntimeError("agentrt_decode_step: a kernel refused its input")
        return out

    def _ptr(self, t: torch.Tensor | None) -> int | None:
        if t is None:
            return None
        self._keep.append(t)
        return t.data_ptr()

    def _linear(self, layer: object) -> _Linear:
        parts = linear_parts(layer)
        descs = (_Part * len(parts))()
        for desc, part in zip(descs, parts, strict=True):
            fn, kind, row_bytes = part.c_entry()
            desc.fn, desc.kind, desc.type, desc.isa = fn, kind, int(part.qtype), part.isa
            desc.w, desc.row_bytes, desc.N = self._ptr(part.raw), row_bytes, part.out_features
            desc.bias = self._ptr(part.bias)
        self._keep.append(descs)
        return _Linear(descs, len(parts), parts[0].in_features,
                       sum(p.out_features for p in parts))


def _shapes_agree(layers: Sequence[LayerWeights], final_norm: torch.Tensor, heads: int,
                  kv_heads: int, head_dim: int) -> bool:
    """Every layer's sizes are the ones the C step computes with: the hidden size of the first
    input norm, the intermediate size of the first down projection, the heads."""
    hidden, inter = _sizes(layers)
    q, kv = heads * head_dim, kv_heads * head_dim
    want = {"qkv": (hidden, q + 2 * kv), "o": (q, hidden), "gate_up": (hidden, 2 * inter),
            "down": (inter, hidden)}
    for layer in layers:
        for name, (k, n) in want.items():
            parts = linear_parts(getattr(layer, name))
            if any(p.in_features != k for p in parts) or sum(p.out_features for p in parts) != n:
                return False
        norms = [(layer.input_norm, hidden), (layer.post_norm, hidden)]
        norms += [(t, head_dim) for t in (layer.q_norm, layer.k_norm) if t is not None]
        if any(t.numel() != n for t, n in norms):
            return False
        if any(t.dim() != 3 or tuple(t.shape[1:]) != (kv_heads, head_dim)
               for t in (layer.k_slots, layer.v_slots)):
            return False
    return final_norm.numel() == hidden


def _sizes(layers: Sequence[LayerWeights]) -> tuple[int, int]:
    """(hidden, intermediate) as the C step reads them: the first layer's input norm and down
    projection."""
    return layers[0].input_norm.numel(), linear_parts(layers[0].down)[0].in_features


def _head_runs(head: object | None, hidden: int) -> bool:
    """The step can run ``head``: GGUF blocks on the C kernel, hidden in, widths the kernels
    take."""
    parts = None if head is None else linear_parts(head)
    return parts is not None and all(p.in_features == hidden and p.out_features % 16 == 0
                                     for p in parts)


def _declare(lib: ctypes.CDLL) -> None:
    lib.agentrt_decode_step_scratch.argtypes = [ctypes.POINTER(_Model), _i64]
    lib.agentrt_decode_step_scratch.restype = _i64
    lib.agentrt_decode_step.argtypes = [ctypes.POINTER(_Model), ctypes.POINTER(_Args)]
    lib.agentrt_decode_step.restype = _i32
