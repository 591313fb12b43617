"""RoPE scaling written as GGUF metadata: llama.cpp's converter writes a ``linear`` or ``yarn``
scaling as ``{arch}.rope.scaling.type`` / ``.factor`` / ``.original_context_length`` and, for
YaRN, whichever of ``yarn_beta_fast`` / ``yarn_beta_slow`` / ``yarn_attn_factor`` the model
sets. Read wrongly or not at all, such a file runs plain RoPE: silently wrong past the
original context.

Each file comes from a random transformers model with that ``rope_scaling`` (a llama with
``linear``, a Qwen2 with ``yarn``; original context 32, so the 100-token prompt runs well past
it), written by ``gguf_models`` the way the converter writes it. agentrt must give that model's
greedy tokens and logprobs, in the file's Q8_0 blocks and converted to float32
(``quantization="none"``). Broken or unknown scalings: test_gguf_hostile.py.
"""

from __future__ import annotations

import pytest
import torch
from gguf_models import IDS, KQUANT_SIZED, build, reference, tiny_tokenizer, write_gguf

from agentrt import Engine, SamplingParams
from agentrt.models.gguf_file import GGUFFile
from agentrt.models.rope import rope_tables

SCALINGS = {  # case: (transformers family, rope_scaling)
    "linear": ("llama", {"rope_type": "linear", "factor": 4.0}),
    "yarn": ("qwen2", {"rope_type": "yarn", "factor": 4.0,
                       "original_max_position_embeddings": 32}),
    "yarn_tuned": ("qwen2", {"rope_type": "yarn", "factor": 8.0,
                             "original_max_position_embeddings": 32, "beta_fast": 16.0,
                             "beta_slow": 2.0, "attention_factor": 1.5}),
}
SHARP = 0.1
"""initializer_range: peaked attention, so positions matter (see test_gguf_llama3.py)."""
IDS_SMALL = [i % 500 for i in IDS]  # the tiny tokenizer's 512 tokens

pytestmark = pytest.mark.usefixtures("private_cache")  # see conftest.py


def write(case: str, path, fmt: str | None = None):
    """The random model of ``case`` and its GGUF file (``fmt`` blocks, the model synced)."""
    import gguf

    family, scaling = SCALINGS[case]
    hf, arch, name = build(family, **KQUANT_SIZED, rope_scaling=dict(scaling),
                           initializer_range=SHARP)
    qtype = gguf.GGMLQuantizationType[fmt] if fmt else None
    return hf, write_gguf(hf, path, arch, name, qtype, sync=qtype is not None,
                          tokenizer=tiny_tokenizer)


@pytest.mark.parametrize("case", sorted(SCALINGS))
def test_the_metadata_gives_transformers_rope_scaling_and_tables(case, tmp_path):
    """The config names the model's scaling, and its tables are transformers' (the attention
    factor and both betas included)."""
    hf, path = write(case, tmp_path / f"{case}.gguf")
    scaling = GGUFFile(path).config["rope_scaling"]
    assert scaling == SCALINGS[case][1]
    cos, sin = rope_tables(64, 10000.0, scaling, 512)
    rotary = hf.model.rotary_emb
    hf_cos, hf_sin = rotary(torch.zeros(1, dtype=torch.float32), torch.arange(512)[None])
    torch.testing.assert_close(cos, hf_cos[0], rtol=0, atol=1e-4)
    torch.testing.assert_close(sin, hf_sin[0], rtol=0, atol=1e-4)


@pytest.mark.parametrize("fmt", ["Q8_0", None])
@pytest.mark.parametrize("case", sorted(SCALINGS))
def test_a_scaled_file_matches_the_model_it_came_from(case, fmt, tmp_path):
    """Past the original context: in the file's Q8_0 blocks, and as float32."""
    hf, path = write(case, tmp_path / f"{case}.gguf", fmt)
    options = {} if fmt else dict(dtype="float32", quantization="none")
    engine = Engine(str(path), num_blocks=64, max_num_batched_tokens=64, **options)
    try:
        out = engine.generate(IDS_SMALL, SamplingParams(max_tokens=6, ignore_eos=True,
                                                        logprobs=0))
        scaling = engine.core.model_config.rope_scaling
    finally:
        engine.close()
    tokens, logprobs = reference(hf, IDS_SMALL)
    assert out.token_ids == tokens
    tolerance = 1e-3 if fmt else 1e-4  # the Q8_0 kernels quantize activations too
    for step, token in enumerate(tokens):
        assert abs(out.logprobs[step][token] - float(logprobs[step, token])) < tolerance
    assert scaling == {**SCALINGS[case][1], "rope_theta": 10000.0}
