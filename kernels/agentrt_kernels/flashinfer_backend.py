"""FlashInferBackend: paged attention on FlashInfer's wrappers behind the backend interface.

``plan`` (once per step) builds the wrappers' arguments from agentrt's metadata and plans one
wrapper: ``BatchDecodeWithPagedKVCacheWrapper`` when every request decodes one token,
``BatchPrefillWithPagedKVCacheWrapper`` for mixed prefill/decode steps, and — in the cascade
variant, when requests share prefix pages — ``MultiLevelCascadeAttentionWrapper``. ``forward``
(once per layer) appends the new K/V with ``append_paged_kv_cache`` and runs the planned
wrapper. All wrappers share one workspace buffer; only one runs per step.

Decode steps can also run as CUDA graphs (:meth:`FlashInferBackend.enable_decode_graphs`):
each graph batch size gets fixed page-table buffers and a ``BatchDecodeWithPagedKVCacheWrapper``
built with ``use_cuda_graph=True`` over them; ``plan_decode_graph`` (outside the graph) plans
into those buffers, and ``forward`` (inside it) appends and attends through them only. Such
steps use the plain decode wrapper even in the cascade variant, whose shared-prefix levels
then serve the eager steps (prefill, mixed, or every step with ``enforce_eager``).

Decode wrappers run on tensor cores (FlashInfer's prefill kernels) for the GQA group sizes its
CUDA-core decode kernels are not built for (:attr:`HeadLayout.decode_uses_tensor_cores`).
``plan`` gets its page tables on the host, pinned (see :mod:`agentrt_kernels.paged`).

``flashinfer`` is imported when a backend is built, never at import time. Without it, without
a compiler for its JIT kernels (:mod:`agentrt_kernels.flashinfer_toolchain`), or with a KV cache
FlashInfer cannot serve (on CPU, or float32), ``impl="auto"`` falls back with a warning to the
``ref_*`` torch twins, which read exactly the same arguments; ``impl="flashinfer"`` raises
instead.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from types import ModuleType
from typing import Literal

import torch

from agentrt.attention.base import AttentionBackend, AttentionMetadata, KVCacheTensors
from agentrt.attention.cascade import PagedLevel, split_cascade
from agentrt_kernels.cascade import CascadePlanArgs, cascade_plan_args, ref_cascade_attention
from agentrt_kernels.flashinfer_toolchain import flashinfer_unusable_reason
from agentrt_kernels.paged import (
    KV_LAYOUT,
    AppendIndices,
    HeadLayout,
    PlanArgs,
    append_indices,
    flashinfer_plan_args,
    pinned,
    ref_append_paged_kv_cache,
    ref_batch_prefill,
)

__all__ = ["DecodeGraphBuffers", "FlashInferBackend", "FlashInferCascadeBackend",
           "load_flashinfer"]

_log = logging.getLogger(__name__)

WORKSPACE_BYTES = 128 * 1024 * 1024
"""Float workspace for split-KV partial results (FlashInfer's recommended 128 MB)."""

Impl = Literal["auto", "flashinfer", "reference"]
StepArgs = PlanArgs | CascadePlanArgs


def load_flashinfer() -> ModuleType:
    """Import ``flashinfer``, or raise an ImportError that says how to install it."""
    try:
        import flashinfer
    except ImportError as e:
        raise ImportError("the flashinfer attention backend needs FlashInfer and a CUDA GPU: "
                          "pip install 'agentrt[gpu]'") from e
    return flashinfer


class FlashInferBackend(AttentionBackend):
    """Paged attention with FlashInfer: plan once per step, run once per layer."""

    name = "flashinfer"

    def __init__(self, kv: KVCacheTensors, num_heads: int, head_dim: int, *,
                 impl: Impl = "auto", cascade: bool = False,
                 workspace_bytes: int = WORKSPACE_BYTES, windows=(), scale=None) -> None:
        super().__init__(kv, num_heads, head_dim, windows=windows, scale=scale)
        self.heads = HeadLayout(num_heads, kv.k.shape[3], head_dim, kv.k.dtype, self.scale)
        self.cascade = cascade
        """Plan the cascade wrapper when requests in a step share prefix pages (global
        layers only: sliding layers attend through their own window's wrappers)."""
        self.num_cascade_steps = 0
        self.kernels = _load_kernels(impl, kv, self.heads, workspace_bytes)
        # NOTE: a wrapper is planned for one window_left, and its plan lives in its
        # workspace: each sliding window gets wrappers and a workspace of its own
        self.window_kernels = {w: _load_kernels(impl, kv, self.heads, workspace_bytes)
                               for w in self.distinct_windows if w is not None}
        self.graph_buffers: dict[int, DecodeGraphBuffers] = {}
        self._graph: DecodeGraphBuffers | None = None

    @property
    def supports_decode_graphs(self) -> bool:  # type: ignore[override]
        """True on FlashInfer's kernels for a model without sliding layers. The reference
        twins also implement the fixed-buffer decode path (run eagerly, a CPU check of it) but
        cannot be captured."""
        return isinstance(self.kernels, _FlashInferKernels) and not self.window_kernels

    def enable_decode_graphs(self, batch_sizes: tuple[int, ...], max_pages_per_seq: int) -> None:
        device = self.kv.k.device
        # NOTE: one page-index buffer for every size (one graph replays at a time): a step of B
        # rows references at most B * max_pages_per_seq pages, shared prefix pages included
        shared = torch.zeros(max(batch_sizes) * max_pages_per_seq, dtype=torch.int32,
                             device=device)
        for bs in batch_sizes:
            buffers = DecodeGraphBuffers.allocate(bs, shared[: bs * max_pages_per_seq],
                                                  self.kv.page_size)
            self.graph_buffers[bs] = buffers
            self.kernels.add_graph_decode(buffers)

    def plan_decode_graph(self, meta: AttentionMetadata) -> None:
        buffers = self.graph_buffers[meta.num_seqs]
        buffers.fill(meta)
        self._graph = buffers
        # NOTE: indptr and last-page lengths from the host (plan reads them there), the page
        # indices from the device: plan copies host indices into the buffer blocking (a sync)
        level = PagedLevel.from_metadata(meta)
        indices = level.kv_indices.to(self.kv.k.device, non_blocking=True)
        level = PagedLevel(level.qo_indptr, level.kv_indptr, indices, level.kv_last_page_len,
                           level.page_size, level.causal)
        self.kernels.plan_graph(buffers, flashinfer_plan_args(level, self.heads))

    def plan(self, meta: AttentionMetadata) -> None:
        self._graph = None
        device = self.kv.k.device
        host = PagedLevel.from_metadata(meta)  # NOTE: plan reads it on the host: no syncs
        append = append_indices(meta)
        if device.type == "cuda":  # page-locked: the copies below and plan's are async
            host, append = pinned(host), AppendIndices(*(t.pin_memory() for t in append))
        self._append, self._table = append.to(device), host.to(device)
        split = split_cascade(meta) if self.cascade else None
        if split is None:
            self._step: StepArgs = flashinfer_plan_args(host, self.heads)
            self._row_order = None
        else:
            self._step = cascade_plan_args(split, self.heads, device)
            self._row_order = self._step.row_order
            self.num_cascade_steps += 1
        self.kernels.plan(self._step)
        for w, kernels in self.window_kernels.items():
            kernels.plan(flashinfer_plan_args(host, self.heads, window=w))

    def forward(self, layer: int, q: torch.Tensor, k: torch.Tensor,
                v: torch.Tensor) -> torch.Tensor:
        cache = (self.kv.k[layer], self.kv.v[layer])  # NHD: (P, page_size, KVH, D) each
        if self._graph is not None:  # NOTE: reads only the fixed buffers (capturable)
            g = self._graph
            self.kernels.append(k, v, g.append_indices, cache, g.table)
            return self.kernels.run_graph(g, q, cache)
        self.kernels.append(k, v, self._append, cache, self._table)
        window = self.window(layer)
        if window is not None:
            return self.window_kernels[window].run(q, cache)
        order = self._row_order
        if order is None:
            return self.kernels.run(q, cache)
        out = self.kernels.run(q.index_select(0, order), cache)  # wrapper row order
        return torch.empty_like(out).index_copy_(0, order, out)


class FlashInferCascadeBackend(FlashInferBackend):
    """FlashInfer with shared-prefix (cascade) attention for steps that share prefix pages."""

    name = "flashinfer_cascade"

    def __init__(self, kv: KVCacheTensors, num_heads: int, head_dim: int, *,
                 impl: Impl = "auto", workspace_bytes: int = WORKSPACE_BYTES, windows=(),
                 scale=None) -> None:
        super().__init__(kv, num_heads, head_dim, impl=impl, cascade=True,
                         workspace_bytes=workspace_bytes, windows=windows, scale=scale)


@dataclass(frozen=True)
class DecodeGraphBuffers:
    """The fixed tensors a captured decode step of ``batch_size`` rows reads: its page table
    (what a CUDA-graph ``BatchDecodeWithPagedKVCacheWrapper`` is built over) and the append
    indices. Row ``i`` is sequence ``i``, so ``batch_indices`` never changes."""

    batch_size: int
    page_size: int
    qo_indptr: torch.Tensor  # (B + 1,) int32 = arange(B + 1)
    kv_indptr: torch.Tensor  # (B + 1,) int32
    kv_indices: torch.Tensor  # (max_num_pages,) int32
    kv_last_page_len: torch.Tensor  # (B,) int32
    batch_indices: torch.Tensor  # (B,) int32 = arange(B)
    positions: torch.Tensor  # (B,) int32: where each row's new token goes in its KV

    @classmethod
    def allocate(cls, batch_size: int, kv_indices: torch.Tensor,
                 page_size: int) -> DecodeGraphBuffers:
        """Buffers for ``batch_size`` rows over ``kv_indices`` (int32, its capacity in pages;
        on the device the buffers go to, possibly a view shared with other sizes)."""
        device = kv_indices.device

        def zeros(n: int) -> torch.Tensor:
            return torch.zeros(n, dtype=torch.int32, device=device)

        rows = torch.arange(batch_size + 1, dtype=torch.int32, device=device)
        return cls(batch_size, page_size, rows, zeros(batch_size + 1), kv_indices,
                   zeros(batch_size), rows[:-1], zeros(batch_size))

    @property
    def table(self) -> PagedLevel:
        """The page table as a level (one query row per entry) over the buffers."""
        return PagedLevel(self.qo_indptr, self.kv_indptr, self.kv_indices,
                          self.kv_last_page_len, self.page_size, causal=True)

    @property
    def append_indices(self) -> AppendIndices:
        return AppendIndices(self.batch_indices, self.positions)

    def fill(self, meta: AttentionMetadata) -> None:
        """Copy a decode step's page table (host tensors) into the buffers."""
        if meta.num_seqs != self.batch_size or int(meta.qo_indptr[-1]) != self.batch_size:
            raise ValueError(f"a graph decode step of {self.batch_size} rows got "
                             f"{meta.num_seqs} sequences, {int(meta.qo_indptr[-1])} rows")
        n = meta.kv_indices.numel()
        if n > self.kv_indices.numel():
            raise ValueError(f"{n} pages exceed the graph's {self.kv_indices.numel()}")
        self.kv_indptr.copy_(meta.kv_indptr, non_blocking=True)
        self.kv_indices[:n].copy_(meta.kv_indices, non_blocking=True)
        self.kv_last_page_len.copy_(meta.kv_last_page_len, non_blocking=True)
        self.positions.copy_(append_indices(meta).positions, non_blocking=True)


class _FlashInferKernels:
    """The real wrappers; one float workspace shared by all of them."""

    def __init__(self, fi: ModuleType, device: torch.device, heads: HeadLayout,
                 workspace_bytes: int) -> None:
        _log.info("FlashInfer %s on %s: its kernels compile on first use for each dtype and "
                  "head size (about 1.5 min each on an H200), then load from FlashInfer's "
                  "cache", getattr(fi, "__version__", "?"), device)
        self.fi = fi
        workspace = torch.empty(workspace_bytes, dtype=torch.uint8, device=device)
        self.prefill = fi.BatchPrefillWithPagedKVCacheWrapper(workspace, KV_LAYOUT)
        self.use_tensor_cores = heads.decode_uses_tensor_cores
        self.decode = fi.BatchDecodeWithPagedKVCacheWrapper(
            workspace, KV_LAYOUT, use_tensor_cores=self.use_tensor_cores)
        self.cascade = fi.MultiLevelCascadeAttentionWrapper(2, workspace, KV_LAYOUT)
        self.workspace = workspace
        self.graph_decode: dict[int, object] = {}

    def add_graph_decode(self, buffers: DecodeGraphBuffers) -> None:
        """A CUDA-graph decode wrapper over ``buffers`` (its batch size is fixed)."""
        self.graph_decode[buffers.batch_size] = self.fi.BatchDecodeWithPagedKVCacheWrapper(
            self.workspace, KV_LAYOUT, use_cuda_graph=True,
            use_tensor_cores=self.use_tensor_cores,
            paged_kv_indptr_buffer=buffers.kv_indptr,
            paged_kv_indices_buffer=buffers.kv_indices,
            paged_kv_last_page_len_buffer=buffers.kv_last_page_len)

    def plan_graph(self, buffers: DecodeGraphBuffers, step: PlanArgs) -> None:
        call = step.decode_call()  # host page table; plan copies it into the buffers
        self.graph_decode[buffers.batch_size].plan(*call.args, **call.kwargs)

    def run_graph(self, buffers: DecodeGraphBuffers, q: torch.Tensor, cache) -> torch.Tensor:
        return self.graph_decode[buffers.batch_size].run(q, cache)

    def plan(self, step: StepArgs) -> None:
        if isinstance(step, CascadePlanArgs):
            self._wrapper, call = self.cascade, step.plan_call()
        elif step.is_decode:
            self._wrapper, call = self.decode, step.decode_call()
        else:
            self._wrapper, call = self.prefill, step.prefill_call()
        self._wrapper.plan(*call.args, **call.kwargs)

    def append(self, k, v, idx: AppendIndices, cache, table: PagedLevel) -> None:
        self.fi.append_paged_kv_cache(k, v, idx.batch_indices, idx.positions, cache,
                                      table.kv_indices, table.kv_indptr,
                                      table.kv_last_page_len, kv_layout=KV_LAYOUT)

    def run(self, q: torch.Tensor, cache) -> torch.Tensor:
        return self._wrapper.run(q, cache)


class _ReferenceKernels:
    """The ``ref_*`` torch twins, over exactly the arguments the wrappers would get."""

    def plan(self, step: StepArgs) -> None:
        self._step = step

    def add_graph_decode(self, buffers: DecodeGraphBuffers) -> None:
        pass

    def plan_graph(self, buffers: DecodeGraphBuffers, step: PlanArgs) -> None:
        pass

    def run_graph(self, buffers: DecodeGraphBuffers, q: torch.Tensor, cache) -> torch.Tensor:
        """The decode wrapper's twin over the fixed buffers themselves (what a captured
        graph reads); valid pages are those ``kv_indptr`` reaches."""
        step = PlanArgs(buffers.table, self._heads(q, cache), is_decode=True)
        return ref_batch_prefill(q, cache, step).out.to(q.dtype)

    @staticmethod
    def _heads(q: torch.Tensor, cache) -> HeadLayout:
        return HeadLayout(q.shape[1], cache[0].shape[2], q.shape[2], cache[0].dtype)

    def append(self, k, v, idx: AppendIndices, cache, table: PagedLevel) -> None:
        ref_append_paged_kv_cache(k, v, idx.batch_indices, idx.positions, cache,
                                  table.kv_indices, table.kv_indptr, table.kv_last_page_len)

    def run(self, q: torch.Tensor, cache) -> torch.Tensor:
        if isinstance(self._step, CascadePlanArgs):
            return ref_cascade_attention(q, cache, self._step)
        return ref_batch_prefill(q, cache, self._step).out.to(q.dtype)


def _load_kernels(impl: Impl, kv: KVCacheTensors, heads: HeadLayout, workspace_bytes: int):
    if impl == "reference":
        return _ReferenceKernels()
    reason = _unsupported(kv)
    if impl == "flashinfer":
        fi = load_flashinfer()
        if reason:
            raise ValueError(f"FlashInfer cannot run here: {reason}")
        return _FlashInferKernels(fi, kv.k.device, heads, workspace_bytes)
    reason = reason or flashinfer_unusable_reason()
    if reason is None:
        try:
            return _FlashInferKernels(load_flashinfer(), kv.k.device, heads, workspace_bytes)
        except ImportError as e:
            reason = str(e)
    warnings.warn(f"FlashInfer unavailable ({reason}); the flashinfer backend runs its torch "
                  "reference kernels", RuntimeWarning, stacklevel=3)
    return _ReferenceKernels()


def _unsupported(kv: KVCacheTensors) -> str | None:
    """Why FlashInfer's kernels cannot serve this cache, or None."""
    if kv.k.device.type != "cuda":
        return f"the KV cache is on {kv.k.device.type}"
    if kv.k.dtype not in (torch.float16, torch.bfloat16):
        return f"its kernels take float16 or bfloat16, the KV cache is {kv.k.dtype}"
    return None
