"""Sixteen weight rows interleaved: the in-memory order of Q4_K / Q6_K layers on the integer path.

On a CPU with AVX-512 VNNI, the integer kernels (``gguf_int8.cpp``, ``X16``) take a Q4_K or
Q6_K weight whose rows are interleaved 16 at a time: per group of 16 rows and super-block, the
rows' scales lie side by side as planes, and each 64-byte vector holds 4 quant bytes of every
row, so one ``dpbusd`` adds 4 products to 16 output rows at once. The interleaved bytes are a
permutation of the file's, nothing more (same size, same values): :func:`interleave_` applies
it in place, :func:`file_order` and :func:`file_rows` undo it for the torch reference and for an
embedding lookup in a tied head's table.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

__all__ = ["FORMATS", "GROUP", "file_order", "file_rows", "interleave_", "runs_interleaved"]

_T = GGMLQuantizationType
GROUP = 16
"""Weight rows interleaved together."""
FORMATS: frozenset[GGMLQuantizationType] = frozenset({_T.Q4_K, _T.Q6_K})
"""The formats with an interleaved kernel."""
_CHUNK_BYTES = 16 << 20  # bytes permuted per step: the temporary copy stays this small


def runs_interleaved(qtype: GGMLQuantizationType, out_features: int) -> bool:
    """Whether a ``qtype`` weight of ``out_features`` rows has an interleaved form."""
    return qtype in FORMATS and out_features % GROUP == 0


def _vectors(count: int, row_offset: int, rows: np.ndarray) -> np.ndarray:
    """``count`` 64-byte vectors, vector v holding bytes ``row_offset + 4 v .. + 3`` of each
    of the 16 rows: (count * 64,) (row, byte in block) pairs flattened as row * 1000 + byte."""
    v = np.arange(count)[:, None, None]
    t = np.arange(4)[None, None, :]
    return (rows[None, :, None] * 1000 + row_offset + 4 * v + t).reshape(-1)


@cache
def _block_order(qtype: GGMLQuantizationType) -> np.ndarray:
    """Interleaved position -> (row, byte of the row's block), as row * 1000 + byte, for one
    super-block of 16 rows (see ``X16`` in gguf_int8.cpp)."""
    rows = np.arange(GROUP)
    planes = lambda first, count: (rows[None, :] * 1000 + first  # noqa: E731
                                   + np.arange(count)[:, None]).reshape(-1)
    halves = lambda at: (rows[:, None] * 1000 + at + np.arange(2)[None, :]).reshape(-1)  # noqa: E731
    if qtype == _T.Q4_K:  # d, dmin, 12 scale bytes, 128 quant bytes
        parts = [halves(0), halves(2), planes(4, 12), _vectors(32, 16, rows)]
    else:  # Q6_K: 128 ql, 64 qh, 16 scales, d
        parts = [halves(208), planes(192, 16), _vectors(32, 0, rows), _vectors(16, 128, rows)]
    order = np.concatenate(parts)
    assert len(order) == GROUP * GGML_QUANT_SIZES[qtype][1] and len(set(order)) == len(order)
    return order


@cache
def _order(qtype: GGMLQuantizationType, row_bytes: int) -> np.ndarray:
    """Interleaved byte i of a 16-row group = byte ``_order[i]`` of the group in file order."""
    size = GGML_QUANT_SIZES[qtype][1]
    one = _block_order(qtype)
    row, byte = one // 1000, one % 1000
    blocks = np.arange(row_bytes // size)[:, None]
    order = (row[None, :] * row_bytes + blocks * size + byte[None, :]).reshape(-1)
    order.setflags(write=False)
    return order


@cache
def _inverse(qtype: GGMLQuantizationType, row_bytes: int) -> np.ndarray:
    inverse = np.argsort(_order(qtype, row_bytes))
    inverse.setflags(write=False)
    return inverse


def _permute_(rows: torch.Tensor, order: np.ndarray) -> None:
    groups = rows.numpy().reshape(-1, order.size)
    step = max(1, _CHUNK_BYTES // order.size)
    for first in range(0, len(groups), step):
        groups[first:first + step] = groups[first:first + step][:, order]


def interleave_(rows: torch.Tensor, qtype: GGMLQuantizationType) -> None:
    """Interleave the (N, row_bytes) uint8 ``rows`` of a ``qtype`` weight in place (N a
    multiple of 16; see :func:`runs_interleaved`). Mutates ``rows``: they no longer read as
    the file's bytes."""
    _check(rows, qtype)
    _permute_(rows, _order(qtype, rows.shape[1]))


def file_order(rows: torch.Tensor, qtype: GGMLQuantizationType) -> torch.Tensor:
    """The file's bytes of interleaved ``rows``: a new (N, row_bytes) tensor."""
    _check(rows, qtype)
    out = rows.clone()
    _permute_(out, _inverse(qtype, rows.shape[1]))
    return out


def file_rows(rows: torch.Tensor, qtype: GGMLQuantizationType, index: torch.Tensor) -> torch.Tensor:
    """The file's bytes of rows ``index`` (1-D int64) of interleaved ``rows``:
    (len(index), row_bytes), gathered without undoing the rest."""
    _check(rows, qtype)
    width = rows.shape[1]
    inverse = _inverse(qtype, width).reshape(GROUP, width)
    at = index.numpy()
    flat = rows.numpy().reshape(-1)
    picked = flat[(at // GROUP * GROUP * width)[:, None] + inverse[at % GROUP]]
    return torch.from_numpy(picked)


def _check(rows: torch.Tensor, qtype: GGMLQuantizationType) -> None:
    if rows.dtype != torch.uint8 or rows.dim() != 2 or not rows.is_contiguous():
        raise ValueError("interleaving needs contiguous (N, row_bytes) uint8 rows")
    if not runs_interleaved(qtype, rows.shape[0]):
        raise ValueError(f"{getattr(qtype, 'name', qtype)} x {rows.shape[0]} rows has no "
                         f"interleaved form (formats {sorted(t.name for t in FORMATS)}, rows a "
                         f"multiple of {GROUP})")
