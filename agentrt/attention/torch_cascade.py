"""The torch backend with shared-prefix (cascade) attention.

``plan`` splits the step with :func:`~agentrt.attention.cascade.split_cascade`. When no two
requests share pages the step runs exactly as on the torch backend. Otherwise ``forward``
gathers each group's shared KV once and attends all of the group's query rows to it in one
product, attends every request to its own remaining pages, and merges the two partial states
with the log-sum-exp rule. Sliding-window layers always attend as on the torch backend
(their window's keys are what they see, shared or not).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agentrt.attention.base import AttentionMetadata
from agentrt.attention.cascade import PagedLevel, merge_state, split_cascade
from agentrt.attention.torch_ref import TorchRefBackend, _moved, _sequence_slots, _to_device

__all__ = ["TorchCascadeBackend", "attention_with_lse"]


@dataclass(frozen=True)
class _Block:
    """Query rows of ``num_seqs`` entries with equal query and (padded) KV counts."""

    rows: torch.Tensor  # (B * Q,) query rows, in level order
    slots: torch.Tensor  # (B * L,) KV slots, padded with slot 0
    mask: torch.Tensor | None  # (B, Q, L) bool, True = attend; None = attend to all
    num_seqs: int


class TorchCascadeBackend(TorchRefBackend):
    """Torch attention that attends to a shared prefix once per group of requests."""

    name = "torch_cascade"

    def __init__(self, kv, num_heads: int, head_dim: int, **options) -> None:
        super().__init__(kv, num_heads, head_dim, **options)
        self.num_cascade_steps = 0
        """Steps planned with at least one shared group (observability and tests)."""
        self._is_cascade = False
        self._row_order: torch.Tensor | None = None

    def plan(self, meta: AttentionMetadata) -> None:
        split = split_cascade(meta)
        self._is_cascade = split is not None
        if split is None or any(w is not None for w in self.windows):
            super().plan(meta)  # NOTE: sliding layers attend by their window's plain plan
        if split is None:
            return
        self.num_cascade_steps += 1
        self._slot_mapping = meta.slot_mapping
        self._levels = [_plan_level(level) for level in split.levels]
        self._row_order = split.row_order
        device = self.kv.k.device
        if device.type != "cpu":  # a CUDA cache: the planned indices go to it once
            self._slot_mapping = _to_device(self._slot_mapping, device)
            self._levels = [[_moved(b, device) for b in blocks] for blocks in self._levels]
            if split.row_order is not None:
                self._row_order = _to_device(split.row_order, device)

    def forward(self, layer: int, q: torch.Tensor, k: torch.Tensor,
                v: torch.Tensor) -> torch.Tensor:
        if not self._is_cascade or self.window(layer) is not None:
            return super().forward(layer, q, k, v)
        k_slots, v_slots = self.kv.layer_slots(layer)
        k_slots.index_copy_(0, self._slot_mapping, k)
        v_slots.index_copy_(0, self._slot_mapping, v)
        order = self._row_order
        qq = q if order is None else q.index_select(0, order)
        shared, unique = (self._attend_level(blocks, qq, k_slots, v_slots)
                          for blocks in self._levels)
        out = merge_state(*unique, *shared)[0].to(q.dtype)
        if order is None:
            return out
        return torch.empty_like(out).index_copy_(0, order, out)

    def _attend_level(self, blocks: list[_Block], q, k_slots, v_slots):
        """Output (T, H, D) and LSE (T, H) of one level; rows it does not cover stay empty."""
        out = torch.zeros_like(q, dtype=torch.float32)
        lse = torch.full(q.shape[:2], float("-inf"), device=q.device)
        for blk in blocks:
            b = blk.num_seqs
            qq = q.index_select(0, blk.rows).view(b, -1, *q.shape[1:])  # (B, Q, H, D)
            kk = k_slots.index_select(0, blk.slots).view(b, -1, *k_slots.shape[1:])
            vv = v_slots.index_select(0, blk.slots).view(b, -1, *v_slots.shape[1:])
            o, s = attention_with_lse(qq, kk, vv, blk.mask, self.scale)
            out.index_copy_(0, blk.rows, o.flatten(0, 1))
            lse.index_copy_(0, blk.rows, s.flatten(0, 1))
        return out, lse


def attention_with_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       mask: torch.Tensor | None, scale: float,
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of ``q`` (B, Q, H, D) over ``k``/``v`` (B, L, KVH, D), float32.

    Returns the output (B, Q, H, D) and the natural-log LSE of the scaled scores (B, Q, H).
    ``mask`` (B, Q, L) marks the keys each query may see; every query must see at least one.
    """
    b, nq, h, d = q.shape
    kvh = k.shape[2]
    qg = q.float().view(b, nq, kvh, h // kvh, d)  # (B, Q, KVH, R, D)
    scores = torch.einsum("bqgrd,blgd->bgrql", qg, k.float()) * scale  # (B, KVH, R, Q, L)
    if mask is not None:
        scores = scores.masked_fill(~mask[:, None, None], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)  # (B, KVH, R, Q, 1)
    out = torch.einsum("bgrql,blgd->bqgrd", torch.exp(scores - lse), v.float())
    return out.reshape(b, nq, h, d), lse.squeeze(-1).permute(0, 3, 1, 2).reshape(b, nq, h)


def _plan_level(level: PagedLevel) -> list[_Block]:
    """Single-query entries as one padded block; every other entry as its own block."""
    lens = level.kv_lens().tolist()
    qo = level.qo_indptr.tolist()
    slots = _sequence_slots(level, lens)
    entries = [i for i in range(level.num_entries) if lens[i] > 0]
    single = [i for i in entries if qo[i + 1] - qo[i] == 1]
    blocks = [_entry_block(level, qo[i], qo[i + 1], lens[i], slots[i])
              for i in entries if qo[i + 1] - qo[i] > 1]
    if single:
        blocks.append(_single_query_block(single, qo, lens, slots))
    return blocks


def _entry_block(level: PagedLevel, start: int, end: int, kv_len: int,
                 slots: torch.Tensor) -> _Block:
    mask = None
    if level.causal:  # bottom-right aligned: query j sits at position kv_len - q_len + j
        q_pos = torch.arange(kv_len - (end - start), kv_len)[:, None]
        mask = (torch.arange(kv_len)[None, :] <= q_pos)[None]
    return _Block(torch.arange(start, end), slots, mask, num_seqs=1)


def _single_query_block(idx: list[int], qo, lens, slots) -> _Block:
    max_len = max(lens[i] for i in idx)
    padded = torch.zeros(len(idx), max_len, dtype=torch.int64)
    for row, i in enumerate(idx):
        padded[row, : lens[i]] = slots[i]
    mask = None
    if any(lens[i] != max_len for i in idx):
        valid = torch.tensor([lens[i] for i in idx])[:, None] > torch.arange(max_len)[None, :]
        mask = valid[:, None, :]  # (B, 1, L)
    rows = torch.tensor([qo[i] for i in idx], dtype=torch.int64)
    return _Block(rows, padded.flatten(), mask, num_seqs=len(idx))
