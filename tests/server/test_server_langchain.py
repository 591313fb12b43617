"""LangChain's ``ChatOpenAI`` pointed at ``agentrt serve``: invoke, stream, bind_tools."""

from __future__ import annotations

import pytest
from langchain_openai import ChatOpenAI

MODEL = "SmolLM2-135M-Instruct"
QUESTION = "What is the capital of France?"
TOOL_CALL_TOKENS = 48


@pytest.fixture(scope="module")
def llm(server):
    return ChatOpenAI(base_url=server.base_url, api_key="x", model=MODEL, temperature=0,
                      max_tokens=16, max_retries=0)


def test_invoke(llm):
    message = llm.invoke(QUESTION)
    assert "Paris" in message.content
    usage = message.usage_metadata
    assert usage["output_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert message.response_metadata["finish_reason"] in ("stop", "length")


def test_stream_adds_up_to_invoke(llm):
    chunks = list(llm.stream(QUESTION))
    assert len(chunks) > 2
    total = chunks[0]
    for chunk in chunks[1:]:
        total += chunk
    assert total.content == llm.invoke(QUESTION).content


def test_bind_tools(llm, calculator):
    # NOTE: a constrained call to this tool takes about 42 tokens on SmolLM2
    bound = llm.model_copy(update={"max_tokens": TOOL_CALL_TOKENS}).bind_tools(
        [calculator], tool_choice="required")
    message = bound.invoke("What is 12 times 7? Use the calculator.")
    (call,) = message.tool_calls
    assert call["name"] == "calculator" and set(call["args"]) == {"a", "op", "b"}
    assert call["id"].startswith("call_")
    streamed = None
    for chunk in bound.stream("What is 12 times 7? Use the calculator."):
        streamed = chunk if streamed is None else streamed + chunk
    (again,) = streamed.tool_calls
    assert again["name"] == "calculator" and again["args"] == call["args"]
