"""Greedy generation equals Hugging Face transformers token for token (float32 both sides).

The claim is the exact path's: the default model's Q4_1 values dequantized exactly with float32
activations (``gguf_activations="float32"``, the ``exact_engine`` fixture). The default,
llama.cpp's integer path, is held to llama.cpp's own spread instead (docs/quantization.md).
"""

from __future__ import annotations

import pytest
import torch

from agentrt import SamplingParams

NEW_TOKENS = 24
LOGIT_ATOL = 2e-3  # float32, different kernel order: observed max |diff| ~5e-5


@pytest.fixture(scope="module")
def hf_model(exact_engine):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(exact_engine.core.model_path),
                                                 dtype=torch.float32)
    return model.eval()


@pytest.fixture(scope="module")
def prompts(chat, tokenizer, long_text):
    long_ids = tokenizer.encode(chat("Summarize this text:\n" + long_text),
                                add_special_tokens=False)
    assert len(long_ids) > 600
    texts = [
        chat("What is the capital of France?"),
        chat("Write a short poem about the sea."),
        chat("Explain what a hash table is.", system="You are a terse tutor."),
        "def fibonacci(n):\n    ",
    ]
    return [tokenizer.encode(t, add_special_tokens=False) for t in texts] + [long_ids]


def test_greedy_tokens_equal_hf_generate(exact_engine, hf_model, prompts):
    engine = exact_engine
    params = SamplingParams(max_tokens=NEW_TOKENS)  # both stop at EOS (id included)
    ours = engine.generate(prompts, params)
    for ids, out in zip(prompts, ours, strict=True):
        with torch.inference_mode():
            ref = hf_model.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS,
                                    do_sample=False)
        assert out.token_ids == ref[0, len(ids):].tolist()


def test_final_logits_match_hf(exact_engine, hf_model, prompts):
    engine = exact_engine
    params = SamplingParams(max_tokens=1, logprobs=0)
    for ids in prompts:
        out = engine.generate(ids, params, namespace="logits")  # no prefix reuse
        with torch.inference_mode():
            ref = hf_model(torch.tensor([ids])).logits[0, -1].float()
        ref_lp = ref.log_softmax(-1)
        token = out.token_ids[0]
        assert token == int(ref.argmax())
        assert abs(out.logprobs[0][token] - float(ref_lp[token])) < LOGIT_ATOL
