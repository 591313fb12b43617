"""agentrt's own forward pass for the Llama family (Llama, Mistral, Qwen2, Qwen3, Phi-3; the
mixture-of-experts Qwen2-MoE and Qwen3-MoE, whose sparse layers' MLP is :mod:`.moe`).

Pre-norm decoder: RMSNorm → fused QKV projection (+bias for Qwen2, per-head q/k RMSNorm for
Qwen3) → RoPE → paged attention through the backend → output projection → residual; RMSNorm →
SwiGLU MLP (fused gate/up) → residual. Tokens of all sequences in a step are flattened into
one (T, hidden) batch, so every matmul serves the whole batch; only attention needs to know
where sequences begin, and it gets that from the backend's plan. Phi-3 is this decoder with
its Q/K/V rows and gate/up rows stored fused (``qkv_proj``, ``gate_up_proj``): those weights
are the fused layers as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agentrt.attention.base import AttentionBackend
from agentrt.models.config import ModelConfig
from agentrt.models.linear import Linear
from agentrt.models.moe import MoEBlock, build_moe
from agentrt.models.ops import add_rms_norm, apply_rope, rms_norm, silu_mul
from agentrt.models.rope import rope_tables
from agentrt.models.weights import Weights

__all__ = ["INITIAL_CONTEXT", "LlamaModel"]

INITIAL_CONTEXT = 8192
"""Positions of a new model's RoPE tables, where the config allows as many; the engine refits
them to its own context (:meth:`LlamaModel.fit_context`)."""


@dataclass
class _Layer:
    input_norm: torch.Tensor
    qkv: Linear  # (q + 2 kv, hidden), + bias for Qwen2
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None
    o_proj: Linear
    post_norm: torch.Tensor
    gate_up: Linear | None  # (2 * intermediate, hidden); None in a mixture-of-experts layer
    down: Linear | None
    moe: MoEBlock | None = None  # the experts that replace gate_up/down in a sparse layer


class LlamaModel:
    """Weights plus the forward pass; attention goes through an :class:`AttentionBackend`."""

    def __init__(self, config: ModelConfig, weights: Weights, dtype: torch.dtype,
                 fused_ops: bool = False, device: str | torch.device = "cpu"):
        """``weights`` decides each layer's form (:class:`~agentrt.models.weights.FloatWeights`
        in ``dtype``, or :class:`~agentrt.models.gguf_weights.GGUFWeights`, a GGUF file's own
        blocks); activations are ``dtype``. The RoPE tables are built for a context of
        ``max_position_embeddings`` tokens, at most :data:`INITIAL_CONTEXT`, until
        :meth:`fit_context` says otherwise (a file claiming 2**24 positions would otherwise
        take gigabytes of tables before the engine sizes its context)."""
        self.config = config
        self.dtype = dtype
        self.device = torch.device(device)
        self._norm, self._add_norm, self._rope = rms_norm, add_rms_norm, apply_rope
        self._silu_mul = silu_mul
        if fused_ops:  # one C++ call each instead of several torch ops (agentrt_kernels.cpu)
            from agentrt_kernels.cpu import decode_ops as ops

            self._norm, self._add_norm = ops.rms_norm, ops.add_rms_norm_
            self._rope, self._silu_mul = ops.apply_rope_, ops.silu_mul
        self._init_weights(weights)
        self.fit_context(min(config.max_position_embeddings, INITIAL_CONTEXT))
        self.attn: AttentionBackend | None = None

    def fit_context(self, max_model_len: int) -> None:
        """Build the RoPE tables for an engine whose longest sequence is ``max_model_len``
        tokens: one row per position it can use (a 128k-context model in a short engine keeps
        short tables), and a variant that depends on it (Phi-3's ``longrope``: short factors
        up to its original context, long ones past it) is chosen by it. The engine calls this
        once it knows its context (after sizing the KV cache), before the first step."""
        c = self.config
        cos, sin = rope_tables(c.head_dim, c.rope_theta, c.rope_scaling,
                               c.max_position_embeddings, max_model_len)
        self.cos, self.sin = cos.to(self.device, self.dtype), sin.to(self.device, self.dtype)

    def _init_weights(self, w: Weights) -> None:
        c = self.config

        def opt(name: str) -> torch.Tensor | None:
            return w.tensor(name) if name in w else None

        self.embed = w.embedding("model.embed_tokens.weight")
        self.norm = w.tensor("model.norm.weight")
        tied = c.tie_word_embeddings or "lm_head.weight" not in w
        self.lm_head = w.head("model.embed_tokens.weight" if tied else "lm_head.weight")
        self.layers = []
        for i in range(c.num_layers):
            p = f"model.layers.{i}."
            attn, mlp = p + "self_attn.", p + "mlp."
            sparse = c.moe is not None and i in c.moe.sparse_layers
            self.layers.append(_Layer(
                input_norm=w.tensor(p + "input_layernorm.weight"),
                qkv=_fused(w, attn, "qkv_proj", [f"{n}_proj" for n in "qkv"]),
                q_norm=opt(attn + "q_norm.weight"),
                k_norm=opt(attn + "k_norm.weight"),
                o_proj=w.linear([attn + "o_proj.weight"]),
                post_norm=w.tensor(p + "post_attention_layernorm.weight"),
                gate_up=None if sparse else _fused(w, mlp, "gate_up_proj",
                                                   ["gate_proj", "up_proj"]),
                down=None if sparse else w.linear([mlp + "down_proj.weight"]),
                moe=build_moe(w, mlp, c.moe, self._silu_mul) if sparse else None,
            ))

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Hidden states (T, hidden) after the final norm for flattened tokens ``input_ids``.

        The attention backend must have been planned for this step.
        """
        x = self.embed(input_ids)  # the residual stream
        cos, sin = self.cos[positions].unsqueeze(1), self.sin[positions].unsqueeze(1)
        h = self._norm(x, self.layers[0].input_norm, self.eps)
        next_norms = [layer.input_norm for layer in self.layers[1:]] + [self.norm]
        for i, (layer, next_norm) in enumerate(zip(self.layers, next_norms, strict=True)):
            x, h = self._add_norm(x, self._attention(i, layer, h, cos, sin), layer.post_norm,
                                  self.eps)
            x, h = self._add_norm(x, self._mlp(layer, h), next_norm, self.eps)
        return h

    @torch.inference_mode()
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Float32 logits (N, vocab) for the rows of ``hidden`` that need sampling."""
        return self.lm_head(hidden).float()

    @property
    def eps(self) -> float:
        return self.config.rms_norm_eps

    def _attention(self, i: int, layer: _Layer, h: torch.Tensor, cos, sin) -> torch.Tensor:
        c = self.config
        t = h.shape[0]
        qkv = layer.qkv(h)
        q_size, kv_size = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
        q = qkv[:, :q_size].view(t, c.num_heads, c.head_dim)
        k = qkv[:, q_size : q_size + kv_size].view(t, c.num_kv_heads, c.head_dim)
        v = qkv[:, q_size + kv_size :].view(t, c.num_kv_heads, c.head_dim)
        if layer.q_norm is not None:
            q, k = rms_norm(q, layer.q_norm, self.eps), rms_norm(k, layer.k_norm, self.eps)
        q, k = self._rope(q, cos, sin), self._rope(k, cos, sin)
        out = self.attn.forward(i, q, k, v.contiguous())  # (T, H, D)
        return layer.o_proj(out.reshape(t, q_size))

    def _mlp(self, layer: _Layer, h: torch.Tensor) -> torch.Tensor:
        if layer.moe is not None:
            return layer.moe(h)
        return layer.down(self._silu_mul(layer.gate_up(h)))


def _fused(w: Weights, prefix: str, fused: str, parts: list[str]) -> Linear:
    """The layer stored fused as ``prefix + fused`` (Phi-3), else made of ``parts`` in order."""
    names = [fused] if prefix + fused + ".weight" in w else parts
    return w.linear([prefix + n + ".weight" for n in names], [prefix + n + ".bias" for n in names])
