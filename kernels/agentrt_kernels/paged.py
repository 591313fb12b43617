"""FlashInfer's paged-KV call arguments, built from agentrt's metadata, and their torch twins.

:func:`flashinfer_plan_args` turns a step's :class:`~agentrt.attention.AttentionMetadata` into
the arguments of ``BatchPrefillWithPagedKVCacheWrapper.plan`` (or, when every request has one
query row, ``BatchDecodeWithPagedKVCacheWrapper.plan``); :func:`append_indices` computes the
``batch_indices`` / ``positions`` that ``flashinfer.page.append_paged_kv_cache`` takes. The
``ref_*`` functions compute what those FlashInfer calls compute, in float64 on any device,
reading exactly the same arguments: that is how the arguments are checked on CPU.

KV layout: per layer a ``(k_cache, v_cache)`` tuple, each (num_pages, page_size, kv_heads,
head_dim) — FlashInfer's "NHD" layout, which is how :class:`KVCacheTensors` stores a layer.

The page tables a wrapper's ``plan`` takes stay on the host (pinned on a CUDA machine): FlashInfer
0.6's ``plan`` reads ``qo_indptr``, ``kv_indptr`` and ``kv_last_page_len`` there (``.to("cpu")``)
and copies the tables to the GPU itself, so device tensors would cost a sync each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from agentrt.attention.base import AttentionMetadata
from agentrt.attention.cascade import PagedLevel

__all__ = [
    "AppendIndices",
    "AttentionState",
    "CUDA_CORE_DECODE_GROUP_SIZES",
    "HeadLayout",
    "PlanArgs",
    "PlanCall",
    "append_indices",
    "flashinfer_plan_args",
    "pinned",
    "ref_append_paged_kv_cache",
    "ref_batch_prefill",
]

KV_LAYOUT = "NHD"

CUDA_CORE_DECODE_GROUP_SIZES = (1, 2, 3, 4, 8)
"""GQA group sizes (query heads per KV head) that FlashInfer 0.6.3's CUDA-core decode kernels
are instantiated for (``DISPATCH_GQA_GROUP_SIZE`` in include/flashinfer/utils.cuh); ``plan``
raises "Unsupported group_size" for any other (FlashInfer issue #996)."""


class PlanCall(NamedTuple):
    """Positional and keyword arguments of one wrapper's ``plan``."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]


class AttentionState(NamedTuple):
    """An attention output (T, H, D) and its natural-log LSE (T, H), float32."""

    out: torch.Tensor
    lse: torch.Tensor


class AppendIndices(NamedTuple):
    """Sequence and position (within its KV) of every new token, int32 (T,) each."""

    batch_indices: torch.Tensor
    positions: torch.Tensor

    def to(self, device: str | torch.device) -> AppendIndices:
        return AppendIndices(*(t.to(device, non_blocking=True) for t in self))


@dataclass(frozen=True)
class HeadLayout:
    """Head counts, head size and dtype of the attention a wrapper is planned for."""

    num_qo_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype
    scale: float | None = None
    """The softmax scale; None = ``head_dim ** -0.5``."""

    def __post_init__(self) -> None:
        if self.num_kv_heads <= 0 or self.num_qo_heads % self.num_kv_heads:
            raise ValueError(f"num_qo_heads ({self.num_qo_heads}) must be a multiple of "
                             f"num_kv_heads ({self.num_kv_heads})")

    @property
    def sm_scale(self) -> float:
        return self.head_dim**-0.5 if self.scale is None else self.scale

    @property
    def group_size(self) -> int:
        """Query heads per KV head."""
        return self.num_qo_heads // self.num_kv_heads

    @property
    def decode_uses_tensor_cores(self) -> bool:
        """Whether decode runs on FlashInfer's prefill (tensor-core) kernels, the decode
        wrapper's ``use_tensor_cores=True``: needed for the group sizes its CUDA-core kernels
        do not dispatch (5, 6, 7, ...: Qwen2.5's 7 and 6, Qwen3-14B's 5). The tensor-core path
        plans ``qo_indptr = arange(B + 1)`` and takes any group size; same arguments either way.
        """
        return self.group_size not in CUDA_CORE_DECODE_GROUP_SIZES


@dataclass(frozen=True)
class PlanArgs:
    """Everything the paged prefill / decode wrappers' ``plan`` takes for one step."""

    level: PagedLevel  # page table and query rows, on the cache's device
    heads: HeadLayout
    is_decode: bool  # every entry has exactly one query row
    window_left: int = -1
    """FlashInfer's ``window_left``: a query at p sees keys p - window_left .. p; -1 = all."""

    def prefill_call(self) -> PlanCall:
        """Arguments of ``BatchPrefillWithPagedKVCacheWrapper.plan``."""
        lv, h = self.level, self.heads
        args = (lv.qo_indptr, lv.kv_indptr, lv.kv_indices, lv.kv_last_page_len,
                h.num_qo_heads, h.num_kv_heads, h.head_dim, lv.page_size)
        return PlanCall(args, dict(causal=lv.causal, sm_scale=h.sm_scale,
                                   window_left=self.window_left,
                                   q_data_type=h.dtype, kv_data_type=h.dtype))

    def decode_call(self) -> PlanCall:
        """Arguments of ``BatchDecodeWithPagedKVCacheWrapper.plan`` (no ``qo_indptr``)."""
        lv, h = self.level, self.heads
        args = (lv.kv_indptr, lv.kv_indices, lv.kv_last_page_len,
                h.num_qo_heads, h.num_kv_heads, h.head_dim, lv.page_size)
        return PlanCall(args, dict(pos_encoding_mode="NONE", sm_scale=h.sm_scale,
                                   window_left=self.window_left,
                                   q_data_type=h.dtype, kv_data_type=h.dtype))


def flashinfer_plan_args(meta: AttentionMetadata | PagedLevel, heads: HeadLayout,
                         device: str | torch.device = "cpu", window: int | None = None,
                         ) -> PlanArgs:
    """The plan arguments of ``meta``'s step, with the index tensors moved to ``device`` (the
    host, where FlashInfer's ``plan`` reads them, unless a test asks otherwise); ``window``: a
    sliding window of W keys (``window_left = W - 1``)."""
    level = PagedLevel.from_metadata(meta) if isinstance(meta, AttentionMetadata) else meta
    q_lens = level.qo_indptr[1:] - level.qo_indptr[:-1]
    return PlanArgs(level.to(device), heads, is_decode=bool((q_lens == 1).all()),
                    window_left=-1 if window is None else window - 1)


def pinned(level: PagedLevel) -> PagedLevel:
    """``level`` (host tensors) in page-locked memory: its copies to the GPU, by ``plan`` and
    by :meth:`PagedLevel.to`, are then asynchronous."""
    return PagedLevel(level.qo_indptr.pin_memory(), level.kv_indptr.pin_memory(),
                      level.kv_indices.pin_memory(), level.kv_last_page_len.pin_memory(),
                      level.page_size, level.causal)


def append_indices(meta: AttentionMetadata) -> AppendIndices:
    """Where each new token goes: what ``flashinfer.get_batch_indices_positions(qo_indptr,
    kv_lens, num_tokens)`` returns. Token ``j`` of sequence ``b`` sits at position
    ``kv_len[b] - q_len[b] + j`` of that sequence's KV."""
    q_lens = (meta.qo_indptr[1:] - meta.qo_indptr[:-1]).long()
    batch = torch.repeat_interleave(torch.arange(meta.num_seqs), q_lens)  # (T,)
    first_pos = meta.kv_lens().long() - q_lens  # (B,)
    rank = torch.arange(batch.numel()) - meta.qo_indptr.long()[batch]
    return AppendIndices(batch.int(), (first_pos[batch] + rank).int())


def ref_append_paged_kv_cache(append_key: torch.Tensor, append_value: torch.Tensor,
                              batch_indices: torch.Tensor, positions: torch.Tensor,
                              paged_kv_cache: tuple[torch.Tensor, torch.Tensor],
                              kv_indices: torch.Tensor, kv_indptr: torch.Tensor,
                              kv_last_page_len: torch.Tensor) -> None:
    """Torch twin of ``flashinfer.page.append_paged_kv_cache`` (NHD): write K/V (T, KVH, D)
    to page ``kv_indices[kv_indptr[b] + pos // page_size]``, offset ``pos % page_size``.

    ``kv_last_page_len`` is accepted for parity with FlashInfer and not needed here.
    """
    k_cache, v_cache = paged_kv_cache  # (P, page_size, KVH, D) each
    page_size = k_cache.shape[1]
    b, pos = batch_indices.long(), positions.long()
    pages = kv_indices.long()[kv_indptr.long()[b] + pos // page_size]
    k_cache[pages, pos % page_size] = append_key
    v_cache[pages, pos % page_size] = append_value


def ref_batch_prefill(q: torch.Tensor, paged_kv_cache: tuple[torch.Tensor, torch.Tensor],
                      plan: PlanArgs, causal: bool | None = None) -> AttentionState:
    """Torch twin of ``plan`` + ``run(q, paged_kv_cache, return_lse=True)`` of the paged
    prefill wrapper; with one row per entry also that of the decode wrapper.

    Entry by entry in float64: query rows attend to the entry's pages, bottom-right causal
    when ``causal`` (default: the level's own flag). An entry without pages gives (0, -inf).
    NOTE: the LSE is natural-log; FlashInfer's wrappers return it in base 2.
    """
    lv = plan.level
    causal = lv.causal if causal is None else causal
    k_cache, v_cache = paged_kv_cache
    qo, kv_ptr, lens = lv.qo_indptr.tolist(), lv.kv_indptr.tolist(), lv.kv_lens().tolist()
    out = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    lse = torch.full(q.shape[:2], float("-inf"), device=q.device)
    for i, n in enumerate(lens):
        if n == 0:
            continue
        pages = lv.kv_indices[kv_ptr[i] : kv_ptr[i + 1]].long()
        k = k_cache[pages].flatten(0, 1)[:n]  # (L, KVH, D)
        v = v_cache[pages].flatten(0, 1)[:n]
        o, s = _attend(q[qo[i] : qo[i + 1]], k, v, plan.heads.sm_scale, causal,
                       plan.window_left)
        out[qo[i] : qo[i + 1]], lse[qo[i] : qo[i + 1]] = o, s
    return AttentionState(out, lse)


def _attend(q, k, v, scale: float, causal: bool, window_left: int = -1,
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """q (Q, H, D) over k/v (L, KVH, D) in float64; returns float32 out (Q, H, D), lse (Q, H).
    ``window_left`` >= 0: a query at p sees no key before p - window_left."""
    rep = q.shape[1] // k.shape[1]
    k, v = k.double().repeat_interleave(rep, 1), v.double().repeat_interleave(rep, 1)
    scores = torch.einsum("qhd,lhd->hql", q.double(), k) * scale  # (H, Q, L)
    if causal:
        n, nq = k.shape[0], q.shape[0]
        q_pos = torch.arange(n - nq, n, device=q.device)[:, None]
        k_pos = torch.arange(n, device=q.device)[None, :]
        hidden = k_pos > q_pos
        if window_left >= 0:
            hidden |= k_pos < q_pos - window_left
        scores = scores.masked_fill(hidden, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # (H, Q)
    out = torch.einsum("hql,lhd->qhd", torch.exp(scores - lse[..., None]), v)
    return out.float(), lse.T.float()
