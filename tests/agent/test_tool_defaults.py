"""Schema defaults of tool arguments: filled in before ``run()``, checked at registration.

A tool author who declares ``"default"`` for an optional property (as a LangChain ``@tool def
f(x: int, y: int = 3)`` or a LlamaIndex ``FunctionTool`` does from its Python default) gets that
value in ``run()`` when the model leaves the argument out — after the arguments the model wrote
are validated, nested objects too. A value of the wrong type or outside an enum is an error
observation naming the field (the model sees it; nothing raises), and a default that fails its
own schema is refused when the tool is registered. Model-free where the runtime alone decides;
the real SmolLM2 engine where a run writes the call.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import pytest

from agentrt import SamplingParams
from agentrt.agent import ArgumentInvocation, Invocation, Tool, ToolRuntime, run_with_tools

ROOM = {"type": "object", "required": ["kind"],
        "properties": {"kind": {"type": "string", "enum": ["single", "double"]},
                       "floor": {"type": "integer", "default": 1},
                       "extras": {"type": "object",
                                  "properties": {"breakfast": {"type": "boolean",
                                                               "default": False}}}}}


@dataclass(frozen=True)
class BookTool(Tool):
    """Records the arguments ``run()`` receives (a thread tool: the list is the caller's)."""

    name: ClassVar[str] = "book"
    description: ClassVar[str] = "book rooms"
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object", "required": ["guest"],
        "properties": {
            "guest": {"type": "string"},
            "nights": {"type": "integer", "default": 2},
            "tags": {"type": "array", "items": {"type": "string"}, "default": []},
            "room": {**ROOM, "default": {"kind": "single"}},
            "more": {"type": "array", "items": ROOM},
        },
    }
    isolation: ClassVar[Literal["process", "thread"]] = "thread"
    ran: list[dict[str, Any]] = field(default_factory=list, compare=False)

    def start(self) -> Invocation:
        return _BookCall(self)


class _BookCall(ArgumentInvocation):
    def run(self, arguments: dict[str, Any]) -> str:
        self.tool.ran.append(arguments)
        arguments["tags"].append("touched")  # a run that mutates its default
        return f"{arguments['guest']} x{arguments['nights']}"


def _tool_with(properties: dict[str, Any]) -> type[Tool]:
    return type("DefaultsTool", (Tool,), {
        "name": "t", "description": "d", "start": lambda self: None, "isolation": "thread",
        "parameters": {"type": "object", "properties": properties},
    })


# ---------------------------------------------------------------- a plain agentrt Tool


def test_defaults_of_left_out_arguments_reach_run():
    tool = BookTool()
    with ToolRuntime([tool]) as runtime:
        observation = runtime.run("book", {"guest": "ann"})
    assert (observation.text, observation.is_error) == ("ann x2", False)
    # "room"'s default gets its own field's default; "extras" (no default) and "more" stay out
    assert tool.ran == [{"guest": "ann", "nights": 2, "tags": ["touched"],
                         "room": {"kind": "single", "floor": 1}}]


def test_written_arguments_win_and_nested_defaults_are_filled():
    tool = BookTool()
    with ToolRuntime([tool]) as runtime:
        runtime.run("book", {"guest": "bo", "nights": 5,
                             "room": {"kind": "double", "extras": {}},
                             "more": [{"kind": "single", "floor": 3}, {"kind": "double"}]})
    assert tool.ran[0]["nights"] == 5
    assert tool.ran[0]["room"] == {"kind": "double", "floor": 1, "extras": {"breakfast": False}}
    assert tool.ran[0]["more"] == [{"kind": "single", "floor": 3}, {"kind": "double", "floor": 1}]


def test_a_default_is_a_fresh_copy_for_every_call():
    tool = BookTool()
    with ToolRuntime([tool]) as runtime:
        runtime.run("book", {"guest": "a"})
        runtime.run("book", {"guest": "b"})
    assert [r["tags"] for r in tool.ran] == [["touched"], ["touched"]]
    assert BookTool.parameters["properties"]["tags"]["default"] == []


@pytest.mark.parametrize(("arguments", "match"), [
    ({"guest": "a", "nights": "two"}, r"argument 'nights' must be integer, got 'two'"),
    ({"guest": "a", "room": {"kind": "suite"}},
     r"argument 'room' field 'kind' must be one of \['single', 'double'\], got 'suite'"),
    ({"guest": "a", "more": [{"kind": "single", "floor": 1.5}]},
     r"argument 'more' item 0 field 'floor' must be integer"),
])
def test_a_wrong_type_or_enum_is_an_error_observation_naming_the_field(arguments, match):
    tool = BookTool()
    with ToolRuntime([tool]) as runtime:
        observation = runtime.run("book", arguments)
    assert observation.is_error and re.search(match, observation.text), observation.text
    assert tool.ran == []


@pytest.mark.parametrize(("properties", "match"), [
    ({"n": {"type": "integer", "default": "3"}}, r"'n'.*must be integer, got '3'"),
    ({"n": {"type": "integer", "default": None}}, r"'n'.*must be integer, got None"),
    ({"unit": {"type": "string", "enum": ["C", "F"], "default": "K"}}, r"'unit'.*one of"),
    ({"room": {"type": "object", "properties": {"floor": {"type": "integer",
                                                          "default": 1.5}}}},
     r"'room' field 'floor'.*must be integer"),
    ({"room": {"type": "object", "required": ["kind"], "properties": {"kind": {}},
               "default": {}}}, r"'room'.*missing required field"),
    ({"rooms": {"type": "array", "items": {"type": "object", "properties": {
        "floor": {"type": "integer", "default": "1"}}}}}, r"'rooms' item.*'floor'"),
])
def test_a_default_that_fails_its_own_schema_is_refused_at_registration(properties, match):
    with pytest.raises(ValueError, match=r"tool 't': the default of") as error:
        ToolRuntime([_tool_with(properties)()])
    assert re.search(match, str(error.value)), str(error.value)


def test_defaults_that_fit_their_schema_register():
    properties = {"n": {"type": ["integer", "null"], "default": None},
                  "unit": {"type": "string", "enum": ["C", "F"], "default": "C"},
                  "ref": {"$ref": "#/$defs/X", "default": {"a": 1}}}
    assert ToolRuntime([_tool_with(properties)()]).tools["t"]


# ---------------------------------------------------------------- a run on the engine

CALL = '<tool_call>{"name": "book", "arguments": {"guest": "ann"}}</tool_call>'


@pytest.fixture(scope="module")
def prompt(engine):
    return engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": "Book a room for Ann."}], add_generation_prompt=True,
        tokenize=False)


def test_a_call_written_without_an_optional_argument_runs_with_its_default(engine, prompt):
    tool = BookTool()
    with ToolRuntime([tool]) as runtime:
        run = run_with_tools(engine, prompt, SamplingParams(max_tokens=2), tools=runtime,
                             reply_prefix=CALL, max_calls=0)
    assert run.observations[0].text == "ann x2"
    assert tool.ran[0]["nights"] == 2 and tool.ran[0]["room"]["floor"] == 1


def test_a_call_with_a_wrong_type_is_an_observation_not_a_crash(engine, prompt):
    tool = BookTool()
    call = '<tool_call>{"name": "book", "arguments": {"guest": "ann", "nights": "2"}}</tool_call>'
    with ToolRuntime([tool]) as runtime:
        run = run_with_tools(engine, prompt, SamplingParams(max_tokens=2), tools=runtime,
                             reply_prefix=call, max_calls=1)
    observation = run.observations[0]
    assert observation.is_error and "argument 'nights' must be integer" in observation.text
    assert tool.ran == []
    assert len(run.segments) == 2  # the model went on after the error observation


# ---------------------------------------------------------------- LangChain and LlamaIndex


def test_a_langchain_tool_gets_its_python_default_through_agentrt(engine, prompt):
    pytest.importorskip("langchain_core")
    from langchain_core.tools import tool
    from pydantic import BaseModel, Field

    from langchain_agentrt.tools import from_langchain

    @tool
    def book(guest: str, nights: int = 2) -> str:
        """Book a room."""
        return f"{guest} x{nights}"

    class Args(BaseModel):
        guest: str
        nights: int = Field(default=2, description="how many nights")

    @tool(args_schema=Args)
    def book_schema(guest: str, nights: int) -> str:
        """Book a room (the default lives in the args schema only)."""
        return f"{guest} x{nights}"

    @tool
    def book_none(guest: str, nights: int = None) -> str:  # type: ignore[assignment]
        """Book a room (a None default on an int, as LangChain code often writes)."""
        return f"{guest} x{nights}"

    tools = [from_langchain(t) for t in (book, book_schema, book_none)]
    with ToolRuntime(tools) as runtime:
        run = run_with_tools(engine, prompt, SamplingParams(max_tokens=2), tools=runtime,
                             reply_prefix=CALL, max_calls=0)
        by_schema = runtime.run("book_schema", {"guest": "ann"})
        by_none = runtime.run("book_none", {"guest": "ann"})
    assert run.observations[0].text == "ann x2"
    assert (by_schema.text, by_schema.is_error) == ("ann x2", False)
    assert (by_none.text, by_none.is_error) == ("ann xNone", False)


def test_an_agentrt_tool_with_defaults_under_langchain_gets_them():
    pytest.importorskip("langchain_core")
    from langchain_agentrt.tools import to_langchain

    tool = BookTool()
    with ToolRuntime() as runtime:
        lc_tool = to_langchain(tool, runtime)
        assert lc_tool.invoke({"guest": "ann"}) == "ann x2"
    assert tool.ran[0]["room"] == {"kind": "single", "floor": 1}


def test_a_llama_index_function_tool_gets_its_python_default_in_a_function_agent(engine):
    pytest.importorskip("llama_index.core")
    pytest.importorskip("xgrammar")
    from llama_index.core.agent.workflow import FunctionAgent, ToolCallResult
    from llama_index.core.tools import FunctionTool
    from llama_index.llms.agentrt import AgentRT, agent_session, to_llama_index

    def book(guest: str, nights: int = 2) -> str:
        """Book a room for a guest."""
        return f"{guest} x{nights}"

    async def run(agent: FunctionAgent) -> list[ToolCallResult]:
        with agent_session(agent):
            handler = agent.run(user_msg="Book a room for Ann.", max_iterations=2)
            events = [e async for e in handler.stream_events()]
            try:
                await handler
            except Exception:  # NOTE: the 135M model may call again past max_iterations
                pass
        return [e for e in events if isinstance(e, ToolCallResult)]

    llm = AgentRT(engine=engine, max_tokens=64)
    function_tool = FunctionTool.from_defaults(book)
    assert function_tool.metadata.get_parameters_dict()["properties"]["nights"]["default"] == 2
    python = asyncio.run(run(FunctionAgent(tools=[function_tool], llm=llm,
                                           initial_tool_choice="book")))
    assert python and python[0].tool_name == "book" and not python[0].tool_output.is_error
    nights = python[0].tool_kwargs.get("nights", 2)
    assert python[0].tool_output.content == f"{python[0].tool_kwargs['guest']} x{nights}"

    tool = BookTool()
    with ToolRuntime() as runtime:
        worker = asyncio.run(run(FunctionAgent(tools=[to_llama_index(tool, runtime)], llm=llm,
                                               initial_tool_choice="book")))
    assert worker and worker[0].tool_name == "book" and not worker[0].tool_output.is_error
    written = worker[0].tool_kwargs
    assert tool.ran[0]["nights"] == written.get("nights", 2)
    assert tool.ran[0]["room"] == {"floor": 1, **written.get("room", {"kind": "single"})}
