"""Fixtures of the LangChain integration tests: ChatAgentRT on the session engine."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain_core", reason="needs the [langchain] extra")
pytest.importorskip("xgrammar", reason="needs the [langchain] extra (xgrammar)")


@pytest.fixture(scope="session")
def llm(engine):
    """ChatAgentRT on the session's real engine: greedy, short answers."""
    from langchain_agentrt import ChatAgentRT

    return ChatAgentRT(engine=engine, max_tokens=24)
