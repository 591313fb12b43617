"""Gemma 3 text: a tiny random Gemma3ForCausalLM (a sliding and a global layer, window 8,
random norm weights, query_pre_attn_scalar unlike head_dim, separate RoPE bases) matches
transformers' greedy tokens and every step's logprob past the window, as an HF folder."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from agentrt import Engine, SamplingParams

WINDOW = 8
TEMPLATES = Path(__file__).parents[1] / "chat" / "templates"
PROMPT = list(range(100, 166, 3))  # 22 tokens
GEMMA = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=24,
             max_position_embeddings=512, vocab_size=49152, sliding_window=WINDOW,
             layer_types=["sliding_attention", "full_attention"], rope_theta=1e6,
             rope_local_base_freq=10000.0)


def random_gemma3(**config):
    """A random Gemma 3 model whose norms are not the (1 + 0) transformers initializes."""
    import transformers

    torch.manual_seed(0)
    hf = transformers.Gemma3ForCausalLM(transformers.Gemma3TextConfig(**{**GEMMA, **config}))
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith("norm.weight"):
                p.normal_(0.0, 0.3)
    return hf.eval()


def hf_steps(hf, prompt: list[int], new: list[int]) -> list[torch.Tensor]:
    with torch.inference_mode():
        logits = hf(torch.tensor([prompt + new])).logits[0].float().log_softmax(-1)
    return [logits[len(prompt) - 1 + i] for i in range(len(new))]


def check_engine(path, hf, steps: int = 6, tol: float = 1e-4, **options) -> None:
    small = Engine(str(path), num_blocks=32, block_size=4, max_num_batched_tokens=8,
                   profile_on_start=False, **options)
    try:
        assert small.core.backend.windows == (WINDOW, None)
        out = small.generate(PROMPT, SamplingParams(max_tokens=steps, ignore_eos=True,
                                                    logprobs=0))
    finally:
        small.close()
    want = hf_steps(hf, PROMPT, out.token_ids)
    assert out.token_ids == [int(s.argmax()) for s in want]
    for token, got, ref in zip(out.token_ids, out.logprobs, want, strict=True):
        assert abs(got[token] - float(ref[token])) < tol


@pytest.fixture(scope="module")
def gemma_folder(tmp_path_factory, engine):
    folder = tmp_path_factory.mktemp("tiny-gemma3")
    hf = random_gemma3()
    hf.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(engine.core.model_path / name, folder / name)
    shutil.copy(TEMPLATES / "gemma3.jinja", folder / "chat_template.jinja")  # Gemma's own
    import transformers

    return folder, transformers.Gemma3ForCausalLM.from_pretrained(
        folder, attn_implementation="eager").eval()


def test_a_gemma3_folder_matches_transformers_past_the_window(gemma_folder):
    folder, hf = gemma_folder
    check_engine(folder, hf, dtype="float32")


def test_the_config_reads_gemma_s_layer_types_bases_and_scale(gemma_folder):
    from agentrt.models.config import ModelConfig

    c = ModelConfig.from_folder(gemma_folder[0])
    assert c.layer_windows == (WINDOW, None)
    assert (c.rope_theta, c.rope_local_theta) == (1e6, 10000.0)
    assert c.attn_scale == 24**-0.5


def test_the_folder_renders_gemma_s_turns(gemma_folder):
    from agentrt.chat.template import render_prompt
    from agentrt.models import load_tokenizer

    prompt = render_prompt(load_tokenizer(gemma_folder[0]), [{"role": "user", "content": "hi"}])
    assert prompt.endswith("<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n")


def write_gemma3_gguf(hf, path, qtype=None, tokenizer=None):
    """``hf`` as llama.cpp's converter writes a gemma3 file: norms as 1 + weight, no output
    tensor (tied), 2-D weights in ``qtype`` (k-quants as random valid blocks; the model takes
    the file's values)."""
    import gguf
    import numpy as np

    from tests.models.gguf_models import default_tokenizer, encode

    rng = np.random.default_rng(0)

    cfg = hf.config
    writer = gguf.GGUFWriter(str(path), "gemma3")
    writer.add_name("tiny gemma3")
    for add, value in ((writer.add_context_length, cfg.max_position_embeddings),
                       (writer.add_embedding_length, cfg.hidden_size),
                       (writer.add_block_count, cfg.num_hidden_layers),
                       (writer.add_feed_forward_length, cfg.intermediate_size),
                       (writer.add_head_count, cfg.num_attention_heads),
                       (writer.add_head_count_kv, cfg.num_key_value_heads),
                       (writer.add_key_length, cfg.head_dim),
                       (writer.add_value_length, cfg.head_dim),
                       (writer.add_rope_freq_base, 1e6),
                       (writer.add_layer_norm_rms_eps, cfg.rms_norm_eps),
                       (writer.add_sliding_window, cfg.sliding_window)):
        add(value)
    (tokenizer or default_tokenizer)(writer, gguf)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GEMMA3, cfg.num_hidden_layers)
    params = dict(hf.named_parameters())
    for hf_name, tensor in hf.state_dict().items():
        if hf_name == "lm_head.weight":
            continue
        base, suffix = hf_name.rsplit(".", 1)
        data = tensor.detach().float().numpy()
        if hf_name.endswith("norm.weight"):
            data = data + 1.0
        if data.ndim == 2 and qtype is not None:
            data = encode(data, qtype, rng)
            with torch.no_grad():
                params[hf_name].copy_(torch.from_numpy(
                    gguf.quants.dequantize(data, qtype).reshape(tensor.shape)))
        writer.add_tensor(f"{names.get_name(base)}.{suffix}", data,
                          raw_dtype=qtype if data.dtype == "uint8" else None)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.usefixtures("private_cache")  # the file's converted folder: a private cache
@pytest.mark.parametrize("fmt", ["F32", "Q8_0", "Q4_K"])
def test_a_gemma3_gguf_matches_transformers_past_the_window(fmt, tmp_path):
    """Six layers: llama.cpp's gemma3 pattern (five sliding, one global) is the file's; a
    512-token vocabulary (a tokenizer that converts fast). Q4_K blocks hold 256 values a row:
    rows of 256 there."""
    import gguf

    from tests.models.gguf_models import tiny_tokenizer

    types = ["sliding_attention"] * 5 + ["full_attention"]
    kquant = dict(hidden_size=256, intermediate_size=512, head_dim=64,
                  query_pre_attn_scalar=64) if fmt == "Q4_K" else {}
    hf = random_gemma3(**{"num_hidden_layers": 6, "layer_types": types, "vocab_size": 512,
                          "query_pre_attn_scalar": 16, **kquant})
    hf.config._attn_implementation = "eager"
    qtype = None if fmt == "F32" else gguf.GGMLQuantizationType[fmt]
    path = write_gemma3_gguf(hf, tmp_path / "gemma3.gguf", qtype, tiny_tokenizer)
    small = Engine(str(path), num_blocks=32, block_size=4, max_num_batched_tokens=8,
                   profile_on_start=False)
    try:
        assert small.core.backend.windows == (WINDOW,) * 5 + (None,)
        out = small.generate(PROMPT, SamplingParams(max_tokens=4, ignore_eos=True, logprobs=0))
    finally:
        small.close()
    want = hf_steps(hf, PROMPT, out.token_ids)
    assert out.token_ids == [int(s.argmax()) for s in want]
    for token, got, ref in zip(out.token_ids, out.logprobs, want, strict=True):
        assert abs(got[token] - float(ref[token])) < 1e-3
