"""Shared fixtures: one real engine on the default model for the whole session."""

from __future__ import annotations

import pytest

from agentrt import Engine


@pytest.fixture(scope="session")
def engine():
    """The real SmolLM2-135M-Instruct on agentrt's engine, float32, shared by all tests."""
    eng = Engine(dtype="float32")
    yield eng
    eng.close()


@pytest.fixture(scope="session")
def tokenizer(engine):
    return engine.tokenizer


@pytest.fixture(scope="session")
def chat(tokenizer):
    """Render a one-turn chat prompt with the model's own template."""

    def render(question: str, system: str | None = None) -> str:
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": question})
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    return render


@pytest.fixture(scope="session")
def long_text() -> str:
    """Real English prose (standard-library docstrings), long enough for 600+ token prompts."""
    import collections
    import json
    import textwrap

    parts = [textwrap.dedent(m.__doc__ or "") for m in (json, collections, textwrap)]
    return "\n".join(parts)


@pytest.fixture(scope="session")
def tiny_model(engine, tmp_path_factory) -> str:
    """A 2-layer randomly initialised Llama with the default model's tokenizer: agentrt's
    real code paths at a fraction of the cost, for tests about bookkeeping, not outputs."""
    import shutil

    import torch
    import transformers

    folder = tmp_path_factory.mktemp("tiny-llama")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=1024, vocab_size=49152)
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(engine.core.model_path / name, folder / name)
    return str(folder)
