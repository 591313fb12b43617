"""The repeat guard: identical tool calls in a row end the agent's run with a clear message
(``agentrt.Executor`` here, on a scripted agent; the create_agent middleware on the real model
in test_langchain_sessions.py)."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("langchain_classic", reason="needs the [executor] extra")

from langchain_core.agents import AgentAction  # noqa: E402
from langchain_core.runnables import RunnableLambda  # noqa: E402
from langchain_core.tools import tool  # noqa: E402

import agentrt  # noqa: E402
from langchain_agentrt.repeats import repeated_call  # noqa: E402


@tool
def lookup(query: str) -> str:
    """Look something up."""
    return f"nothing about {query}"


def stuck(calls: list[str]):
    """An agent whose i-th step looks up ``calls[i]`` (the last one forever)."""
    def step(inputs):
        steps = inputs["intermediate_steps"]
        query = calls[min(len(steps), len(calls) - 1)]
        return AgentAction("lookup", query, f"lookup {query}")
    return RunnableLambda(step)


def test_repeated_call_needs_one_identical_call_per_step():
    same = [("f", {"a": 1, "b": 2})]
    assert repeated_call([same, [("f", {"b": 2, "a": 1})], same], 3) == same[0]
    assert repeated_call([same, same], 3) is None  # not yet three
    assert repeated_call([same, [("f", {"a": 2})], same], 3) is None  # not in a row
    assert repeated_call([same, same + [("g", {})], same], 3) is None  # a step made two
    assert repeated_call([same] * 9, None) is None and repeated_call([same] * 9, 0) is None


@pytest.mark.parametrize("use_async", [False, True])
def test_executor_stops_an_agent_repeating_one_call(use_async):
    executor = agentrt.Executor(agent=stuck(["x", "y", "y"]), tools=[lookup], max_iterations=50,
                                return_intermediate_steps=True)
    run = executor.ainvoke if use_async else executor.invoke
    result = run({"input": "q"})
    result = asyncio.run(result) if use_async else result
    steps = result["intermediate_steps"]
    assert [a.tool_input for a, _ in steps] == ["x", "y", "y", "y"]  # stopped at 3 in a row
    assert "lookup" in result["output"] and "3 times in a row" in result["output"]


def test_executor_repeat_guard_is_configurable():
    executor = agentrt.Executor(agent=stuck(["y"]), tools=[lookup], max_iterations=6,
                                max_repeats=None, early_stopping_method="force",
                                return_intermediate_steps=True)
    result = executor.invoke({"input": "q"})
    assert len(result["intermediate_steps"]) == 6  # only max_iterations stopped it
    two = agentrt.Executor(agent=stuck(["y"]), tools=[lookup], max_repeats=2,
                           return_intermediate_steps=True)
    assert len(two.invoke({"input": "q"})["intermediate_steps"]) == 2
