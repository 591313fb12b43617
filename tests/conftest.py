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
