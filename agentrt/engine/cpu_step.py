"""Decode steps as one C++ call on the CPU: the CPU's counterpart of :mod:`.cuda_graph`.

A decode step of a small model on the CPU is a few hundred kernel calls, and their dispatch
from Python costs as much as a third of the step (SmolLM2-135M at batch 1). When every linear
layer runs a GGUF file's own blocks on agentrt's kernels and attention is the ``cpu`` backend,
:class:`CpuDecodeSteps` hands each decode-only step (every sequence one new token) to
:class:`agentrt_kernels.cpu.decode_step.DecodeStep`, which runs the same kernels in the same
order in C++, the output head included where its weight is GGUF blocks too. Prefill and
mixed steps, larger batches than the linear kernels take at once, mixture-of-experts models
(the C step has no router) and any other model run the Python forward pass.
``EngineConfig(enforce_eager=True)`` turns it off. Each step's team of
threads is sized by a :class:`~agentrt.engine.cpu_threads.ThreadGovernor` (fewer threads while
other processes take cores) unless ``EngineConfig(cpu_decode_threads="fixed")``.
"""

from __future__ import annotations

import torch

from agentrt.attention.base import AttentionBackend, AttentionMetadata
from agentrt.engine.cpu_threads import ThreadGovernor
from agentrt.models.llama import LlamaModel

__all__ = ["CpuDecodeSteps"]


class CpuDecodeSteps:
    """Runs decode-only steps of ``model`` through one C++ call; see the module docs."""

    def __init__(self, model: LlamaModel, backend: AttentionBackend, step, max_tokens: int,
                 governor: ThreadGovernor | None = None) -> None:
        self.model, self.backend, self.step = model, backend, step
        self.max_tokens = max_tokens
        """The most tokens (sequences) one call takes; larger steps run in Python."""
        self.governor = governor
        """Sizes each step's team of threads; None: always ``torch.get_num_threads()``."""
        self.num_steps = 0
        """Decode steps this ran."""
        self._usage = torch.zeros(1, dtype=torch.float64)

    @classmethod
    def build(cls, model: LlamaModel, backend: AttentionBackend, *, adaptive_threads: bool = True
              ) -> CpuDecodeSteps | None:
        """The runner, or None where it cannot run: a model off the CPU or not in float32, a
        mixture-of-experts model (its experts run in Python), an attention backend other than
        ``cpu``, a linear layer that is not GGUF blocks on the C
        kernels, or kernels that are not built here. ``adaptive_threads``: size each step's
        team with a :class:`ThreadGovernor` (else always the whole team). Layers of different
        windows (Gemma 3's sliding and global ones) or a decoder other than the Llama family's
        run in Python too."""
        if model.device.type != "cpu" or model.dtype != torch.float32 or backend.name != "cpu":
            return None
        if len(set(backend.windows)) > 1 or type(model) is not LlamaModel:
            return None
        if any(layer.moe is not None for layer in model.layers):
            return None  # NOTE: the C step has no router: mixture-of-experts models run Python
        from agentrt_kernels.cpu.decode_step import DecodeStep, LayerWeights
        from agentrt_kernels.cpu.gguf_linear import MAX_KERNEL_ROWS

        c = model.config
        layers = []
        for i, layer in enumerate(model.layers):
            k_slots, v_slots = backend.kv.layer_slots(i)
            layers.append(LayerWeights(
                input_norm=layer.input_norm, post_norm=layer.post_norm, q_norm=layer.q_norm,
                k_norm=layer.k_norm, qkv=layer.qkv, o=layer.o_proj, gate_up=layer.gate_up,
                down=layer.down, k_slots=k_slots, v_slots=v_slots))
        step = DecodeStep.build(layers, model.norm, heads=c.num_heads, kv_heads=c.num_kv_heads,
                                head_dim=c.head_dim, eps=model.eps, scale=backend.scale,
                                head=model.lm_head)
        if step is None:
            return None
        return cls(model, backend, step, MAX_KERNEL_ROWS,
                   ThreadGovernor() if adaptive_threads else None)

    def run(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata
            ) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        """``(hidden, logits)``: the hidden states (T, hidden) after the final norm, like
        ``model.forward``, and the float32 logits (T, vocab) where the step ran the output head
        (else None: ``model.logits`` is the caller's); None (nothing done, nothing planned)
        unless every sequence of the step has exactly one new token and there are at most
        :attr:`max_tokens` of them."""
        t = input_ids.numel()
        if t == 0 or t > self.max_tokens or meta.num_seqs != t:
            return None
        self.backend.plan(meta)
        slots, lens, rows, max_len = self.backend.decode_plan()
        x = self.model.embed(input_ids).to(torch.float32).contiguous()
        cos = self.model.cos[positions].contiguous()
        sin = self.model.sin[positions].contiguous()
        limit = torch.get_num_threads()
        threads = limit if self.governor is None else self.governor.team(limit)
        if self._usage.numel() < 1 + 2 * threads:
            self._usage = torch.zeros(1 + 2 * threads, dtype=torch.float64)
        usage = None if self.governor is None else self._usage
        logits = None if self.step.vocab is None else torch.empty(t, self.step.vocab)
        hidden = self.step.run(x, cos, sin, meta.slot_mapping, slots, lens, rows, max_len,
                               logits=logits, num_threads=threads, usage=usage)
        if usage is not None:
            u = usage[:1 + 2 * threads].tolist()
            self.governor.observe(u[0], u[1::2], u[2::2])
        self.num_steps += 1
        return hidden, logits
