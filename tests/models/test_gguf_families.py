"""GGUF files of the Llama, Mistral, Qwen2, Qwen3 and Phi-3 families, converted to float32
(``quantization="none"``), load and match HF transformers (their own block formats:
test_gguf_native.py).

Each case builds a small random model with transformers, writes it as a GGUF file the way
llama.cpp's converter does (gguf's tensor names, Q/K rows interleaved for llama, the default
model's tokenizer), and checks agentrt's engine on that file against the original model (F32
file) and against transformers' own GGUF loader on the same file (Q8_0 file).
"""

from __future__ import annotations

import pytest
import torch
from gguf_models import CASES, IDS, build, reference, tiny_tokenizer, write_gguf

from agentrt import Engine, SamplingParams
from agentrt.models.config import UnsupportedModelError


def run_engine(path):
    engine = Engine(str(path), dtype="float32", quantization="none", num_blocks=64,
                    max_num_batched_tokens=32)
    try:
        out = engine.generate(IDS, SamplingParams(max_tokens=6, ignore_eos=True, logprobs=0))
        return out, engine.core.model_config.architecture
    finally:
        engine.close()


pytestmark = pytest.mark.usefixtures("private_cache")  # see conftest.py


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_float_gguf_matches_the_model_it_came_from(case, tmp_path):
    hf, arch, name = build(case)
    out, architecture = run_engine(write_gguf(hf, tmp_path / f"{case}.gguf", arch, name))
    tokens, logits = reference(hf)
    assert architecture == CASES[case][1]
    assert out.token_ids == tokens
    first = out.token_ids[0]
    assert abs(out.logprobs[0][first] - float(logits[0, first])) < 1e-3


@pytest.mark.parametrize("case", ["llama", "phi3", "qwen2", "qwen3"])
def test_a_q8_0_gguf_matches_transformers_reading_the_same_file(case, tmp_path):
    import gguf
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    # NOTE: a 512-token vocabulary: with the default tokenizer's 49,152 strings, the peer's
    # reader and the tokenizer's conversion were most of each run (the float test above keeps
    # the default tokenizer for every family)
    hf, arch, name = build(case, vocab_size=512)
    q8_0 = gguf.GGMLQuantizationType.Q8_0
    path = write_gguf(hf, tmp_path / f"{case}-q8_0.gguf", arch, name, q8_0,
                      tokenizer=tiny_tokenizer)
    out, _ = run_engine(path)
    state = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=hf)["tensors"]
    missing, _ = hf.load_state_dict({k: torch.as_tensor(v) for k, v in state.items()},
                                    strict=False)
    assert set(missing) <= {"lm_head.weight"}  # tied heads are not in the file
    down = "model.layers.0.mlp.down_proj.weight"
    assert not torch.equal(hf.state_dict()[down],
                           build(case, vocab_size=512)[0].state_dict()[down])  # the peer
    # now runs the Q8_0 values
    tokens, logits = reference(hf)
    assert out.token_ids == tokens
    first = out.token_ids[0]
    assert abs(out.logprobs[0][first] - float(logits[0, first])) < 1e-3


def test_other_architectures_are_refused_clearly(tmp_path):
    import gguf
    import numpy as np

    path = tmp_path / "phi.gguf"
    writer = gguf.GGUFWriter(str(path), "phi2")
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(UnsupportedModelError, match="'phi2' is not supported.*qwen3"):
        Engine(str(path))
