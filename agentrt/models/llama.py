"""agentrt's own forward pass for the Llama family (Llama, Mistral, Qwen2, Qwen3).

Pre-norm decoder: RMSNorm → fused QKV projection (+bias for Qwen2, per-head q/k RMSNorm for
Qwen3) → RoPE → paged attention through the backend → output projection → residual; RMSNorm →
SwiGLU MLP (fused gate/up) → residual. Tokens of all sequences in a step are flattened into
one (T, hidden) batch, so every matmul serves the whole batch; only attention needs to know
where sequences begin, and it gets that from the backend's plan.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from agentrt.attention.base import AttentionBackend
from agentrt.models.config import ModelConfig
from agentrt.models.rope import apply_rope, rope_tables

__all__ = ["LlamaModel"]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm computed in float32, as the reference implementations do."""
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


class SmallBatchLinear:
    """``h @ weight.T`` with a oneDNN-prepacked copy of ``weight`` for decode-sized batches.

    NOTE: for 2..32 rows, CPU GEMM on a plain weight re-packs the whole weight on every call,
    which makes a batch-8 step stream the weights about twice; a weight packed once at load
    time (``torch.ops.mkldnn._reorder_linear_weight``) avoids that. One row (a GEMV) and
    prefill-sized inputs use ``F.linear`` on the plain weight. Falls back to ``F.linear`` when
    oneDNN is unavailable.
    """

    MIN_ROWS, MAX_ROWS = 2, 32

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        self.weight, self.bias = weight, bias
        self.packed = _pack(weight) if weight.dtype == torch.float32 else None

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        if self.packed is not None and self.MIN_ROWS <= h.shape[0] <= self.MAX_ROWS:
            return torch.ops.mkldnn._linear_pointwise(h, self.packed, self.bias, "none", [], "")
        return F.linear(h, self.weight, self.bias)


def _pack(weight: torch.Tensor) -> torch.Tensor | None:
    try:
        if not torch.backends.mkldnn.is_available():
            return None
        return torch.ops.mkldnn._reorder_linear_weight(weight, 8)
    except (RuntimeError, AttributeError):
        return None


@dataclass
class _Layer:
    input_norm: torch.Tensor
    qkv: SmallBatchLinear  # (q + 2 kv, hidden), + bias for Qwen2
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None
    o_proj: SmallBatchLinear
    post_norm: torch.Tensor
    gate_up: SmallBatchLinear  # (2 * intermediate, hidden)
    down: SmallBatchLinear


class LlamaModel:
    """Weights plus the forward pass; attention goes through an :class:`AttentionBackend`."""

    def __init__(self, config: ModelConfig, weights: dict[str, torch.Tensor], dtype: torch.dtype):
        self.config = config
        self.dtype = dtype
        self._init_weights(weights)
        cos, sin = rope_tables(
            config.head_dim, config.rope_theta, config.rope_scaling, config.max_position_embeddings
        )
        self.cos, self.sin = cos.to(dtype), sin.to(dtype)
        self.attn: AttentionBackend | None = None

    def _init_weights(self, w: dict[str, torch.Tensor]) -> None:
        c = self.config

        def get(name: str) -> torch.Tensor:
            return w[name].to(self.dtype).contiguous()

        def opt(name: str) -> torch.Tensor | None:
            return get(name) if name in w else None

        self.embed = get("model.embed_tokens.weight")
        self.norm = get("model.norm.weight")
        tied = c.tie_word_embeddings or "lm_head.weight" not in w
        self.lm_head = SmallBatchLinear(self.embed if tied else get("lm_head.weight"))
        self.layers = []
        for i in range(c.num_layers):
            p = f"model.layers.{i}."
            attn, mlp = p + "self_attn.", p + "mlp."
            qkv_b = [opt(attn + f"{n}_proj.bias") for n in "qkv"]
            self.layers.append(_Layer(
                input_norm=get(p + "input_layernorm.weight"),
                qkv=SmallBatchLinear(
                    torch.cat([get(attn + f"{n}_proj.weight") for n in "qkv"]),
                    torch.cat(qkv_b) if all(b is not None for b in qkv_b) else None),
                q_norm=opt(attn + "q_norm.weight"),
                k_norm=opt(attn + "k_norm.weight"),
                o_proj=SmallBatchLinear(get(attn + "o_proj.weight")),
                post_norm=get(p + "post_attention_layernorm.weight"),
                gate_up=SmallBatchLinear(
                    torch.cat([get(mlp + "gate_proj.weight"), get(mlp + "up_proj.weight")])),
                down=SmallBatchLinear(get(mlp + "down_proj.weight")),
            ))

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Hidden states (T, hidden) after the final norm for flattened tokens ``input_ids``.

        The attention backend must have been planned for this step.
        """
        x = F.embedding(input_ids, self.embed)
        cos, sin = self.cos[positions].unsqueeze(1), self.sin[positions].unsqueeze(1)
        for i, layer in enumerate(self.layers):
            x = x + self._attention(i, layer, rms_norm(x, layer.input_norm, self.eps), cos, sin)
            x = x + self._mlp(layer, rms_norm(x, layer.post_norm, self.eps))
        return rms_norm(x, self.norm, self.eps)

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
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        out = self.attn.forward(i, q, k, v.contiguous())  # (T, H, D)
        return layer.o_proj(out.reshape(t, q_size))

    def _mlp(self, layer: _Layer, h: torch.Tensor) -> torch.Tensor:
        gate, up = layer.gate_up(h).chunk(2, dim=-1)
        return layer.down(F.silu(gate) * up)
