"""ChatAgentRT on the real SmolLM2-135M-Instruct: counts, streaming, stops, constrained tools."""

from __future__ import annotations

import asyncio

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from pydantic import BaseModel

from agentrt import SamplingParams
from agentrt.chat import format_tool_call
from langchain_agentrt import ChatAgentRT
from langchain_agentrt.messages import render_prompt

QUESTION = "What is the capital of France?"


@tool
def get_weather(city: str) -> str:
    """Get the current weather in a city, in degrees Celsius."""
    return f"It is 20 degrees Celsius and sunny in {city}."


@tool
def celsius_to_fahrenheit(celsius: float) -> str:
    """Convert a temperature from Celsius to Fahrenheit."""
    return f"{celsius * 9 / 5 + 32} F"


TOOLS = [get_weather, celsius_to_fahrenheit]
# NOTE: the 135M model never decides to call a tool on its own; one example exchange in the
# history (as LangChain users give few-shot examples) makes it call one under tool_choice="auto".
FEW_SHOT = [
    HumanMessage("What is the weather in London?"),
    AIMessage("", tool_calls=[{"name": "get_weather", "args": {"city": "London"}, "id": "1"}]),
    ToolMessage("It is 15 degrees Celsius and cloudy in London.", tool_call_id="1"),
    AIMessage("It is 15 C and cloudy in London."),
    HumanMessage("What is the weather in Paris?"),
]


class TokenCounter(BaseCallbackHandler):
    def __init__(self) -> None:
        self.tokens: list[str] = []

    def on_llm_new_token(self, token: str, **kwargs) -> None:
        self.tokens.append(token)


def _sum(chunks):
    total = chunks[0]
    for c in chunks[1:]:
        total = total + c
    return total


def _schema_valid(call) -> bool:
    args_schema = {t.name: t.args_schema for t in TOOLS}[call["name"]]
    args_schema.model_validate(call["args"], strict=False)
    return True


def test_usage_counts_are_the_engines(llm, engine):
    msg = llm.invoke(QUESTION)
    prompt = render_prompt(engine.tokenizer, [HumanMessage(QUESTION)])
    out = engine.generate(engine.tokenizer.encode(prompt, add_special_tokens=False),
                          SamplingParams(max_tokens=llm.max_tokens))
    assert msg.content == out.text and "Paris" in msg.content
    assert msg.usage_metadata == {**msg.usage_metadata, "input_tokens": out.prompt_len,
                                  "output_tokens": len(out.token_ids),
                                  "total_tokens": out.prompt_len + len(out.token_ids)}
    assert msg.response_metadata["finish_reason"] == out.finish_reason == "stop"


def test_stream_adds_up_to_invoke_with_one_callback_per_chunk(llm):
    counter = TokenCounter()
    chunks = list(llm.stream(QUESTION, config={"callbacks": [counter]}))
    assert len(chunks) > 3 and len(counter.tokens) == len(chunks)
    assert [c.text for c in chunks] == counter.tokens
    full, msg = _sum(chunks), llm.invoke(QUESTION)
    assert full.content == msg.content and full.usage_metadata == msg.usage_metadata
    assert chunks[-1].chunk_position == "last" and chunks[-1].usage_metadata
    assert not any(c.usage_metadata for c in chunks[:-1])


def test_async_twins_agree_with_sync(llm):
    async def run():
        counter = TokenCounter()
        chunks = [c async for c in llm.astream(QUESTION, config={"callbacks": [counter]})]
        return await llm.ainvoke(QUESTION), chunks, counter

    msg, chunks, counter = asyncio.run(run())
    assert msg.content == _sum(chunks).content == llm.invoke(QUESTION).content
    assert len(counter.tokens) == len(chunks)


def test_stop_sequences_cut_the_answer(llm):
    full = llm.invoke(QUESTION).content
    cut = llm.invoke(QUESTION, stop=["Paris"])
    assert cut.content == full[: full.index("Paris")]
    assert cut.response_metadata["finish_reason"] == "stop"
    bound = ChatAgentRT(engine=llm.engine, max_tokens=24, stop=["capital"])
    assert "capital" not in bound.invoke(QUESTION).content
    assert "".join(c.text for c in bound.stream(QUESTION)) == bound.invoke(QUESTION).content


def test_timeout_aborts_the_request(engine):
    slow = ChatAgentRT(engine=engine, max_tokens=200, timeout=0.3)
    with pytest.raises(TimeoutError, match="timeout=0.3"):
        slow.invoke("Write a long story about a cat.")
    assert not [r for r in engine.core.requests if r.startswith("lc-")]


def test_required_tool_call_is_schema_valid_streamed_and_invoked(llm):
    model = llm.bind_tools(TOOLS, tool_choice="any", max_tokens=48)
    msg = model.invoke("What is the weather in Paris?")
    [call] = msg.tool_calls
    assert call["name"] in ("get_weather", "celsius_to_fahrenheit") and _schema_valid(call)
    assert msg.response_metadata["finish_reason"] == "tool_calls" and not msg.invalid_tool_calls
    chunks = list(model.stream("What is the weather in Paris?"))
    assert sum(bool(c.tool_call_chunks) for c in chunks) > 2  # the call arrives in pieces
    [streamed] = _sum(chunks).tool_calls
    assert (streamed["name"], streamed["args"]) == (call["name"], call["args"])


def test_named_tool_choice_calls_that_tool(llm):
    msg = llm.bind_tools(TOOLS, tool_choice="celsius_to_fahrenheit", max_tokens=48
                         ).invoke("Hello!")
    [call] = msg.tool_calls
    assert call["name"] == "celsius_to_fahrenheit" and isinstance(call["args"]["celsius"],
                                                                   int | float)


def test_auto_calls_after_an_example_and_none_never_does(llm):
    auto = llm.bind_tools(TOOLS, max_tokens=48).invoke(FEW_SHOT)
    [call] = auto.tool_calls
    assert call == {**call, "name": "get_weather", "args": {"city": "Paris"}}
    never = llm.bind_tools(TOOLS, tool_choice="none").invoke(FEW_SHOT)
    assert not never.tool_calls and not never.invalid_tool_calls
    assert never.content and "<tool_" not in never.content


def test_bad_tool_choice_and_arguments_are_clear_errors(llm):
    with pytest.raises(ValueError, match="bound tools are: get_weather, celsius_to_fahrenheit"):
        llm.bind_tools(TOOLS, tool_choice="search")
    with pytest.raises(ValueError, match="unsupported arguments 'n'"):
        llm.invoke(QUESTION, n=2)
    with pytest.raises(ValueError, match="text-only"):
        llm.invoke([HumanMessage([{"type": "image", "url": "http://x/y.png"}])])


def test_history_renders_calls_and_results_in_hermes_form(tokenizer):
    prompt = render_prompt(tokenizer, FEW_SHOT[:3], [{"type": "function", "function": {
        "name": "get_weather", "parameters": {"type": "object", "properties": {}}}}])
    assert format_tool_call("get_weather", {"city": "London"}) in prompt
    assert "<tool_response>\nIt is 15 degrees" in prompt
    assert '<tools>\n{"type": "function", "function": {"name": "get_weather"' in prompt


def test_structured_output_json_schema(llm):
    class Capital(BaseModel):
        country: str
        city: str

    answer = llm.with_structured_output(Capital, method="json_schema", include_raw=True
                                        ).invoke(QUESTION)
    assert answer["parsing_error"] is None, answer["raw"]
    assert answer["parsed"].city == "Paris" and answer["parsed"].country.lower() == "france"
    assert answer["raw"].content.startswith("{") and not answer["raw"].tool_calls
