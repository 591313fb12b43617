"""A tool author's audit: registering tools, argument schemas, results, sessions, LangChain.

Each test pins what a developer writing their own agentrt tool (as they would a LangChain
``@tool`` or an OpenAI function) runs into: errors at registration instead of mid-run, nested
arguments checked before the tool runs, results that are not text, a session opened and closed
exactly once however the run ends, and the LangChain adapters keeping the schema both ways.
Model-free where the parser or the runtime alone decides; the real engine where a run does.
"""

from __future__ import annotations

import dataclasses
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest
from pydantic import BaseModel
from toy_tools import EchoTool

from agentrt import SamplingParams
from agentrt.agent import (
    ArgumentInvocation,
    Invocation,
    SandboxConfig,
    Tool,
    ToolRuntime,
    ToolSession,
    ToolStream,
    run_with_tools,
)
from agentrt.agent.parsers.base import Piece
from agentrt.agent.worker import MAX_TEXT_CHARS

# ---------------------------------------------------------------- tools of a tool author


@dataclass(frozen=True)
class LifecycleTool(Tool):
    """Records its session's life in ``events`` (a thread tool: the list is the caller's)."""

    name: ClassVar[str] = "lifecycle"
    description: ClassVar[str] = "records what the runtime does with it"
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object", "properties": {"x": {"type": "string"}},
    }
    isolation: ClassVar[Literal["process", "thread"]] = "thread"
    events: list[str] = field(default_factory=list, compare=False)
    result: Callable[[], Any] = field(default=lambda: "ok", compare=False)

    def open_session(self, workdir: Path) -> ToolSession:
        self.events.append("open")
        return _LifecycleSession(self)


class _LifecycleSession(ToolSession):
    def start(self) -> Invocation:
        self.tool.events.append("start")
        return _LifecycleCall(self.tool)

    def close(self) -> None:
        self.tool.events.append("close")


class _LifecycleCall(ArgumentInvocation):
    def on_value(self, key: str, value: Any) -> None:
        self.tool.events.append(f"value:{value}")

    def run(self, arguments: dict[str, Any]) -> Any:
        return self.tool.result()

    def abort(self) -> None:
        self.tool.events.append("abort")


@dataclass(frozen=True)
class NestedTool(Tool):
    name: ClassVar[str] = "book"
    description: ClassVar[str] = "book a room"
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object", "required": ["room"],
        "properties": {
            "room": {"type": "object", "required": ["kind"], "additionalProperties": False,
                     "properties": {"kind": {"type": "string", "enum": ["single", "double"]},
                                    "floor": {"type": "integer"}}},
            "nights": {"type": "array", "items": {"type": "integer"}},
        },
    }
    isolation: ClassVar[Literal["process", "thread"]] = "thread"
    ran: list[dict[str, Any]] = field(default_factory=list, compare=False)

    def start(self) -> Invocation:
        return _NestedCall(self)


class _NestedCall(ArgumentInvocation):
    def run(self, arguments: dict[str, Any]) -> str:
        self.tool.ran.append(arguments)
        return "booked"


def _tool_class(**attrs: Any) -> type[Tool]:
    base = {"name": "t", "description": "d", "start": lambda self: None,
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}
    return type("AuthorTool", (Tool,), {**base, **attrs, "__module__": __name__})


# ---------------------------------------------------------------- registration


@pytest.mark.parametrize("name", ["bad name!", "", "x" * 65, "weather.today", None])
def test_a_bad_tool_name_is_refused_at_registration(name):
    with pytest.raises(ValueError, match="letters, digits"):
        ToolRuntime([_tool_class(name=name)()])


@pytest.mark.parametrize("parameters, match", [
    ({"type": "array"}, "type 'object'"),
    ({"q": {"type": "string"}}, "type 'object'"),  # properties written without the wrapper
    ({"type": "object", "properties": {"q": "string"}}, "map names to schemas"),
    ({"type": "object", "properties": {"q": {}}, "required": ["query"]}, "required"),
])
def test_a_schema_that_cannot_work_is_refused_at_registration(parameters, match):
    with pytest.raises(ValueError, match=match):
        ToolRuntime([_tool_class(parameters=parameters)()])


def test_a_main_argument_that_is_no_property_is_refused():
    with pytest.raises(ValueError, match="main_argument 'code'"):
        ToolRuntime([_tool_class(main_argument="code")()])


@dataclass(frozen=True)
class OtherEcho(EchoTool):
    description: ClassVar[str] = "another tool that happens to be called echo"


def test_a_second_tool_with_a_taken_name_is_refused():
    runtime = ToolRuntime([EchoTool()])
    runtime.add(EchoTool())  # the same tool again: a no-op
    with pytest.raises(ValueError, match="'echo' is already registered"):
        runtime.add(OtherEcho())
    assert type(runtime.tools["echo"]) is EchoTool


def test_a_tool_without_start_is_refused_at_registration():
    cls = _tool_class()
    del cls.start
    with pytest.raises(TypeError, match="must implement start"):
        ToolRuntime([cls()])


def test_a_process_tool_defined_in_main_is_refused_at_registration():
    cls = _tool_class()
    cls.__module__ = "__main__"  # a tool written in a script or a notebook
    with pytest.raises(ValueError, match="__main__"):
        ToolRuntime([cls()])
    cls.isolation = "thread"  # type: ignore[misc]
    assert ToolRuntime([cls()]).tools["t"]


def test_a_process_tool_that_does_not_pickle_is_refused_at_registration():
    @dataclass(frozen=True)
    class WithClient(EchoTool):
        client: Any = field(default_factory=threading.Lock)

    with pytest.raises(TypeError, match="does not pickle"):
        ToolRuntime([WithClient()])


def test_a_langchain_tool_passed_as_is_gets_a_clear_error():
    with pytest.raises(TypeError, match="from_langchain"):
        ToolRuntime([object()])  # type: ignore[list-item]


# ---------------------------------------------------------------- arguments


@pytest.mark.parametrize("arguments, match", [
    ({"room": {"kind": "suite"}}, r"argument 'room' field 'kind' must be one of"),
    ({"room": {"floor": 2}}, r"argument 'room' is missing required field\(s\) \['kind'\]"),
    ({"room": {"kind": "single", "view": "sea"}}, "unknown field 'view'"),
    ({"room": {"kind": "single", "floor": "2"}}, "field 'floor' must be integer"),
    ({"room": {"kind": "single"}, "nights": [1, "two"]}, "item 1 must be integer"),
])
def test_nested_arguments_are_checked_before_the_tool_runs(arguments, match):
    tool = NestedTool()
    with ToolRuntime([tool]) as runtime:
        observation = runtime.run("book", arguments)
    assert observation.is_error
    assert observation.rejected_at is not None  # at the argument, before finish
    assert tool.ran == []  # the tool never ran
    assert re.search(match, observation.text), observation.text


def test_valid_nested_arguments_reach_the_tool_as_written():
    tool = NestedTool()
    with ToolRuntime([tool]) as runtime:
        observation = runtime.run("book", {"room": {"kind": "double"}, "nights": [1, 2]})
    assert (observation.text, observation.is_error) == ("booked", False)
    assert tool.ran == [{"room": {"kind": "double"}, "nights": [1, 2]}]  # as written


# ---------------------------------------------------------------- results


@pytest.mark.parametrize("value", [42, b"\x00\xff", {"temp": 21}, None])
def test_a_result_that_is_not_text_is_an_error_observation(value):
    with ToolRuntime([LifecycleTool(result=lambda: value)]) as runtime:
        observation = runtime.run("lifecycle", {"x": "a"})
    assert observation.is_error
    assert f"returned {type(value).__name__}, not str" in observation.text


def test_an_async_run_is_awaited():
    async def answer() -> str:
        return "from a coroutine"

    with ToolRuntime([LifecycleTool(result=answer)]) as runtime:
        observation = runtime.run("lifecycle", {"x": "a"})
    assert (observation.text, observation.is_error) == ("from a coroutine", False)


def test_a_huge_result_is_cut_with_a_note():
    with ToolRuntime([LifecycleTool(result=lambda: "x" * (MAX_TEXT_CHARS + 5000))]) as runtime:
        observation = runtime.run("lifecycle", {"x": "a"})
    assert not observation.is_error
    assert observation.text.endswith("[... 5000 more characters cut]")


# ---------------------------------------------------------------- sessions


def test_a_session_is_opened_and_closed_once_across_calls():
    tool = LifecycleTool()
    with ToolRuntime([tool]) as runtime:
        runtime.run("lifecycle", {"x": "a"}, session="s")
        runtime.run("lifecycle", {"x": "b"}, session="s")
        runtime.close_session("s")
        _wait_for(lambda: "close" in tool.events)
    assert tool.events == ["open", "start", "value:a", "start", "value:b", "close"]


def test_a_new_call_aborts_the_unfinished_call_of_the_same_session():
    tool = LifecycleTool()
    with ToolRuntime([tool]) as runtime:
        first = runtime.start("lifecycle", session="s")
        first.feed(Piece("argument", key="x", value="a"))
        first.wait()
        second = runtime.run("lifecycle", {"x": "b"}, session="s")
        assert (second.text, second.is_error) == ("ok", False)
        assert first.observation is not None and "superseded" in first.observation.text
    assert tool.events[:5] == ["open", "start", "value:a", "abort", "start"]


def test_started_work_is_aborted_when_the_call_turns_out_invalid(tokenizer):
    tool = LifecycleTool()
    with ToolRuntime([tool]) as runtime:
        stream = ToolStream(tokenizer, runtime, session="s", wait_for_tools=True)
        assert stream.feed_text('<tool_call>{"name": "lifecycle", "arguments": {"x": "hi", ') \
            == "continue"
        assert tool.events == ["open", "start", "value:hi"]  # the tool started on "x"
        assert stream.feed_text('"y": 1, ') == "abort"  # no argument "y": rejected
        runtime.close_session("s")
        _wait_for(lambda: "close" in tool.events)
    assert stream.observations[-1].is_error
    assert tool.events == ["open", "start", "value:hi", "abort", "close"]


def test_an_argument_written_twice_rejects_the_call(tokenizer):
    tool = LifecycleTool()
    with ToolRuntime([tool]) as runtime:
        stream = ToolStream(tokenizer, runtime, session="s", wait_for_tools=True)
        stream.feed_text('<tool_call>{"name": "lifecycle", "arguments": {"x": "hi", ')
        assert stream.feed_text('"x": "bye"}}') == "abort"  # json.loads would keep "bye"
        runtime.close_session("s")
        _wait_for(lambda: "close" in tool.events)
    assert "argument 'x' twice" in stream.observations[-1].text
    assert tool.events == ["open", "start", "value:hi", "abort", "close"]


def _wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


# ---------------------------------------------------------------- LangChain


class Room(BaseModel):
    kind: Literal["single", "double"]


@pytest.fixture(scope="module")
def langchain_tools():
    return pytest.importorskip("langchain_agentrt.tools")


def test_from_langchain_keeps_the_definitions_of_nested_models(langchain_tools):
    from langchain_core.tools import tool

    @tool
    def book(room: Room, nights: int = 1) -> str:
        """Book a room."""
        return f"{room.kind} x{nights}"

    agentrt_tool = langchain_tools.from_langchain(book)
    assert agentrt_tool.parameters["properties"]["room"] == {"$ref": "#/$defs/Room"}
    assert agentrt_tool.parameters["$defs"]["Room"]["properties"]["kind"]["enum"] == \
        ["single", "double"]
    with ToolRuntime([agentrt_tool]) as runtime:
        assert runtime.run("book", {"room": {"kind": "double"}}).text == "double x1"
        wrong = runtime.run("book", {"room": {"kind": "suite"}})
    assert wrong.is_error and "Input should be 'single' or 'double'" in wrong.text


def test_from_langchain_runs_a_tool_that_has_only_a_coroutine(langchain_tools):
    from langchain_core.tools import StructuredTool

    async def lookup(query: str) -> str:
        return f"found {query}"

    lc_tool = StructuredTool.from_function(coroutine=lookup, name="lookup",
                                           description="async lookup")
    with ToolRuntime([langchain_tools.from_langchain(lc_tool)]) as runtime:
        observation = runtime.run("lookup", {"query": "x"})
    assert (observation.text, observation.is_error) == ("found x", False)


def test_from_langchain_takes_a_wall_time_limit(langchain_tools):
    from langchain_core.tools import tool

    @tool
    def stuck(query: str) -> str:
        """Never answers."""
        time.sleep(3)
        return "late"

    sandbox = dataclasses.replace(SandboxConfig.off(), max_wall_s=0.3)
    started = time.monotonic()
    with ToolRuntime([langchain_tools.from_langchain(stuck, sandbox=sandbox)]) as runtime:
        observation = runtime.run("stuck", {"query": "x"})
    assert observation.is_error and "wall-time limit of 0.3 s" in observation.text
    assert time.monotonic() - started < 2.5


def test_to_langchain_keeps_the_schema_of_the_agentrt_tool(langchain_tools):
    runtime = ToolRuntime()
    with runtime:
        lc_tool = langchain_tools.to_langchain(NestedTool(), runtime)
        assert lc_tool.args == dict(NestedTool.parameters["properties"])  # enum, nesting kept
        assert lc_tool.invoke({"room": {"kind": "single"}}) == "booked"
        refused = lc_tool.invoke({"room": {"kind": "suite"}})
        # an optional argument sent as null (OpenAI's strict mode) is left out, as before
        assert lc_tool.invoke({"room": {"kind": "single"}, "nights": None}) == "booked"
    assert "must be one of ['single', 'double']" in refused


def test_to_langchain_still_takes_a_plain_string_input(langchain_tools):
    with ToolRuntime() as runtime:
        calculator = langchain_tools.to_langchain("calculator", runtime)
        assert calculator.invoke("6*7") == "42"


# ---------------------------------------------------------------- on the engine

CALL = '<tool_call>{"name": "lifecycle", "arguments": {"x": "'


@pytest.fixture(scope="module")
def prompt(engine):
    return engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": "Record hi."}], add_generation_prompt=True, tokenize=False
    )


def test_run_with_tools_closes_its_own_tool_session_when_it_ends(engine, prompt):
    tool = LifecycleTool()
    with ToolRuntime([tool]) as runtime:
        for _ in range(2):
            run_with_tools(engine, prompt, SamplingParams(max_tokens=4), tools=runtime,
                           reply_prefix=CALL + 'hi"}}</tool_call>', max_calls=0)
            assert runtime._slots == {}  # no worker left behind by the run
        # NOTE: the worker thread runs close() after the run hands it the close message
        _wait_for(lambda: tool.events.count("close") == 2)
        assert tool.events.count("open") == tool.events.count("close") == 2


def test_run_with_tools_continues_a_named_tool_session(engine, prompt):
    tool = LifecycleTool()
    with ToolRuntime([tool]) as runtime:
        for _ in range(2):
            run = run_with_tools(engine, prompt, SamplingParams(max_tokens=4), tools=runtime,
                                 session="agent-1", reply_prefix=CALL + 'hi"}}</tool_call>',
                                 max_calls=0)
            assert run.observations[0].text == "ok"
        assert list(runtime._slots) == [("agent-1", "lifecycle")]
        assert tool.events.count("open") == 1 and "close" not in tool.events
        runtime.close_session("agent-1")
        _wait_for(lambda: "close" in tool.events)
    assert tool.events.count("close") == 1


def test_a_call_cut_by_max_tokens_is_aborted_and_its_session_closed(engine, prompt):
    tool = LifecycleTool()
    with ToolRuntime([tool]) as runtime:
        run = run_with_tools(engine, prompt, SamplingParams(max_tokens=1), tools=runtime,
                             reply_prefix=CALL + "h", max_calls=0)
        _wait_for(lambda: "close" in tool.events)
    assert run.segments[0].output.finish_reason == "length"
    observation = run.observations[0]
    assert observation.is_error and "truncated tool call" in observation.text
    assert tool.events == ["open", "start", "abort", "close"]


def test_two_concurrent_runs_share_a_runtime_but_not_a_tool_session(engine, prompt):
    tool = LifecycleTool()
    runs: list[Any] = []
    with ToolRuntime([tool]) as runtime:
        def one_run() -> None:
            runs.append(run_with_tools(
                engine, prompt, SamplingParams(max_tokens=4), tools=runtime,
                reply_prefix=CALL + 'hi"}}</tool_call>', max_calls=0))

        threads = [threading.Thread(target=one_run) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert runtime._slots == {}
    assert [run.observations[0].text for run in runs] == ["ok", "ok"]
    assert tool.events.count("open") == tool.events.count("close") == 2


def test_a_stop_string_inside_the_call_still_runs_it(engine, prompt):
    tool = LifecycleTool()
    with ToolRuntime([tool]) as runtime:
        run = run_with_tools(engine, prompt, SamplingParams(max_tokens=12, stop=["}}"]),
                             tools=runtime, reply_prefix=CALL + 'hi"', max_calls=1)
    first = run.segments[0]
    assert first.output.finish_reason == "stop" and first.observation is not None
    assert first.observation.text == "ok"
    # the stop string's tokens stay in the context: the observation follows the call's "}}"
    assert engine.tokenizer.decode(list(first.output.token_ids)).endswith("}}")
    assert engine.tokenizer.decode(list(first.appended_ids)).startswith("</tool_call>")


@pytest.mark.parametrize("max_calls", [-1, 1.5])
def test_a_negative_max_calls_is_refused(engine, max_calls):
    with pytest.raises(ValueError, match="max_calls"):
        run_with_tools(engine, "hi", SamplingParams(max_tokens=1), tools=[EchoTool()],
                       max_calls=max_calls)


@pytest.fixture(scope="module")
def tiny_engine(tiny_model):
    """The 2-layer random model (1,024 positions): a context fills up in a fraction of a second."""
    from agentrt import Engine

    engine = Engine(model=tiny_model, dtype="float32")
    yield engine
    engine.close()


def test_an_observation_longer_than_the_context_is_cut_to_fit(tiny_engine):
    tool = LifecycleTool(result=lambda: "word " * 3000)  # 3,000+ tokens, 1,024 positions
    params = SamplingParams(max_tokens=8)
    with ToolRuntime([tool]) as runtime:
        run = run_with_tools(tiny_engine, "Record hi.", params, tools=runtime,
                             reply_prefix=CALL + 'hi"}}</tool_call>', max_calls=1)
    first, last = run.segments
    assert first.observation is not None
    assert first.observation.text.endswith("characters cut: the observation did not fit the "
                                           "model's context]")
    assert first.observation.text.startswith("word word")
    context_len = len(tiny_engine.tokenizer.encode(
        "Record hi." + CALL + 'hi"}}</tool_call>', add_special_tokens=False))
    used = context_len + len(first.output.token_ids) + len(first.appended_ids)
    assert used + params.max_tokens <= tiny_engine.max_model_len
    assert len(last.output.token_ids) >= 1  # the model answered after it


@dataclass(frozen=True)
class StartFailsOnce(LifecycleTool):
    """A session whose first ``start()`` raises (a connection the call needs is down)."""

    name: ClassVar[str] = "start_fails_once"

    def open_session(self, workdir: Path) -> ToolSession:
        self.events.append("open")
        return _StartFailsOnceSession(self)


class _StartFailsOnceSession(_LifecycleSession):
    def start(self) -> Invocation:
        if "failed" not in self.tool.events:
            self.tool.events.append("failed")
            raise ConnectionError("the database is down")
        return super().start()


def test_a_session_whose_start_raises_fails_that_call_not_the_worker():
    """The error is the call's observation; the worker and its session serve the next
    call, and the session still closes once."""
    tool = StartFailsOnce()
    with ToolRuntime([tool]) as runtime:
        failed = runtime.run("start_fails_once", {"x": "a"}, session="s")
        assert failed.is_error and "the database is down" in failed.text
        again = runtime.run("start_fails_once", {"x": "b"}, session="s")
        assert (again.text, again.is_error) == ("ok", False)
        runtime.close_session("s")
        _wait_for(lambda: "close" in tool.events)
    assert tool.events == ["open", "failed", "start", "value:b", "close"]


def test_a_huge_wrong_argument_is_named_not_repeated_in_the_observation():
    """The message of a wrong argument becomes the model's observation: a megabyte-long or
    deeply nested value is shown cut, not whole."""
    from agentrt.agent.plugin import ToolCallError, check_argument

    schema = {"type": "object", "properties": {"q": {"type": "string"},
                                               "kind": {"enum": ["a", "b"]}}}
    nested: list = []
    for _ in range(500):
        nested = [nested]
    for key, value in (("q", ["x" * 100_000] * 1_000), ("q", nested), ("kind", "z" * 1_000_000)):
        with pytest.raises(ToolCallError) as err:
            check_argument(schema, key, value)
        assert str(err.value).startswith(f"argument {key!r} must be")
        assert len(str(err.value)) < 400
