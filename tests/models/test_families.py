"""Local Hugging Face folders of the Llama, Qwen2, Qwen3 and Phi-3 families load and match HF.

Each case builds a small randomly initialised model with transformers, saves it as a folder
(with the default model's tokenizer) and checks agentrt's own forward pass against HF's
logits — covering QKV bias (Qwen2), per-head q/k RMSNorm (Qwen3), fused QKV and gate/up
weights (Phi-3), untied heads and the RoPE scaling variants (Phi-3's longrope on its short
factors, and on its long ones for a sequence past a small original context). A config's
sliding window is each layer's window (tests/models/test_window_models.py runs one).
"""

from __future__ import annotations

import shutil

import pytest
import torch

from agentrt import Engine, SamplingParams

PHI3 = dict(tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=None)
SHORT, LONG = [1.0 + 0.25 * i for i in range(8)], [2.0 + 3.0 * i for i in range(8)]  # head_dim/2
SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=512, vocab_size=49152)

CASES = {
    "llama-llama3-rope": ("LlamaConfig", "LlamaForCausalLM", dict(
        tie_word_embeddings=False,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
    "llama-linear-rope": ("LlamaConfig", "LlamaForCausalLM", dict(
        tie_word_embeddings=True, rope_scaling={"rope_type": "linear", "factor": 2.0})),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(tie_word_embeddings=True)),
    "qwen2-yarn": ("Qwen2Config", "Qwen2ForCausalLM", dict(
        rope_scaling={"rope_type": "yarn", "factor": 4.0,
                      "original_max_position_embeddings": 128})),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(head_dim=32, tie_word_embeddings=False)),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", PHI3),
    "phi3-longrope-short": ("Phi3Config", "Phi3ForCausalLM", dict(  # context <= original
        PHI3, original_max_position_embeddings=512, rope_scaling={
            "rope_type": "longrope", "short_factor": SHORT, "long_factor": LONG,
            "attention_factor": 1.25})),
    "phi3-longrope-long": ("Phi3Config", "Phi3ForCausalLM", dict(  # 100 tokens > 64
        PHI3, original_max_position_embeddings=64, rope_scaling={
            "rope_type": "longrope", "short_factor": SHORT, "long_factor": LONG})),
}


def save(case: str, folder, engine, **config):
    """A random ``case`` model saved in ``folder`` with the default model's tokenizer."""
    import transformers

    config_cls, model_cls, extra = CASES[case]
    torch.manual_seed(0)
    hf = getattr(transformers, model_cls)(
        getattr(transformers, config_cls)(**{**SMALL, **extra, **config})).eval()
    hf.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(engine.core.model_path / name, folder / name)
    return hf


@pytest.mark.parametrize("case", sorted(CASES))
def test_family_matches_hf(case, tmp_path, engine):
    hf = save(case, tmp_path, engine)

    ids = list(range(100, 400, 3))  # 100 tokens: prefill then greedy decode
    small = Engine(str(tmp_path), dtype="float32", num_blocks=64, max_num_batched_tokens=32)
    try:
        out = small.generate(ids, SamplingParams(max_tokens=6, ignore_eos=True, logprobs=0))
    finally:
        small.close()
    with torch.inference_mode():
        ref = hf.generate(torch.tensor([ids]), max_new_tokens=6, min_new_tokens=6,
                          do_sample=False)[0, len(ids):].tolist()
        logits = hf(torch.tensor([ids])).logits[0, -1].log_softmax(-1)
    assert out.token_ids == ref
    first = out.token_ids[0]
    assert abs(out.logprobs[0][first] - float(logits[first])) < 1e-3


def test_longrope_follows_the_context_the_engine_fits_the_model_to(tmp_path, engine):
    """Long factors for the whole 512 positions by default, short ones for a 64-token engine
    (the tables themselves are checked against transformers in test_rope.py)."""
    from agentrt.models import load_model
    from agentrt.models.rope import rope_tables

    save("phi3-longrope-long", tmp_path, engine)  # original context 64
    loaded = load_model(tmp_path)
    c, model = loaded.config, loaded.model
    short, _ = rope_tables(c.head_dim, c.rope_theta, c.rope_scaling, 512, 64)
    long, _ = rope_tables(c.head_dim, c.rope_theta, c.rope_scaling, 512, 512)
    assert torch.equal(model.cos, long) and not torch.equal(model.cos, short)
    model.fit_context(64)
    assert torch.equal(model.cos, short)
    for max_model_len, table in ((64, short), (None, long)):  # the engine fits it to its context
        small = Engine(str(tmp_path), dtype="float32", num_blocks=64, max_model_len=max_model_len)
        try:
            assert small.max_model_len == (max_model_len or 512)
            assert torch.equal(small.core.model.cos, table)  # one row per usable position
            assert small.core.model.cos.shape[0] == small.max_model_len
        finally:
            small.close()


def test_a_huge_claimed_context_builds_short_tables_until_the_engine_fits_it(tmp_path, engine):
    """A config claiming 2**24 positions (a hostile or broken file) must not build gigabytes
    of RoPE tables on load; the engine's own context (bounded by its KV cache) decides."""
    from agentrt.models import load_model
    from agentrt.models.llama import INITIAL_CONTEXT

    save("qwen2", tmp_path, engine, max_position_embeddings=2**24)
    assert load_model(tmp_path).model.cos.shape[0] == INITIAL_CONTEXT
    small = Engine(str(tmp_path), dtype="float32", num_blocks=64)
    try:
        assert small.core.model.cos.shape[0] == small.max_model_len == 64 * 16
    finally:
        small.close()


def test_a_sliding_window_is_each_layer_s_window_not_a_context_cap(tmp_path, engine):
    """transformers' Phi-3 attends within ``sliding_window`` tokens on every layer: agentrt
    too, at the config's whole context."""
    from agentrt.models.config import ModelConfig

    save("phi3", tmp_path, engine, sliding_window=96)
    config = ModelConfig.from_folder(tmp_path)
    assert config.layer_windows == (96, 96) and config.max_position_embeddings == 512
    small = Engine(str(tmp_path), dtype="float32", num_blocks=64)
    try:
        assert small.max_model_len == 512 and small.core.backend.windows == (96, 96)
    finally:
        small.close()


def test_generation_config_eos_ids_stop_too(tmp_path, engine):
    """Phi-3 folders name their end of turn (``<|end|>``, 32007) in generation_config.json."""
    import json

    from agentrt.models.config import ModelConfig

    save("phi3", tmp_path, engine)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 7]}))
    assert ModelConfig.from_folder(tmp_path).eos_token_ids == (2, 7)


def test_partial_rotary_phi3_is_refused_clearly(tmp_path, engine):
    from agentrt.models.config import UnsupportedModelError

    save("phi3", tmp_path, engine, partial_rotary_factor=0.5)
    with pytest.raises(UnsupportedModelError, match="partial_rotary_factor=0.5"):
        Engine(str(tmp_path), dtype="float32", num_blocks=64)


@pytest.mark.parametrize("arch, extra, want", [
    ("MistralForCausalLM", {}, ()),  # a class default (old GGUF conversions): no window
    ("MistralForCausalLM", dict(sliding_window=4096), (4096, 4096)),
    ("Qwen2ForCausalLM", dict(sliding_window=4096, use_sliding_window=False), ()),
])
def test_only_a_window_transformers_applies_and_config_json_sets_counts(tmp_path, arch, extra,
                                                                        want):
    import json

    from agentrt.models.config import ModelConfig

    config = {**SMALL, "max_position_embeddings": 32768, "rms_norm_eps": 1e-5, **extra,
              "architectures": [arch], "model_type": arch.removesuffix("ForCausalLM").lower()}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert ModelConfig.from_folder(tmp_path).layer_windows == want
