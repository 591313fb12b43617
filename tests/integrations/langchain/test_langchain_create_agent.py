"""LangChain 1.x ``create_agent`` with ChatAgentRT: two tools end to end, tokens streamed; a
structured response; a checkpointed thread; an interrupted run resumed."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain.agents", reason="needs the [langchain] extra (langchain>=1)")

from langchain.agents import create_agent  # noqa: E402
from langchain.agents.middleware import HumanInTheLoopMiddleware, wrap_model_call  # noqa: E402
from langchain.agents.structured_output import ProviderStrategy, ToolStrategy  # noqa: E402
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.types import Command  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from langchain_agentrt import ChatAgentRT  # noqa: E402


@tool
def get_weather(city: str) -> str:
    """Get the current weather in a city, in degrees Celsius."""
    return f"It is 20 degrees Celsius and sunny in {city}."


@tool
def celsius_to_fahrenheit(celsius: float) -> str:
    """Convert a temperature from Celsius to Fahrenheit."""
    return f"{celsius * 9 / 5 + 32} F"


@wrap_model_call
def weather_then_convert(request, handler):
    """The plan, as tool_choice per step: the 135M model cannot plan two steps itself."""
    num_done = sum(isinstance(m, ToolMessage) for m in request.messages)
    plan = ["get_weather", "celsius_to_fahrenheit", "none"]
    return handler(request.override(tool_choice=plan[min(num_done, 2)]))


def test_create_agent_runs_two_tools_and_streams_tokens(engine):
    agent = create_agent(ChatAgentRT(engine=engine, max_tokens=40),
                         [get_weather, celsius_to_fahrenheit], middleware=[weather_then_convert])
    question = {"messages": [HumanMessage("What is the weather in Paris, in Fahrenheit?")]}
    tokens: list[AIMessageChunk] = []
    final = None
    for mode, data in agent.stream(question, stream_mode=["messages", "values"]):
        if mode == "messages" and isinstance(data[0], AIMessageChunk):
            tokens.append(data[0])
        elif mode == "values":
            final = data
    messages = final["messages"]
    calls = [c for m in messages if isinstance(m, AIMessage) for c in m.tool_calls]
    assert [c["name"] for c in calls] == ["get_weather", "celsius_to_fahrenheit"]
    assert calls[0]["args"] == {"city": "Paris"}
    assert isinstance(calls[1]["args"]["celsius"], int | float)
    results = [m for m in messages if isinstance(m, ToolMessage)]
    assert results[0].content == "It is 20 degrees Celsius and sunny in Paris."
    answer = messages[-1]
    assert isinstance(answer, AIMessage) and answer.content and not answer.tool_calls
    assert results[1].content.split()[0] in answer.content  # the model saw the observation
    answer_tokens = [t for t in tokens if t.id == answer.id]
    assert len(answer_tokens) > 3  # streamed token by token, not in one piece
    assert "".join(t.text for t in answer_tokens) == answer.content


@wrap_model_call
def weather_then_answer(request, handler):
    """``get_weather`` first, then an answer without tools."""
    num_done = sum(isinstance(m, ToolMessage) for m in request.messages)
    return handler(request.override(tool_choice="get_weather" if num_done == 0 else "none"))


class Capital(BaseModel):
    """A country's capital."""

    country: str
    city: str


@pytest.mark.parametrize("strategy", ["tool", "provider"])
def test_create_agent_structured_response(engine, strategy):
    """``response_format=``: ToolStrategy (a forced call of the schema as a tool) and
    ProviderStrategy (the model's own JSON mode: ``response_format`` bound beside tools)."""
    response_format = ToolStrategy(Capital) if strategy == "tool" else ProviderStrategy(Capital)
    agent = create_agent(ChatAgentRT(engine=engine, max_tokens=48), [],
                         response_format=response_format)
    out = agent.invoke({"messages": [HumanMessage("What is the capital of France?")]},
                       {"recursion_limit": 6})
    assert isinstance(out["structured_response"], Capital)
    assert out["structured_response"].city == "Paris"


def test_create_agent_checkpointer_and_interrupt(engine):
    """A thread's second invocation sees the first's messages; a human-in-the-loop interrupt
    before the tool resumes on ``Command(resume=...)`` and runs it."""
    llm = ChatAgentRT(engine=engine, max_tokens=40)
    agent = create_agent(llm, [get_weather], middleware=[weather_then_answer],
                         checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "one"}}
    first = agent.invoke({"messages": [HumanMessage("Weather in Paris?")]}, thread)
    second = agent.invoke({"messages": [HumanMessage("And in Rome?")]}, thread)
    assert second["messages"][: len(first["messages"])] == first["messages"]
    assert len(second["messages"]) > len(first["messages"]) + 1

    review = HumanInTheLoopMiddleware(interrupt_on={"get_weather": True})
    agent = create_agent(llm, [get_weather], middleware=[weather_then_answer, review],
                         checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "two"}}
    paused = agent.invoke({"messages": [HumanMessage("Weather in Paris?")]}, thread)
    [interrupt] = paused["__interrupt__"]
    assert interrupt.value["action_requests"][0]["args"] == {"city": "Paris"}
    assert not any(isinstance(m, ToolMessage) for m in paused["messages"])
    done = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), thread)
    results = [m for m in done["messages"] if isinstance(m, ToolMessage)]
    assert [r.content for r in results] == ["It is 20 degrees Celsius and sunny in Paris."]
    assert isinstance(done["messages"][-1], AIMessage) and not done["messages"][-1].tool_calls
