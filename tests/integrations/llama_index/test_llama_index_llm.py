"""AgentRT on the real SmolLM2-135M-Instruct: metadata, chat/complete/stream (+ async twins),
usage, constrained tool calls, structured prediction."""

from __future__ import annotations

import pytest
from llama_index.core.llms import ChatMessage
from llama_index.core.prompts import PromptTemplate
from llama_index.core.tools import FunctionTool
from pydantic import BaseModel

from agentrt import DEFAULT_MODEL
from agentrt.chat import render_prompt

QUESTION = "What is the capital of France?"
MESSAGES = [ChatMessage(role="user", content=QUESTION)]


def get_weather(city: str) -> str:
    """Get the current weather in a city, in degrees Celsius."""
    return f"It is 20 degrees Celsius and sunny in {city}."


def celsius_to_fahrenheit(celsius: float) -> str:
    """Convert a temperature from Celsius to Fahrenheit."""
    return f"{celsius * 9 / 5 + 32} F"


TOOLS = [FunctionTool.from_defaults(get_weather), FunctionTool.from_defaults(celsius_to_fahrenheit)]
BY_NAME = {t.metadata.name: t for t in TOOLS}


def _schema_valid(selection) -> bool:
    schema = BY_NAME[selection.tool_name].metadata.fn_schema
    schema.model_validate(selection.tool_kwargs, strict=True)
    return True


def test_metadata(llm, engine):
    meta = llm.metadata
    assert meta.is_chat_model and meta.is_function_calling_model
    assert meta.context_window == engine.core.max_model_len
    assert meta.num_output == 24 and meta.model_name == DEFAULT_MODEL
    assert llm.model_copy(update={"context_window": 2048}).metadata.context_window == 2048
    # a window the engine cannot hold would have LlamaIndex pack prompts it then refuses
    larger = engine.core.max_model_len * 4
    assert llm.model_copy(update={"context_window": larger}).metadata.context_window == \
        engine.core.max_model_len


def test_chat_usage_is_the_engines(llm, engine):
    response = llm.chat(MESSAGES)
    assert "Paris" in response.message.content
    prompt = render_prompt(engine.tokenizer, [{"role": "user", "content": QUESTION}])
    usage = response.raw["usage"]
    assert usage["prompt_tokens"] == len(engine.tokenizer.encode(prompt,
                                                                 add_special_tokens=False))
    assert 0 < usage["completion_tokens"] <= 24 and response.additional_kwargs == usage
    assert response.raw["finish_reason"] in ("stop", "length")


def test_stream_adds_up_to_chat_and_complete(llm):
    whole = llm.chat(MESSAGES)
    chunks = list(llm.stream_chat(MESSAGES))
    assert "".join(c.delta for c in chunks) == whole.message.content
    assert chunks[-1].message.content == whole.message.content
    assert chunks[-1].raw["usage"] == whole.raw["usage"]
    assert llm.complete(QUESTION).text == whole.message.content
    streamed = list(llm.stream_complete(QUESTION))
    assert "".join(c.delta for c in streamed) == streamed[-1].text == whole.message.content


async def test_async_twins_give_the_same_text(llm):
    whole = llm.chat(MESSAGES).message.content
    assert (await llm.achat(MESSAGES)).message.content == whole
    assert (await llm.acomplete(QUESTION)).text == whole
    deltas = [c.delta async for c in await llm.astream_chat(MESSAGES)]
    assert "".join(deltas) == whole
    texts = [c.text async for c in await llm.astream_complete(QUESTION)]
    assert texts[-1] == whole


def test_per_call_options_and_stop(llm):
    capped = llm.chat(MESSAGES, max_tokens=3)
    assert capped.raw["usage"]["completion_tokens"] == 3 and capped.raw["finish_reason"] == "length"
    stopped = llm.chat(MESSAGES, stop=["Paris"]).message.content
    assert "Paris" not in stopped and llm.chat(MESSAGES).message.content.startswith(stopped)
    with pytest.raises(ValueError, match="unsupported arguments"):
        llm.chat(MESSAGES, frequency_penalty=1.0)


@pytest.mark.parametrize("question,tool,args", [
    ("Get the current weather in Paris.", "get_weather", {"city": "Paris"}),
    ("Convert 20 degrees Celsius to Fahrenheit.", "celsius_to_fahrenheit", {"celsius": 20}),
])
def test_required_tool_call_is_schema_valid_in_chat_and_stream(tool_llm, question, tool, args):
    """tool_required=True: a call (grammar-constrained), to the right tool (the model's
    choice), with schema-valid arguments; streamed, the call shows while it is written."""
    response = tool_llm.chat_with_tools(TOOLS, user_msg=question, tool_required=True)
    calls = tool_llm.get_tool_calls_from_response(response)
    assert len(calls) == 1 and _schema_valid(calls[0])
    assert (calls[0].tool_name, calls[0].tool_kwargs) == (tool, args)
    assert response.raw["finish_reason"] == "tool_calls"
    streamed = list(tool_llm.stream_chat_with_tools(TOOLS, user_msg=question,
                                                    tool_required=True))
    partial = [tool_llm.get_tool_calls_from_response(c, error_on_no_tool_call=False)
               for c in streamed]
    assert len([p for p in partial if p]) > 1
    last = tool_llm.get_tool_calls_from_response(streamed[-1])
    assert [(c.tool_name, c.tool_kwargs) for c in last] == [(tool, args)]


async def test_named_tool_choice_forces_that_tool(tool_llm):
    response = await tool_llm.achat_with_tools(
        TOOLS, user_msg="It is 20 degrees Celsius. How much is that in Fahrenheit?",
        tool_choice="celsius_to_fahrenheit")
    (call,) = tool_llm.get_tool_calls_from_response(response)
    assert call.tool_name == "celsius_to_fahrenheit" and _schema_valid(call)
    out = await tool_llm.apredict_and_call(
        TOOLS, user_msg="What is the weather in Rome?", tool_choice="get_weather")
    assert out.sources[0].tool_name == "get_weather" and "sunny" in out.response


def test_structured_predict_goes_through_a_forced_call(tool_llm):
    class City(BaseModel):
        name: str
        country: str

    city = tool_llm.structured_predict(City, PromptTemplate("Describe the city {name}."),
                                       name="Paris")
    assert isinstance(city, City) and city.name
