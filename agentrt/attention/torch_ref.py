"""Torch reference attention over paged KV, driven by FlashInfer-style metadata.

It is the CPU backend, the reference a GPU backend is checked against, and the CUDA fallback
when FlashInfer is not installed. ``plan`` turns the page lists into slot indices once per step
(on the host; on CUDA the results are copied to the device once): decode rows (one query token)
are grouped into one padded, masked batch; each prefill chunk attends on its own with a
bottom-right causal mask.

On CUDA, SDPA runs without its cuDNN backend (``sdpa_context``): cuDNN builds an execution plan
for every new KV length, and decode brings a new length every step.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, fields, replace

import numpy as np
import torch
import torch.nn.functional as F

from agentrt.attention.base import AttentionBackend, AttentionMetadata

__all__ = ["TorchRefBackend", "ref_paged_attention", "sdpa_context", "window_mask"]


class _CudnnSdpOff(contextlib.AbstractContextManager):
    """cuDNN's SDPA switched off while any thread is inside (counted), then put back as it was.

    torch 2.11 tries cuDNN first on Hopper, and cuDNN builds an execution plan for every new
    shape: on an H200 (cuDNN 9.19) one decode-shaped call took 48 ms while the KV length grew
    by a token a call, 46 us with flash; this backend's batch-1 decode took 14.6 ms a layer,
    0.24 ms without cuDNN (benchmarks/gpu_sdpa.py, 2026-11-27). torch's SDPA switches are
    one set per process, not per thread, so this touches the cuDNN switch alone, and only
    the first thread in and the last one out do: the other switches stay as the caller set
    them.
    """

    _lock = threading.Lock()
    _inside = 0
    _saved = True

    def __enter__(self) -> None:
        cls = type(self)
        with cls._lock:
            if cls._inside == 0:
                cls._saved = torch.backends.cuda.cudnn_sdp_enabled()
                torch.backends.cuda.enable_cudnn_sdp(False)
            cls._inside += 1

    def __exit__(self, *exc: object) -> None:
        cls = type(self)
        with cls._lock:
            cls._inside -= 1
            if cls._inside == 0:
                torch.backends.cuda.enable_cudnn_sdp(cls._saved)


def sdpa_context(device: torch.device) -> contextlib.AbstractContextManager:
    """Where this module's SDPA calls run: cuDNN's backend off on CUDA (``_CudnnSdpOff``),
    torch's own choice elsewhere."""
    return _CudnnSdpOff() if device.type == "cuda" else contextlib.nullcontext()


@dataclass(frozen=True)
class _DecodeGroup:
    rows: torch.Tensor  # (B,) query rows
    lens: torch.Tensor  # (B,) KV lengths
    slots: torch.Tensor  # (B * max_len,) KV slots; past a row's length, any valid slot
    mask: torch.Tensor | None  # (B, 1, 1, max_len) bool, None when all lengths are equal
    max_len: int


@dataclass(frozen=True)
class _PrefillSeq:
    start: int
    end: int
    slots: torch.Tensor  # (kv_len,)
    mask: torch.Tensor | None  # (q_len, kv_len) bool; None = plain causal (q_len == kv_len)


@dataclass(frozen=True)
class _Plan:
    """How the layers of one window attend in the planned step."""

    decode: _DecodeGroup | None
    prefill: list[_PrefillSeq]


class TorchRefBackend(AttentionBackend):
    """Paged attention with ``torch.nn.functional.scaled_dot_product_attention``."""

    name = "torch"

    def plan(self, meta: AttentionMetadata) -> None:
        self._slot_mapping = meta.slot_mapping
        qo = meta.qo_indptr.tolist()
        lens = meta.kv_lens().tolist()
        decode = [i for i in range(meta.num_seqs) if qo[i + 1] - qo[i] == 1]
        prefill = [i for i in range(meta.num_seqs) if qo[i + 1] - qo[i] > 1]
        seq_slots = _sequence_slots(meta, lens, prefill) if prefill else {}
        self._plans = {
            w: _Plan(_decode_group(meta, decode, qo, lens, w) if decode else None,
                     [_prefill_seq(qo[i], qo[i + 1], lens[i], seq_slots[i], w) for i in prefill])
            for w in self.distinct_windows}
        if self.kv.k.device.type != "cpu":
            self._move_plan(self.kv.k.device)

    @property
    def _decode(self) -> _DecodeGroup | None:
        """The decode rows of the planned step, as the first layer attends to them."""
        return self._plans[self.window(0)].decode

    def _move_plan(self, device: torch.device) -> None:
        """Copy this step's planned index tensors to ``device`` (a CUDA cache)."""
        self._slot_mapping = _to_device(self._slot_mapping, device)
        self._plans = {w: _Plan(None if p.decode is None else _moved(p.decode, device),
                                [_moved(seq, device) for seq in p.prefill])
                       for w, p in self._plans.items()}

    def forward(self, layer: int, q: torch.Tensor, k: torch.Tensor,
                v: torch.Tensor) -> torch.Tensor:
        k_slots, v_slots = self.kv.layer_slots(layer)
        k_slots.index_copy_(0, self._slot_mapping, k)
        v_slots.index_copy_(0, self._slot_mapping, v)
        out = torch.empty_like(q)
        plan = self._plans[self.window(layer)]
        with sdpa_context(q.device):
            if plan.decode is not None:
                self._attend_decode(plan.decode, q, k_slots, v_slots, out)
            for seq in plan.prefill:
                out[seq.start : seq.end] = self._attend_prefill(q, k_slots, v_slots, seq)
        return out

    def _attend_decode(self, g: _DecodeGroup, q, k_slots, v_slots, out) -> None:
        b = g.rows.numel()
        kk = k_slots.index_select(0, g.slots).view(b, g.max_len, *k_slots.shape[1:])
        vv = v_slots.index_select(0, g.slots).view(b, g.max_len, *v_slots.shape[1:])
        qq = q.index_select(0, g.rows) if b != q.shape[0] else q
        o = F.scaled_dot_product_attention(
            qq.unsqueeze(2),  # (B, H, 1, D)
            kk.transpose(1, 2),  # (B, KVH, L, D)
            vv.transpose(1, 2),
            attn_mask=g.mask,
            scale=self.scale,
            enable_gqa=True,
        )
        out.index_copy_(0, g.rows, o.squeeze(2))

    def _attend_prefill(self, q, k_slots, v_slots, seq: _PrefillSeq) -> torch.Tensor:
        kk = k_slots.index_select(0, seq.slots).transpose(0, 1)  # (KVH, L, D)
        vv = v_slots.index_select(0, seq.slots).transpose(0, 1)
        qq = q[seq.start : seq.end].transpose(0, 1)  # (H, Q, D)
        o = F.scaled_dot_product_attention(
            qq.unsqueeze(0),
            kk.unsqueeze(0),
            vv.unsqueeze(0),
            attn_mask=seq.mask,
            is_causal=seq.mask is None,
            scale=self.scale,
            enable_gqa=True,
        )
        return o[0].transpose(0, 1)


def _to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    return t.pin_memory().to(device, non_blocking=True) if t.device.type == "cpu" else t


def _moved(plan, device: torch.device):
    """The dataclass ``plan`` with its tensor fields on ``device``."""
    return replace(plan, **{f.name: _to_device(getattr(plan, f.name), device)
                            for f in fields(plan)
                            if isinstance(getattr(plan, f.name), torch.Tensor)})


def _sequence_slots(meta: AttentionMetadata, lens: list[int],
                    which: list[int] | None = None) -> dict[int, torch.Tensor]:
    """The KV slots of sequence i (``lens[i]`` of them) for each i of ``which`` (all: None)."""
    ps = meta.page_size
    offsets = torch.arange(ps, dtype=torch.int64)
    kv_ind = meta.kv_indptr.tolist()
    slots = {}
    for i in range(len(lens)) if which is None else which:
        pages = meta.kv_indices[kv_ind[i] : kv_ind[i + 1]].to(torch.int64)
        slots[i] = (pages[:, None] * ps + offsets[None, :]).flatten()[: lens[i]]
    return slots


def _decode_group(meta: AttentionMetadata, idx: list[int], qo: list[int], lens: list[int],
                  window: int | None = None) -> _DecodeGroup:
    """The decode rows ``idx`` as one padded batch, in a fixed number of numpy operations
    whatever the batch (NOTE: torch's per-op overhead, ~5 us, is most of a small batch's
    plan, and a per-row loop cost ~15 us a row). With a ``window``, each row's slots are its
    last ``window`` keys only (the pages before them are never read: they may be freed)."""
    ps = meta.page_size
    indptr = meta.kv_indptr.numpy().astype(np.int64)
    indices = meta.kv_indices.numpy().astype(np.int64)
    which = np.asarray(idx, dtype=np.int64)
    full = np.asarray([lens[i] for i in idx], dtype=np.int64)
    first = np.zeros_like(full) if window is None else np.maximum(full - window, 0)
    starts = indptr[which] + first // ps  # the first page a row reads
    # each row's pages, padded with pages that are valid slots of the cache (any: masked)
    at = starts[:, None] + np.arange((indptr[which + 1] - starts).max(), dtype=np.int64)
    pages = indices[np.minimum(at, indices.size - 1)]
    lengths = full - first
    max_len = int(lengths.max())
    slots = (pages[:, :, None] * ps + np.arange(ps, dtype=np.int64)).reshape(len(idx), -1)
    if window is not None:  # shift each row to its first key inside the window
        cols = (first % ps)[:, None] + np.arange(max_len, dtype=np.int64)
        slots = np.take_along_axis(slots, np.minimum(cols, slots.shape[1] - 1), axis=1)
    mask = None
    if (lengths != max_len).any():
        mask = torch.from_numpy(lengths[:, None] > np.arange(max_len))[:, None, None, :]
    return _DecodeGroup(torch.tensor([qo[i] for i in idx], dtype=torch.int64),
                        torch.from_numpy(lengths),
                        torch.from_numpy(np.ascontiguousarray(slots[:, :max_len]).reshape(-1)),
                        mask, max_len)


def _prefill_seq(start: int, end: int, kv_len: int, slots: torch.Tensor,
                 window: int | None = None) -> _PrefillSeq:
    q_len = end - start
    first = 0 if window is None else max(0, kv_len - q_len - window + 1)  # first key any sees
    mask = None
    if kv_len != q_len or window is not None:  # bottom-right aligned causal (+ window) mask
        mask = window_mask(torch.arange(kv_len - q_len, kv_len), torch.arange(first, kv_len),
                           window)
    return _PrefillSeq(start, end, slots[first:], mask)


def window_mask(q_pos: torch.Tensor, k_pos: torch.Tensor, window: int | None) -> torch.Tensor:
    """(Q, L) bool: query at ``q_pos`` may see the key at ``k_pos``: causal, and within
    ``window`` tokens (itself included) where one is given."""
    seen = k_pos[None, :] <= q_pos[:, None]
    if window is not None:
        seen &= k_pos[None, :] > q_pos[:, None] - window
    return seen


def ref_paged_attention(
    q: torch.Tensor,
    k_pages: torch.Tensor,
    v_pages: torch.Tensor,
    meta: AttentionMetadata,
    scale: float | None = None,
    window: int | None = None,
) -> torch.Tensor:
    """Unfused reference: attention of ``q`` (T, H, D) over pages (P, page_size, KVH, D).

    Reads the KV of each sequence straight from ``meta`` (no slot writes), one sequence at a
    time in float64 softmax arithmetic; used to check backends against the metadata. A
    ``window`` W: each query sees the W keys ending at its own position.
    """
    scale = scale if scale is not None else q.shape[-1] ** -0.5
    lens = meta.kv_lens().tolist()
    qo = meta.qo_indptr.tolist()
    k_flat = k_pages.reshape(-1, *k_pages.shape[2:])
    v_flat = v_pages.reshape(-1, *v_pages.shape[2:])
    slots = _sequence_slots(meta, lens)
    out = torch.empty_like(q)
    for i, n in enumerate(lens):
        qq = q[qo[i] : qo[i + 1]].double()  # (Q, H, D)
        kk, vv = k_flat[slots[i]].double(), v_flat[slots[i]].double()  # (L, KVH, D)
        rep = qq.shape[1] // kk.shape[1]
        kk, vv = kk.repeat_interleave(rep, 1), vv.repeat_interleave(rep, 1)
        scores = torch.einsum("qhd,lhd->hql", qq, kk) * scale
        seen = window_mask(torch.arange(n - qq.shape[0], n), torch.arange(n), window)
        scores = scores.masked_fill(~seen, float("-inf"))
        out[qo[i] : qo[i + 1]] = torch.einsum("hql,lhd->qhd", scores.softmax(-1), vv).to(q.dtype)
    return out
