"""Backends under test: ``local`` on the session's engine, ``sglang`` on a real ``agentrt
serve`` process on loopback speaking SGLang's native API (``sglang_server`` in
``tests/conftest.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))  # serve_harness


@pytest.fixture
def sglang(sglang_server):
    """The sglang backend pointed at that server."""
    from agentrt.backends import get_backend

    with get_backend("sglang", url=sglang_server.url, timeout=120) as backend:
        yield backend


@pytest.fixture(scope="session")
def local(engine):
    """The local backend on the session's engine (same model, same dtype as the server)."""
    from agentrt.backends import get_backend

    return get_backend("local", engine=engine)


@pytest.fixture(scope="session")
def prompt_ids(tokenizer) -> list[int]:
    """A real chat prompt, as token ids."""
    messages = [{"role": "user", "content": "Name three colours of the rainbow."}]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tokenizer.encode(text, add_special_tokens=False)
