"""``<think>`` reasoning as each front end shows it: ``reasoning_content`` in the server's
message and deltas, LangChain's ``additional_kwargs["reasoning_content"]``, LlamaIndex's
``ChatMessage.additional_kwargs`` — never as a tool call (fed as engine deltas, no model)."""

from __future__ import annotations

import json

import pytest

from agentrt import SamplingParams
from agentrt.chat import ChatCall, ChatProgress
from agentrt.chat.formats import HERMES
from agentrt.engine.outputs import StreamDelta

OUTPUT = ["Let me think: <tool", '_call>{"name": "no"}\n</th', "ink>\n\n<tool_call>\n",
          '{"name": "get_time", "arguments": {}}\n</tool_call>']


def feed(progress) -> list:
    return [progress.feed(StreamDelta("r", text, [1], finished=i == len(OUTPUT) - 1,
                                      finish_reason="stop" if i == len(OUTPUT) - 1 else None))
            for i, text in enumerate(OUTPUT)]


def thinking_call() -> ChatCall:
    return ChatCall(None, [1, 2], SamplingParams(), tool_format=HERMES,  # type: ignore[arg-type]
                    reasoning="open")


def test_chat_progress_splits_reasoning_from_calls():
    progress = ChatProgress(thinking_call())
    pieces = feed(progress)
    assert progress.reasoning_content == 'Let me think: <tool_call>{"name": "no"}'
    assert "".join(p.reasoning_content for p in pieces) == progress.reasoning_content
    assert progress.content == ""
    assert [c["name"] for c in progress.tool_calls] == ["get_time"]
    assert progress.finish_reason == "tool_calls"


def test_server_message_and_deltas_carry_reasoning_content():
    pytest.importorskip("fastapi")
    from agentrt.server.chat import _delta
    from agentrt.server.protocol import AssistantMessage, DeltaMessage

    progress = ChatProgress(thinking_call())
    deltas = [_delta(p).model_dump() for p in feed(progress) if p]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == progress.reasoning_content
    assert all("content" not in d for d in deltas)
    assert "reasoning_content" not in AssistantMessage(content="hi").model_dump()
    message = AssistantMessage(content=None, reasoning_content="why").model_dump()
    assert message["reasoning_content"] == "why" and message["content"] is None
    assert DeltaMessage(reasoning_content="x").model_dump() == {"reasoning_content": "x"}


def test_langchain_messages_carry_reasoning_in_additional_kwargs():
    pytest.importorskip("langchain_core")
    from langchain_agentrt.generation import Progress

    streamed = Progress(thinking_call(), "m")
    chunks = [streamed.chunk(StreamDelta("r", t, [1], finished=i == len(OUTPUT) - 1,
                                         finish_reason="stop"))
              for i, t in enumerate(OUTPUT)]
    total = None
    for chunk in (c for c in chunks if c is not None):
        total = chunk.message if total is None else total + chunk.message
    assert total.additional_kwargs["reasoning_content"] == streamed.reasoning_content
    assert [c["name"] for c in total.tool_calls] == ["get_time"]
    whole = Progress(thinking_call(), "m")
    feed(whole)
    message = whole.message()
    assert message.additional_kwargs == {"reasoning_content": whole.reasoning_content}
    assert message.tool_calls[0]["name"] == "get_time"


def test_llama_index_messages_carry_reasoning_in_additional_kwargs():
    pytest.importorskip("llama_index.core")
    from llama_index.llms.agentrt.generation import Progress

    progress = Progress(thinking_call(), "m")
    feed(progress)
    message = progress.response().message
    assert message.additional_kwargs["reasoning_content"] == progress.reasoning_content
    assert json.loads(message.additional_kwargs["tool_calls"][0]["function"]["arguments"]) == {}


def test_langchain_history_gives_reasoning_to_the_template():
    pytest.importorskip("langchain_core")
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    from langchain_agentrt.messages import to_openai_messages

    call = {"name": "get_time", "args": {}, "id": "call_1"}
    step = [HumanMessage("What time is it?"),
            AIMessage("", tool_calls=[call], additional_kwargs={"reasoning_content": "Check."}),
            ToolMessage("noon", tool_call_id="call_1")]
    dicts = to_openai_messages(step)
    assert dicts[1]["reasoning_content"] == "Check."
    odd = AIMessage("hi", additional_kwargs={"reasoning_content": {"summary": []}})
    assert "reasoning_content" not in to_openai_messages([odd])[0]  # another provider's
