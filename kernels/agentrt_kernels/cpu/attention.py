"""The ``cpu`` attention backend: the torch backend with decode rows done in C++.

Single-token queries (every decode row of a step) attend over the paged KV cache in one
kernel call per layer (:func:`agentrt_kernels.cpu.decode_ops.decode_attention`), with no
gather of the K and V slots into new tensors; prefill chunks keep torch's SDPA. A sliding
layer's rows come planned with their window's slots only (the last W keys of each row), so
the kernel reads no key outside the window and needs no window argument of its own.
"""

from __future__ import annotations

import torch

from agentrt.attention.torch_ref import TorchRefBackend
from agentrt_kernels.cpu.decode_ops import decode_attention

__all__ = ["CpuDecodeBackend"]


class CpuDecodeBackend(TorchRefBackend):
    """Paged attention: decode rows by agentrt's kernel, prefill by torch (the fallback too)."""

    name = "cpu"

    def decode_plan(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
        """The planned step's decode rows as :func:`decode_attention` takes them: ``(slots,
        lens, rows, max_len)`` (int64, contiguous), as layer 0 attends (its window's keys).

        Raises:
            RuntimeError: the planned step has no decode rows.
        """
        g = self._decode
        if g is None:
            raise RuntimeError("the planned step has no decode rows")
        return g.slots, g.lens, g.rows, g.max_len

    def _attend_decode(self, g, q, k_slots, v_slots, out) -> None:
        if not decode_attention(q, k_slots, v_slots, g.slots, g.lens, g.rows, g.max_len,
                                self.scale, out):
            super()._attend_decode(g, q, k_slots, v_slots, out)
