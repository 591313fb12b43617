"""``ChatAgentRT(logprobs=True, top_logprobs=k)`` as ``ChatOpenAI``: each answer token's entry in
``response_metadata["logprobs"]["content"]``, whole and as streamed chunks merge them."""

from __future__ import annotations

import pytest


def test_logprobs_whole_and_streamed(engine):
    from langchain_agentrt import ChatAgentRT

    llm = ChatAgentRT(engine=engine, max_tokens=6, logprobs=True, top_logprobs=2)
    whole = llm.invoke("Name a color.")
    tokens = whole.response_metadata["logprobs"]["content"]
    assert tokens and "".join(t["token"] for t in tokens) == whole.content
    assert all(len(t["top_logprobs"]) == 2 and t["top_logprobs"][0]["token"] == t["token"]
               for t in tokens)  # greedy: the likeliest first
    merged = None
    for chunk in llm.stream("Name a color."):
        merged = chunk if merged is None else merged + chunk
    streamed = merged.response_metadata["logprobs"]["content"]
    assert [t["token"] for t in streamed] == [t["token"] for t in tokens]
    per_call = ChatAgentRT(engine=engine, max_tokens=6).invoke("Name a color.", logprobs=True)
    assert [t["token"] for t in per_call.response_metadata["logprobs"]["content"]] == \
        [t["token"] for t in tokens]
    assert "logprobs" not in ChatAgentRT(engine=engine, max_tokens=6).invoke(
        "Name a color.").response_metadata


def test_top_logprobs_without_logprobs_is_an_error(engine):
    from langchain_agentrt import ChatAgentRT

    with pytest.raises(ValueError, match="top_logprobs needs logprobs"):
        ChatAgentRT(engine=engine, max_tokens=2, top_logprobs=2).invoke("Hi")


def test_logprobs_with_tools_bound_are_refused(engine):
    """As the server: logprobs are for plain answers (a call's tokens are no content)."""
    from langchain_core.tools import tool

    from langchain_agentrt import ChatAgentRT

    @tool
    def lookup(q: str) -> str:
        """Look q up."""
        return q

    llm = ChatAgentRT(engine=engine, max_tokens=4, logprobs=True).bind_tools([lookup])
    with pytest.raises(ValueError, match="plain answers"):
        llm.invoke("Hi")
