"""A Mistral-style sliding window (every layer attends within W tokens) matches transformers
past the window: greedy tokens and every step's logprob, with chunked prefill whose chunks
start past the window and decode steps that see only the window's keys, while the pages
behind the window are released (their table entries point at the null page)."""

from __future__ import annotations

import shutil

import pytest
import torch

from agentrt import Engine, SamplingParams

WINDOW = 8
PROMPT = list(range(100, 166, 3))  # 22 tokens: nearly three windows


@pytest.fixture(scope="module")
def mistral(tmp_path_factory, engine):
    import transformers

    folder = tmp_path_factory.mktemp("tiny-mistral-window")
    torch.manual_seed(0)
    config = transformers.MistralConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512, vocab_size=49152,
        sliding_window=WINDOW, tie_word_embeddings=False)
    hf = transformers.MistralForCausalLM(config).eval()
    hf.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(engine.core.model_path / name, folder / name)
    return folder, transformers.MistralForCausalLM.from_pretrained(
        folder, attn_implementation="eager").eval()


def hf_steps(hf, prompt: list[int], new: list[int]) -> list[torch.Tensor]:
    """transformers' log-softmax at each generated position (one forward, eager windows)."""
    with torch.inference_mode():
        logits = hf(torch.tensor([prompt + new])).logits[0].log_softmax(-1)
    return [logits[len(prompt) - 1 + i] for i in range(len(new))]


@pytest.mark.parametrize("backend", ["torch", "cpu"])
def test_a_windowed_mistral_matches_transformers_past_the_window(mistral, backend):
    folder, hf = mistral
    small = Engine(str(folder), dtype="float32", num_blocks=32, block_size=4,
                   max_num_batched_tokens=8, attention_backend=backend, profile_on_start=False)
    try:
        assert small.core.backend.windows == (WINDOW, WINDOW)
        assert small.core.kv.window == WINDOW  # pages behind the window are released
        free = small.core.kv.num_free_blocks
        out = small.generate(PROMPT, SamplingParams(max_tokens=6, ignore_eos=True, logprobs=0))
        assert small.core.kv.num_free_blocks == free
    finally:
        small.close()
    steps = hf_steps(hf, PROMPT, out.token_ids)
    assert out.token_ids == [int(s.argmax()) for s in steps]
    for token, got, want in zip(out.token_ids, out.logprobs, steps, strict=True):
        assert abs(got[token] - float(want[token])) < 1e-4


def test_without_the_window_the_outputs_differ(mistral):
    """The check above can fail: whole attention over 22+ tokens gives other logprobs."""
    folder, hf = mistral
    small = Engine(str(folder), dtype="float32", num_blocks=32, block_size=4,
                   profile_on_start=False)
    try:
        small.core.backend.windows = ()
        out = small.generate(PROMPT, SamplingParams(max_tokens=2, ignore_eos=True, logprobs=0))
    finally:
        small.close()
    want = hf_steps(hf, PROMPT, out.token_ids)[0]
    assert abs(out.logprobs[0][out.token_ids[0]] - float(want[out.token_ids[0]])) > 1e-3
