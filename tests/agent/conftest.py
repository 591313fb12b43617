"""Fixtures of the agent-layer tests: the real model's tokenizer, and small test tools."""

from __future__ import annotations

import subprocess

import pytest


@pytest.fixture(scope="session")
def tokenizer():
    """The real default model's tokenizer (SmolLM2-135M-Instruct), without loading the engine."""
    from transformers import AutoTokenizer

    from agentrt.models.files import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model())


@pytest.fixture()
def neighbour():
    """A process of the caller's (same user, own process group): what the engine would be."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield proc.pid
    proc.kill()
    proc.wait()
