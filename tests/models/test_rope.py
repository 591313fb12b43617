"""RoPE tables against transformers' rotary embeddings, value for value.

Phi-3's ``longrope``: the short factors for an engine whose context fits the original one,
the long factors (and the attention factor) past it, as transformers picks them for a
sequence of that length.
"""

from __future__ import annotations

import torch

from agentrt.models.config import ModelConfig
from agentrt.models.rope import rope_tables

SHORT, LONG = [1.0 + 0.25 * i for i in range(8)], [2.0 + 3.0 * i for i in range(8)]


def test_longrope_tables_are_transformers_short_and_long_ones(tmp_path):
    from transformers import Phi3Config
    from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

    hf = Phi3Config(hidden_size=64, num_attention_heads=4, max_position_embeddings=512,
                    original_max_position_embeddings=64, pad_token_id=None,
                    architectures=["Phi3ForCausalLM"], rope_scaling={
                        "rope_type": "longrope", "short_factor": SHORT, "long_factor": LONG})
    hf.save_pretrained(tmp_path)
    c = ModelConfig.from_folder(tmp_path)
    rotary = Phi3RotaryEmbedding(hf)
    tables = {}
    for context in (64, 512):  # transformers picks by the sequence's length
        cos, sin = rope_tables(c.head_dim, c.rope_theta, c.rope_scaling,
                               c.max_position_embeddings, context)
        want_cos, want_sin = rotary(torch.zeros(1), torch.arange(context)[None])
        assert torch.equal(cos[:context], want_cos[0]) and torch.equal(sin[:context], want_sin[0])
        tables[context] = cos[:64]
    assert not torch.allclose(tables[64], tables[512], atol=1e-3)  # short and long differ
    assert abs(float(tables[512][0, 0]) - (1 + torch.log(torch.tensor(8.0)).item()
                                           / torch.log(torch.tensor(64.0)).item()) ** 0.5) < 1e-6
