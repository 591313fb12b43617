"""Llama 3.1+ GGUF files: llama.cpp's converter writes the ``llama3`` RoPE scaling as a
``rope_freqs`` vector, one factor per frequency, that llama.cpp divides each frequency by.

Each file comes from a random transformers Llama with ``rope_type: llama3`` (factor 8, low 1,
high 4, original context 64: heads of 16 and of 64 both have frequencies in each of the three
bands), written by ``gguf_models`` the way the converter writes it. agentrt must give that
model's greedy tokens and logprobs over 100 prompt tokens, past the original context where the
scaling changes every low frequency: converted to float32 (``quantization="none"``) and in the
file's own blocks. Broken vectors: test_gguf_hostile.py.
"""

from __future__ import annotations

import pytest
import torch
from gguf_models import IDS, KQUANT_SIZED, build, reference, tiny_tokenizer, write_gguf

from agentrt import Engine, SamplingParams
from agentrt.models.gguf_file import GGUFFile
from agentrt.models.rope import rope_tables

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
SHARP = 0.1
"""initializer_range: weights 5x transformers' default, so attention is peaked enough for the
positions to matter (with plain RoPE in place of the factors the greedy tokens change at the
first step; at 0.02 the logprobs moved by only 1e-3)."""
IDS_SMALL = [i % 500 for i in IDS]  # the tiny tokenizer's 512 tokens

pytestmark = pytest.mark.usefixtures("private_cache")  # see conftest.py


def generate(path, ids: list[int], **options):
    """Greedy tokens and each step's logprobs, and the engine's RoPE scaling."""
    engine = Engine(str(path), num_blocks=64, **options)
    try:
        out = engine.generate(ids, SamplingParams(max_tokens=6, ignore_eos=True, logprobs=0))
        return out, engine.core.model_config.rope_scaling
    finally:
        engine.close()


def check(out, hf, ids: list[int], tolerance: float) -> None:
    tokens, logprobs = reference(hf, ids)
    assert out.token_ids == tokens
    for step, token in enumerate(tokens):
        assert abs(out.logprobs[step][token] - float(logprobs[step, token])) < tolerance


def test_rope_freqs_give_transformers_llama3_tables(tmp_path):
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    hf, arch, name = build("llama", **KQUANT_SIZED, rope_scaling=dict(LLAMA3))
    path = write_gguf(hf, tmp_path / "llama3.gguf", arch, name, tokenizer=tiny_tokenizer)
    scaling = GGUFFile(path).config["rope_scaling"]
    factors = scaling["short_factor"]
    assert scaling["long_factor"] == factors and len(factors) == 32  # a head of 64
    assert factors[0] == 1.0 and factors[-1] == 8.0 and any(1 < f < 8 for f in factors)
    cos, sin = rope_tables(64, 10000.0, scaling, 512)
    positions = torch.arange(512)[None]
    hf_cos, hf_sin = LlamaRotaryEmbedding(hf.config)(torch.zeros(1, dtype=torch.float32),
                                                     positions)
    torch.testing.assert_close(cos, hf_cos[0], rtol=0, atol=1e-4)
    torch.testing.assert_close(sin, hf_sin[0], rtol=0, atol=1e-4)


def test_a_float_llama3_file_matches_the_model_it_came_from(tmp_path):
    """Heads of 16: 1 factor at 1, 2 between, 5 at 8."""
    hf, arch, name = build("llama", rope_scaling=dict(LLAMA3), initializer_range=SHARP)
    path = write_gguf(hf, tmp_path / "llama3.gguf", arch, name)
    out, scaling = generate(path, IDS, dtype="float32", quantization="none",
                            max_num_batched_tokens=32)
    assert scaling["rope_type"] == "longrope"
    check(out, hf, IDS, 1e-4)  # float32 both: measured 1e-6


@pytest.mark.parametrize("fmt", ["Q8_0", "Q4_K"])
def test_a_llama3_file_in_its_own_blocks_matches_transformers(fmt, tmp_path):
    import gguf

    hf, arch, name = build("llama", **KQUANT_SIZED, rope_scaling=dict(LLAMA3),
                           initializer_range=SHARP)
    path = write_gguf(hf, tmp_path / "llama3.gguf", arch, name,
                      gguf.GGMLQuantizationType[fmt], sync=True, tokenizer=tiny_tokenizer)
    out, _ = generate(path, IDS_SMALL, max_num_batched_tokens=64)
    check(out, hf, IDS_SMALL, 1e-3)
