"""agentrt's forward pass for Gemma 3 text models (``Gemma3ForCausalLM``, gemma3 GGUF files).

The Llama-family decoder (:class:`~agentrt.models.llama.LlamaModel`) with Gemma's changes:
embeddings scaled by √hidden; RMSNorms that multiply by ``1 + weight`` (kept here as the
effective ``1 + weight``; a GGUF file stores that sum, and
:class:`~agentrt.models.gguf_file.GGUFFile` hands its norms back in Hugging Face's form);
per-head q/k RMSNorm; a norm after attention and one after the MLP as well as before each
(four per layer); a GELU-tanh gated MLP; attention scores scaled by
``query_pre_attn_scalar ** -0.5`` (the attention backend's ``scale``); sliding layers (five of
every six, ``layer_types``) attend within ``sliding_window`` tokens and rotate with their own
RoPE base (``rope_local_base_freq``, 10,000), global layers with ``rope_theta`` and its
scaling. (Gemma 3 has no logit soft-capping; Gemma 2, which has, is not this class.)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from agentrt.models.llama import LlamaModel, _fused, _Layer
from agentrt.models.ops import apply_rope, rms_norm
from agentrt.models.rope import rope_tables
from agentrt.models.weights import Weights

__all__ = ["Gemma3Model"]


@dataclass
class _GemmaLayer(_Layer):
    pre_mlp_norm: torch.Tensor | None = None
    post_mlp_norm: torch.Tensor | None = None


class Gemma3Model(LlamaModel):
    """Gemma 3's decoder on the Llama family's weights, linears and attention backends."""

    def __init__(self, config, weights: Weights, dtype: torch.dtype, fused_ops: bool = False,
                 device: str | torch.device = "cpu"):
        super().__init__(config, weights, dtype, False, device)  # NOTE: torch ops (1 + w)
        self._norm, self._rope = rms_norm, apply_rope

    def fit_context(self, max_model_len: int) -> None:
        super().fit_context(max_model_len)
        c = self.config
        cos, sin = rope_tables(c.head_dim, c.rope_local_theta or c.rope_theta, None,
                               c.max_position_embeddings, max_model_len)
        self.local_cos = cos.to(self.device, self.dtype)
        self.local_sin = sin.to(self.device, self.dtype)

    def _init_weights(self, w: Weights) -> None:
        c = self.config

        def norm(name: str) -> torch.Tensor:
            return 1.0 + w.tensor(name)

        self.embed = w.embedding("model.embed_tokens.weight")
        self.norm = norm("model.norm.weight")
        tied = c.tie_word_embeddings or "lm_head.weight" not in w
        self.lm_head = w.head("model.embed_tokens.weight" if tied else "lm_head.weight")
        self.layers = []
        for i in range(c.num_layers):
            p = f"model.layers.{i}."
            attn, mlp = p + "self_attn.", p + "mlp."
            self.layers.append(_GemmaLayer(
                input_norm=norm(p + "input_layernorm.weight"),
                qkv=_fused(w, attn, "qkv_proj", [f"{n}_proj" for n in "qkv"]),
                q_norm=norm(attn + "q_norm.weight"),
                k_norm=norm(attn + "k_norm.weight"),
                o_proj=w.linear([attn + "o_proj.weight"]),
                post_norm=norm(p + "post_attention_layernorm.weight"),
                gate_up=_fused(w, mlp, "gate_up_proj", ["gate_proj", "up_proj"]),
                down=w.linear([mlp + "down_proj.weight"]),
                pre_mlp_norm=norm(p + "pre_feedforward_layernorm.weight"),
                post_mlp_norm=norm(p + "post_feedforward_layernorm.weight"),
            ))

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        c = self.config
        x = self.embed(input_ids) * torch.tensor(c.hidden_size**0.5, dtype=self.dtype)
        tables = {None: (self.cos, self.sin), "local": (self.local_cos, self.local_sin)}
        rope = {k: (cos[positions].unsqueeze(1), sin[positions].unsqueeze(1))
                for k, (cos, sin) in tables.items()}
        windows = c.layer_windows or (None,) * c.num_layers
        for i, layer in enumerate(self.layers):
            cos, sin = rope[None if windows[i] is None else "local"]
            h = self._norm(x, layer.input_norm, self.eps)
            a = self._attention(i, layer, h, cos, sin)
            x = x + self._norm(a, layer.post_norm, self.eps)
            h = self._norm(x, layer.pre_mlp_norm, self.eps)
            x = x + self._norm(self._mlp(layer, h), layer.post_mlp_norm, self.eps)
        return self._norm(x, self.norm, self.eps)

    def _mlp(self, layer: _Layer, h: torch.Tensor) -> torch.Tensor:
        gate, up = layer.gate_up(h).chunk(2, dim=-1)
        return layer.down(F.gelu(gate, approximate="tanh") * up)
