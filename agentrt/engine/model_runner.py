"""ModelRunner: turns a scheduled step into tensors, runs the forward pass, returns logits.

It flattens every chunk's tokens into one batch, computes their positions and KV slots from
the block tables, builds the FlashInfer-style paged metadata for the attention backend (on the
host: it is the plan's input), and computes logits only for the chunks that end in a sample.
On CUDA the token ids and positions go to the device through pinned memory, and a decode step
that fits a captured size replays a CUDA graph (:mod:`agentrt.engine.cuda_graph`); on the CPU
a decode step of a GGUF model is one C++ call (:mod:`agentrt.engine.cpu_step`).
"""

from __future__ import annotations

import torch

from agentrt.attention.base import AttentionBackend, AttentionMetadata
from agentrt.engine.cpu_step import CpuDecodeSteps
from agentrt.engine.cuda_graph import DecodeGraphs
from agentrt.models.llama import LlamaModel
from agentrt.scheduler.output import SchedulerOutput

__all__ = ["ModelRunner", "build_metadata"]


def build_metadata(out: SchedulerOutput, page_size: int) -> tuple[AttentionMetadata, torch.Tensor]:
    """Paged metadata for ``out`` plus the position of every flattened token."""
    qo, kv_ptr, last_len, pages, slots, positions = [0], [0], [], [], [], []
    for chunk in out.chunks:
        req, start = chunk.request, chunk.request.num_computed_tokens
        end = start + chunk.num_tokens
        used = -(-end // page_size)
        table = req.block_table[:used]
        pages.extend(table)
        qo.append(qo[-1] + chunk.num_tokens)
        kv_ptr.append(kv_ptr[-1] + used)
        last_len.append(end - (used - 1) * page_size)
        positions.extend(range(start, end))
        slots.extend(table[p // page_size] * page_size + p % page_size for p in range(start, end))
    i32 = torch.int32
    meta = AttentionMetadata(
        qo_indptr=torch.tensor(qo, dtype=i32),
        kv_indptr=torch.tensor(kv_ptr, dtype=i32),
        kv_indices=torch.tensor(pages, dtype=i32),
        kv_last_page_len=torch.tensor(last_len, dtype=i32),
        slot_mapping=torch.tensor(slots, dtype=torch.int64),
        page_size=page_size,
    )
    return meta, torch.tensor(positions, dtype=torch.int64)


class ModelRunner:
    def __init__(self, model: LlamaModel, backend: AttentionBackend, page_size: int,
                 device: str | torch.device = "cpu") -> None:
        self.model = model
        self.backend = backend
        self.page_size = page_size
        self.device = torch.device(device)
        self.graphs: DecodeGraphs | None = None
        """Captured decode steps (CUDA, unless ``enforce_eager``); None = all steps eager."""
        self.cpu_steps: CpuDecodeSteps | None = None
        """Decode steps as one C++ call (CPU, GGUF blocks, unless ``enforce_eager``)."""
        model.attn = backend

    def run(self, out: SchedulerOutput) -> torch.Tensor:
        """Forward ``out``; return float32 logits, one row per chunk that samples."""
        ids: list[int] = []
        sample_rows: list[int] = []
        for chunk in out.chunks:
            req = chunk.request
            ids.extend(req.token_ids[req.num_computed_tokens : req.num_computed_tokens +
                                     chunk.num_tokens])
            if chunk.samples:
                sample_rows.append(len(ids) - 1)
        meta, positions = build_metadata(out, self.page_size)
        input_ids = torch.tensor(ids, dtype=torch.int64)
        batch_size = self.graphs.padded_size(meta) if self.graphs is not None else None
        hidden = logits = None
        if batch_size is not None:
            hidden = self.graphs.run(input_ids, positions, meta, batch_size)
        elif self.cpu_steps is not None:
            hidden, logits = self.cpu_steps.run(input_ids, positions, meta) or (None, None)
        if hidden is None:
            self.backend.plan(meta)
            hidden = self.model.forward(self._to_device(input_ids), self._to_device(positions))
        if not sample_rows:
            return hidden.new_empty((0, 0), dtype=torch.float32)
        if len(sample_rows) != hidden.shape[0]:
            rows = self._to_device(torch.tensor(sample_rows))
            hidden, logits = hidden[rows], None if logits is None else logits[rows]
        return self.model.logits(hidden) if logits is None else logits

    def _to_device(self, t: torch.Tensor) -> torch.Tensor:
        """A host tensor on the model's device (pinned, then an asynchronous copy)."""
        if self.device.type == "cpu":
            return t
        return t.pin_memory().to(self.device, non_blocking=True)
