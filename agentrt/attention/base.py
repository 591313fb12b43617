"""The attention backend interface and the paged-KV metadata every backend consumes.

The metadata is exactly what FlashInfer's paged wrappers take (``qo_indptr``, ``kv_indptr``,
``kv_indices``, ``kv_last_page_len``, page size), plus the flat slot of every new token for the
append. The model runner builds it once per step, on the host (FlashInfer's ``plan`` reads its
page table on the host too); ``plan`` is called once per step and copies what the kernels read
to the cache's device, ``forward`` once per layer: the same plan/run split FlashInfer uses.

Decode steps replayed as CUDA graphs plan with :meth:`AttentionBackend.plan_decode_graph`
instead: their page table goes into fixed buffers allocated once per batch size, so the
captured kernels read the current step's pages.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from agentrt.core.kv_tensors import KVCacheTensors

__all__ = ["AttentionBackend", "AttentionMetadata", "KVCacheTensors"]


@dataclass(frozen=True)
class AttentionMetadata:
    """Paged-KV layout of one step's batch (int32 tensors on the host; ``slot_mapping`` int64).

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
        if self.kv_indptr.device.type == "cpu":  # NOTE: numpy: 3 us where torch's ops took 22
            pages = np.diff(self.kv_indptr.numpy())
            return torch.from_numpy((pages - 1).clip(min=0) * self.page_size
                                    + self.kv_last_page_len.numpy())
        pages = self.kv_indptr[1:] - self.kv_indptr[:-1]
        return (pages - 1).clamp(min=0) * self.page_size + self.kv_last_page_len


class AttentionBackend(ABC):
    """Computes attention over the paged KV cache for one step's flattened batch."""

    supports_decode_graphs = False
    """Whether decode steps planned with :meth:`plan_decode_graph` can be captured as CUDA
    graphs (their kernels read only fixed buffers and never sync with the host)."""

    def __init__(self, kv: KVCacheTensors, num_heads: int, head_dim: int, *,
                 windows: Sequence[int | None] = (), scale: float | None = None) -> None:
        """``windows``: each layer's sliding window W (a query at position p sees keys at
        p - W + 1 .. p, transformers' ``sliding_window``; FlashInfer's ``window_left`` is
        W - 1), None for a global layer; layers past the sequence's end are global.
        ``scale``: the softmax scale, ``head_dim ** -0.5`` unless given (Gemma's
        ``query_pre_attn_scalar ** -0.5``)."""
        self.kv = kv
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.scale = scale if scale is not None else head_dim**-0.5
        self.windows = tuple(windows)
        if any(w is not None and w < 1 for w in self.windows):
            raise ValueError(f"windows: a sliding window is at least 1 token, got {windows}")

    def window(self, layer: int) -> int | None:
        """The sliding window of ``layer``; None = global attention."""
        return self.windows[layer] if layer < len(self.windows) else None

    @property
    def distinct_windows(self) -> tuple[int | None, ...]:
        """The windows the layers use (None = global), each once, global first."""
        return tuple(sorted(set(self.windows) | ({None} if not self.windows else set()),
                            key=lambda w: -1 if w is None else w))

    def enable_decode_graphs(self, batch_sizes: tuple[int, ...], max_pages_per_seq: int) -> None:
        """Allocate, once, fixed buffers for decode steps of exactly these batch sizes, a step
        of ``B`` rows holding up to ``B * max_pages_per_seq`` page indices (rows may share
        pages: a bound on the pool's size is no bound on a step's page table)."""
        raise NotImplementedError(f"{type(self).__name__} cannot run decode steps as graphs")

    def plan_decode_graph(self, meta: AttentionMetadata) -> None:
        """Like :meth:`plan`, for a decode step of one of the enabled batch sizes: the page
        table is copied into that size's fixed buffers, which ``forward`` then reads."""
        raise NotImplementedError(f"{type(self).__name__} cannot run decode steps as graphs")

    @abstractmethod
    def plan(self, meta: AttentionMetadata) -> None:
        """Prepare for a step; called once per step before the forward pass."""

    @abstractmethod
    def forward(self, layer: int, q: torch.Tensor, k: torch.Tensor,
                v: torch.Tensor) -> torch.Tensor:
        """Append ``k``/``v`` (T, kv_heads, D) to the cache, attend with ``q`` (T, heads, D).

        Called once per layer, in layer order, after ``plan``. Returns (T, heads, D).
        """
