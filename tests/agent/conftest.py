"""Fixtures of the agent-layer tests: the real model's tokenizer, and small test tools."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tokenizer():
    """The real default model's tokenizer (SmolLM2-135M-Instruct), without loading the engine."""
    from transformers import AutoTokenizer

    from agentrt.models.files import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model())
