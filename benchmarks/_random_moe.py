"""The random-weight mixture-of-experts model of ``make_gguf.py --models moe``: a ``qwen3moe``
file of about 1.3B parameters of which about 0.3B are active per token.

Shape (Qwen3-30B-A3B's proportions, smaller): hidden 1024, 16 layers, 16 heads / 4 KV heads of
64, QK-norm, 32 experts of 768 per layer, 6 used per token (renormalised), untied output head,
SmolLM2's vocabulary and tokenizer (so prompts tokenize). Weights are normal with std 0.02
(seed 0), norms ones; the routers (``ffn_gate_inp``) stay F32 as llama.cpp's converter and
quantizer keep them. Active per token: attention, router, 6 of 32 experts per layer and the
output head.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["RandomMoE"]


@dataclass(frozen=True)
class RandomMoE:
    """Shape of the random-weight Qwen3-MoE model (vocabulary: SmolLM2's)."""

    hidden_size: int = 1024
    num_layers: int = 16
    num_heads: int = 16
    num_kv_heads: int = 4
    head_dim: int = 64
    num_experts: int = 32
    num_experts_per_tok: int = 6
    moe_intermediate_size: int = 768
    std: float = 0.02
    seed: int = 0
    arch: str = "qwen3moe"

    @property
    def name(self) -> str:
        total, active = self.num_params(49152), self.active_params(49152)
        return f"random-qwen3moe-{total / 1e9:.1f}b-a{active / 1e9:.1f}b"

    def shapes(self, vocab_size: int) -> dict[str, tuple[int, ...]]:
        """GGUF tensor name -> numpy shape, outermost first (experts, out, in)."""
        h, d, e, f = self.hidden_size, self.head_dim, self.num_experts, self.moe_intermediate_size
        q, kv = self.num_heads * d, self.num_kv_heads * d
        shapes: dict[str, tuple[int, ...]] = {"token_embd.weight": (vocab_size, h)}
        for i in range(self.num_layers):
            for name, shape in (("attn_norm", (h,)), ("attn_q", (q, h)), ("attn_q_norm", (d,)),
                                ("attn_k", (kv, h)), ("attn_k_norm", (d,)), ("attn_v", (kv, h)),
                                ("attn_output", (h, q)), ("ffn_norm", (h,)),
                                ("ffn_gate_inp", (e, h)), ("ffn_gate_exps", (e, f, h)),
                                ("ffn_up_exps", (e, f, h)), ("ffn_down_exps", (e, h, f))):
                shapes[f"blk.{i}.{name}.weight"] = shape
        shapes["output_norm.weight"] = (h,)
        shapes["output.weight"] = (vocab_size, h)
        return shapes

    def is_float32(self, name: str, shape: tuple[int, ...]) -> bool:
        """Kept F32 in the float file: norms and routers."""
        return len(shape) == 1 or "ffn_gate_inp" in name

    def num_params(self, vocab_size: int) -> int:
        return sum(math.prod(s) for s in self.shapes(vocab_size).values())

    def active_params(self, vocab_size: int) -> int:
        """Parameters one token's step reads: all but the unused experts and the embedding
        table (one row of it)."""
        expert = 3 * self.hidden_size * self.moe_intermediate_size
        unused = self.num_layers * (self.num_experts - self.num_experts_per_tok) * expert
        return self.num_params(vocab_size) - unused - vocab_size * self.hidden_size

    def write_header(self, writer, vocab_size: int) -> None:
        """The qwen3moe metadata llama.cpp's converter writes."""
        import gguf

        writer.add_name(f"{self.name} (random weights, std {self.std}, seed {self.seed})")
        writer.add_context_length(8192)
        writer.add_embedding_length(self.hidden_size)
        writer.add_block_count(self.num_layers)
        writer.add_feed_forward_length(self.moe_intermediate_size)
        writer.add_head_count(self.num_heads)
        writer.add_head_count_kv(self.num_kv_heads)
        writer.add_key_length(self.head_dim)
        writer.add_value_length(self.head_dim)
        writer.add_rope_freq_base(1000000.0)
        writer.add_layer_norm_rms_eps(1e-6)
        writer.add_expert_count(self.num_experts)
        writer.add_expert_used_count(self.num_experts_per_tok)
        writer.add_expert_feed_forward_length(self.moe_intermediate_size)
        writer.add_vocab_size(vocab_size)
        writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
