"""Adapters with LangChain tools, both ways."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain_core", reason="needs the [langchain] extra")

from langchain_core.tools import tool  # noqa: E402

from agentrt.agent import ToolRuntime  # noqa: E402
from agentrt.agent.parsers.base import Piece  # noqa: E402
from langchain_agentrt.tools import from_langchain, to_langchain  # noqa: E402


@tool
def multiply(a: float, b: float) -> float:
    """Multiply two numbers."""
    return a * b


@tool
def shout(text: str) -> str:
    """Upper-case a text."""
    return text.upper()


@pytest.fixture(scope="module")
def runtime():
    with ToolRuntime(["calculator", from_langchain(multiply), from_langchain(shout)]) as rt:
        yield rt


def test_an_agentrt_tool_is_a_langchain_tool(runtime):
    calculator = to_langchain("calculator", runtime)
    assert calculator.name == "calculator"
    assert calculator.args["expression"]["type"] == "string"
    assert calculator.invoke({"expression": "6 * 7"}) == "42"
    assert calculator.invoke("2 + 2") == "4"  # a single string input, as ReAct agents send
    assert "not allowed" in calculator.invoke({"expression": "__import__('os')"})


def test_a_langchain_tool_runs_inside_agentrt(runtime):
    assert runtime.tools["multiply"].parameters["required"] == ["a", "b"]
    assert runtime.run("multiply", {"a": 3, "b": 4}).text == "12.0"
    call = runtime.start("multiply")
    call.feed(Piece("input", '{"a": 2, "b": 2.5}'))  # a ReAct input in JSON
    assert call.finish().text == "5.0"
    call = runtime.start("shout")
    call.feed(Piece("input", "quiet"))  # a single-input tool takes plain text
    assert call.finish().text == "QUIET"


def test_langchain_argument_errors_reject_early(runtime):
    call = runtime.start("multiply")
    call.feed(Piece("argument", key="a", value="three"))
    assert "must be number" in call.wait()
    assert call.finish().is_error
