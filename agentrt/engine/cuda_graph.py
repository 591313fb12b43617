"""Decode steps as CUDA graphs: one graph per padded batch size, captured after warm-up.

A decode step of ``n`` requests is padded to the smallest captured size ``B >= n``: the extra
rows decode one token of a dummy sequence whose single page is the pad page (one KV page the
engine reserves and no request ever gets), so they write and read nothing that belongs to a
request. The padded step's page table is planned into the attention backend's fixed buffers
for ``B`` (:meth:`~agentrt.attention.AttentionBackend.plan_decode_graph`), the token ids and
positions are copied into the graph's fixed inputs, and the graph replays the whole forward
pass; the logits of the first ``n`` rows are computed eagerly from its output.

Prefill and mixed steps, and decode steps larger than the largest size, run eagerly. The page
table of a graph of ``B`` rows holds ``B * max_pages_per_seq`` page indices, the most ``B``
requests of at most ``max_model_len`` tokens reference even when they all share their prefix
pages (``N`` requests on ``P`` shared pages need ``N * P`` entries, more than the pool has
pages); a step that still would not fit (a request longer than that bound) runs eagerly
instead of failing (:meth:`DecodeGraphs.padded_size`).
``DecodeGraphs(capture=False)`` runs the same padded, fixed-buffer path eagerly instead of
replaying graphs: that is how the path is checked where there is no GPU.
"""

from __future__ import annotations

import torch

from agentrt.attention.base import AttentionBackend, AttentionMetadata
from agentrt.models.llama import LlamaModel

__all__ = ["DecodeGraphs", "pad_decode_metadata"]


def pad_decode_metadata(meta: AttentionMetadata, batch_size: int,
                        pad_page: int) -> AttentionMetadata:
    """``meta`` (a decode step) with rows appended up to ``batch_size``; each extra row is a
    one-token sequence on ``pad_page``."""
    extra = batch_size - meta.num_seqs
    if extra < 0:
        raise ValueError(f"cannot pad {meta.num_seqs} sequences to {batch_size}")
    i32 = torch.int32
    steps = torch.arange(1, extra + 1, dtype=i32)
    return AttentionMetadata(
        qo_indptr=torch.cat([meta.qo_indptr, meta.qo_indptr[-1] + steps]),
        kv_indptr=torch.cat([meta.kv_indptr, meta.kv_indptr[-1] + steps]),
        kv_indices=torch.cat([meta.kv_indices, torch.full((extra,), pad_page, dtype=i32)]),
        kv_last_page_len=torch.cat([meta.kv_last_page_len, torch.ones(extra, dtype=i32)]),
        slot_mapping=torch.cat([meta.slot_mapping, torch.full(
            (extra,), pad_page * meta.page_size, dtype=torch.int64)]),
        page_size=meta.page_size,
    )


class DecodeGraphs:
    """Captured decode steps for ``batch_sizes``, replayed by :meth:`run`."""

    def __init__(self, model: LlamaModel, backend: AttentionBackend,
                 batch_sizes: tuple[int, ...], pad_page: int, max_pages_per_seq: int,
                 device: torch.device, capture: bool = True) -> None:
        self.model, self.backend = model, backend
        self.batch_sizes = tuple(sorted(batch_sizes))
        self.pad_page = pad_page
        self.max_pages_per_seq = max_pages_per_seq
        self.device = device
        self.is_captured = False
        self.num_steps = 0
        """Decode steps run through the fixed buffers (replayed when captured)."""
        backend.enable_decode_graphs(self.batch_sizes, max_pages_per_seq)
        hidden = model.config.hidden_size
        self._ids = {b: torch.zeros(b, dtype=torch.int64, device=device) for b in batch_sizes}
        self._pos = {b: torch.zeros(b, dtype=torch.int64, device=device) for b in batch_sizes}
        self._out = {b: torch.zeros(b, hidden, dtype=model.dtype, device=device)
                     for b in batch_sizes}
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
        if capture and model.config.moe is None:  # NOTE: a mixture of experts picks its experts
            self._capture()  # on the host each step (agentrt_kernels.cpu.moe): run eagerly

    def padded_size(self, meta: AttentionMetadata) -> int | None:
        """The graph size a step runs at, or None when it must run eagerly (a prefill row,
        more requests than the largest graph, or more page indices than its table holds)."""
        n = meta.num_seqs
        if int(meta.qo_indptr[-1]) != n:
            return None
        b = next((b for b in self.batch_sizes if b >= n), None)
        if b is None or meta.kv_indices.numel() + b - n > b * self.max_pages_per_seq:
            return None  # NOTE: each pad row adds its one pad page
        return b

    def run(self, ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
            batch_size: int) -> torch.Tensor:
        """Hidden states (n, hidden) of a decode step of ``n = meta.num_seqs`` requests
        (host ``ids`` and ``positions``), run at ``batch_size`` rows."""
        n = meta.num_seqs
        self.backend.plan_decode_graph(pad_decode_metadata(meta, batch_size, self.pad_page))
        self._ids[batch_size][:n].copy_(ids, non_blocking=True)
        self._ids[batch_size][n:].zero_()
        self._pos[batch_size][:n].copy_(positions, non_blocking=True)
        self._pos[batch_size][n:].zero_()
        if self.is_captured:
            self._graphs[batch_size].replay()
        else:
            self._forward(batch_size)
        self.num_steps += 1
        return self._out[batch_size][:n]

    def _forward(self, b: int) -> None:
        self._out[b].copy_(self.model.forward(self._ids[b], self._pos[b]))

    def _capture(self) -> None:
        """Warm up each size, then capture it (largest first; all graphs share one memory
        pool and one side stream, warm-up included), on dummy steps whose rows all sit on the
        pad page."""
        pool = torch.cuda.graph_pool_handle()
        side = torch.cuda.Stream(self.device)
        for b in reversed(self.batch_sizes):
            dummy = pad_decode_metadata(_empty_decode(self.backend.kv.page_size), b,
                                        self.pad_page)
            self.backend.plan_decode_graph(dummy)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                for _ in range(2):
                    self._forward(b)
            torch.cuda.current_stream(self.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool, stream=side):
                self._out[b] = self.model.forward(self._ids[b], self._pos[b])
            self._graphs[b] = graph
        torch.cuda.synchronize(self.device)
        self.is_captured = True


def _empty_decode(page_size: int) -> AttentionMetadata:
    i32 = torch.int32
    zero = torch.zeros(1, dtype=i32)
    return AttentionMetadata(zero, zero, torch.zeros(0, dtype=i32), torch.zeros(0, dtype=i32),
                             torch.zeros(0, dtype=torch.int64), page_size)
