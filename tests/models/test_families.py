"""Local Hugging Face folders of the Llama, Qwen2 and Qwen3 families load and match HF.

Each case builds a small randomly initialised model with transformers, saves it as a folder
(with the default model's tokenizer) and checks agentrt's own forward pass against HF's
logits — covering QKV bias (Qwen2), per-head q/k RMSNorm (Qwen3), untied heads and the RoPE
scaling variants.
"""

from __future__ import annotations

import shutil

import pytest
import torch

from agentrt import Engine, SamplingParams

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
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_family_matches_hf(case, tmp_path, engine):
    import transformers

    config_cls, model_cls, extra = CASES[case]
    torch.manual_seed(0)
    config = getattr(transformers, config_cls)(**SMALL, **extra)
    hf = getattr(transformers, model_cls)(config).eval()
    hf.save_pretrained(tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(engine.core.model_path / name, tmp_path / name)

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
