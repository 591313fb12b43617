"""The attention backend interface and the paged-KV metadata every backend consumes.

The metadata is exactly what FlashInfer's paged wrappers take (``qo_indptr``, ``kv_indptr``,
``kv_indices``, ``kv_last_page_len``, page size), plus the flat slot of every new token for the
append. The model runner builds it once per step; ``plan`` is called once per step and
``forward`` once per layer, the same plan/run split FlashInfer uses.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch

from agentrt.core.kv_tensors import KVCacheTensors

__all__ = ["AttentionBackend", "AttentionMetadata", "KVCacheTensors"]


@dataclass(frozen=True)
class AttentionMetadata:
    """Paged-KV layout of one step's batch (all int32 tensors on the cache's device).

    Sequence ``i`` owns query rows ``qo_indptr[i]:qo_indptr[i+1]`` of the flattened batch and
    pages ``kv_indices[kv_indptr[i]:kv_indptr[i+1]]``; its last page holds
    ``kv_last_page_len[i]`` tokens. Its KV length therefore includes the new tokens, which are
    written to ``slot_mapping`` (page * page_size + offset) before attention runs.
    """

    qo_indptr: torch.Tensor  # (B + 1,)
    kv_indptr: torch.Tensor  # (B + 1,)
    kv_indices: torch.Tensor  # (num_pages_used,)
    kv_last_page_len: torch.Tensor  # (B,)
    slot_mapping: torch.Tensor  # (T,) int64
    page_size: int

    @property
    def num_seqs(self) -> int:
        return self.qo_indptr.numel() - 1

    def kv_lens(self) -> torch.Tensor:
        """KV length of every sequence, new tokens included."""
        pages = self.kv_indptr[1:] - self.kv_indptr[:-1]
        return (pages - 1).clamp(min=0) * self.page_size + self.kv_last_page_len


class AttentionBackend(ABC):
    """Computes attention over the paged KV cache for one step's flattened batch."""

    def __init__(self, kv: KVCacheTensors, num_heads: int, head_dim: int) -> None:
        self.kv = kv
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.scale = head_dim**-0.5

    @abstractmethod
    def plan(self, meta: AttentionMetadata) -> None:
        """Prepare for a step; called once per step before the forward pass."""

    @abstractmethod
    def forward(self, layer: int, q: torch.Tensor, k: torch.Tensor,
                v: torch.Tensor) -> torch.Tensor:
        """Append ``k``/``v`` (T, kv_heads, D) to the cache, attend with ``q`` (T, heads, D).

        Called once per layer, in layer order, after ``plan``. Returns (T, heads, D).
        """
