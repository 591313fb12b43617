"""agentrt.Executor against AgentExecutor's documented contract, as an existing program uses
it: fields, inputs and outputs, tools of every shape, streaming, iteration, callbacks,
concurrency and cancellation.

Most runs use a *scripted* ReAct agent (a fixed turn per step, parsed by LangChain's own ReAct
parser) so that both executors are compared on the same steps; the model runs where the
session matters (a tool's own model calls, batches, cancellation, streamed events).
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from langchain_classic.agents import AgentExecutor, create_react_agent
from langchain_classic.agents.output_parsers import ReActSingleInputOutputParser
from langchain_core.agents import AgentAction, AgentFinish
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import StructuredTool, ToolException, tool

import agentrt
from agentrt.session import current_scope
from langchain_agentrt import ChatAgentRT
from langchain_agentrt.react import react_prompt

BOTH = (AgentExecutor, agentrt.Executor)
LIST_FRUITS = "List three fruits, one per line."


def scripted(*turns, parser=True, seen: list | None = None):
    """A ReAct agent whose step after i steps is ``turns[i]`` (text, or an AgentAction /
    AgentFinish; the last one repeats); it records the scratchpads it was shown in ``seen``."""
    seen = [] if seen is None else seen

    def step(inputs):
        steps = list(inputs["intermediate_steps"])
        seen.append(steps)
        return turns[min(len(steps), len(turns) - 1)]

    return RunnableLambda(step) | ReActSingleInputOutputParser() if parser \
        else RunnableLambda(step)


def act(tool_name: str, tool_input: str) -> str:
    return f"I will use {tool_name}.\nAction: {tool_name}\nAction Input: {tool_input}"


FINAL = "I know it.\nFinal Answer: done"


@tool
def shout(text: str) -> str:
    """Upper-case the text."""
    return text.upper()


def compare(make, call=lambda ex: ex.invoke({"input": "q"})):
    """(AgentExecutor's, agentrt.Executor's) result or raised exception of ``call``."""
    results = []
    for cls in BOTH:
        try:
            results.append(call(make(cls)))
        except Exception as exc:  # noqa: BLE001 - what the run raised is the result compared
            results.append((type(exc), str(exc)))
    return results


def plain_steps(result) -> list[tuple]:
    return [(a.tool, a.tool_input, a.log, repr(obs)) for a, obs in result["intermediate_steps"]]


# --- a tool's own model calls ------------------------------------------------------------------
@pytest.fixture(scope="module")
def writer(engine):
    return ChatAgentRT(engine=engine, max_tokens=48)


def test_a_tools_own_model_calls_are_not_steps_of_the_agent_run(writer):
    """A tool that calls the model itself (a summarizer, LLMMathChain) got the run's ReAct
    grammar and partial execution: its answer was forced into "Thought/Action" lines."""
    seen_grammar = []

    @tool
    def fruits(topic: str) -> str:
        """Ask the model for fruits."""
        scope = current_scope()
        seen_grammar.append(getattr(scope, "grammar", None))
        return writer.invoke(LIST_FRUITS).content

    alone = writer.invoke(LIST_FRUITS).content
    assert "\n" in alone  # several lines: what the ReAct grammar cannot produce
    for use_async in (False, True):
        ex = agentrt.Executor(agent=scripted(act("fruits", "any"), FINAL), tools=[fruits],
                              return_intermediate_steps=True)
        out = asyncio.run(ex.ainvoke({"input": "q"})) if use_async else ex.invoke({"input": "q"})
        assert out["intermediate_steps"][0][1] == alone
        assert ex.session_stats.num_calls == 0  # the tool's call is not the agent's
    assert seen_grammar == [None, None]


def test_a_legacy_mrkl_agent_gets_its_action_input_clean(engine):
    """``ZeroShotAgent`` (``initialize_agent``'s ReAct) stops at "\nObservation:"; the ReAct
    grammar ended an action with "\nObservation", so the stop never matched and the tool's
    input read "search\nObservation"."""
    from langchain_classic.agents import ZeroShotAgent

    @tool
    def search(query: str) -> str:
        """Search the web for facts."""
        return "Paris"

    llm = ChatAgentRT(engine=engine, max_tokens=64)  # constrained: the ReAct grammar
    agent = ZeroShotAgent.from_llm_and_tools(llm, [shout, search])
    ex = agentrt.Executor(agent=agent, tools=[shout, search], max_iterations=1,
                          return_intermediate_steps=True)
    steps = ex.invoke({"input": "Search the web for the capital of France."})
    (action, observation), = steps["intermediate_steps"]
    assert action.tool == "search" and "Observation" not in action.tool_input, action


# --- inputs and outputs --------------------------------------------------------------------------
@pytest.mark.parametrize("options", [
    {}, {"return_intermediate_steps": True}, {"max_iterations": None},
    {"return_intermediate_steps": True, "trim_intermediate_steps": 1, "max_iterations": 3},
    {"return_intermediate_steps": True, "trim_intermediate_steps": lambda s: s[::-1]},
    {"verbose": True}, {"max_execution_time": 0.0, "return_intermediate_steps": True},
])
def test_outputs_and_scratchpads_are_agentexecutors(options):
    turns = (act("shout", "a"), act("shout", "b"), act("nope", "c"), FINAL)
    seen: dict = {cls: [] for cls in BOTH}

    def make(cls):
        return cls(agent=scripted(*turns, seen=seen[cls]), tools=[shout], **options)

    ref, got = compare(make, lambda ex: ex.invoke({"input": "q", "extra": 1}))
    assert got.keys() == ref.keys() and got["output"] == ref["output"]
    if "intermediate_steps" in ref:
        assert plain_steps(got) == plain_steps(ref)
        assert all(isinstance(a, AgentAction) for a, _ in got["intermediate_steps"])
        if not {"trim_intermediate_steps", "max_execution_time"} & set(options):
            assert "nope is not a valid tool" in got["intermediate_steps"][2][1]
    shown = lambda cls: [[(a.tool, o) for a, o in s] for s in seen[cls]]  # noqa: E731
    assert shown(agentrt.Executor) == shown(AgentExecutor)


@pytest.mark.parametrize("call", [
    lambda ex: ex.invoke({"input": "q"}, return_only_outputs=True),
    lambda ex: ex.invoke("a bare string"),
    lambda ex: ex.invoke({"question": "no input key"}),
    lambda ex: ex.batch([{"input": "a"}, {"input": "b"}]),
    lambda ex: asyncio.run(ex.abatch([{"input": "a"}, {"input": "b"}])),
    lambda ex: list(ex.iter({"input": "q"})),
])
def test_call_forms_give_what_agentexecutor_gives(call):
    def make(cls):
        return cls.from_agent_and_tools(agent=scripted(act("shout", "x"), FINAL),
                                        tools=[shout])

    ref, got = compare(make, call)
    assert repr(got) == repr(ref)


def test_chat_history_messages_pass_through():
    from langchain_core.messages import AIMessage, HumanMessage

    history = [HumanMessage("My name is Ada."), AIMessage("Hello Ada.")]
    got = {}

    def make(cls):
        def step(inputs):
            got[cls] = inputs["chat_history"]
            return AgentFinish({"output": "ok"}, "")
        return cls(agent=RunnableLambda(step), tools=[shout])

    ref, ours = compare(make, lambda ex: ex.invoke({"input": "q", "chat_history": history}))
    assert ours == ref and got[agentrt.Executor] == got[AgentExecutor] == history


# --- tools -----------------------------------------------------------------------------------
def _tools():
    @tool(return_direct=True)
    def direct(text: str) -> str:
        """Answer directly."""
        return f"direct: {text}"

    async def _aonly(text: str) -> str:
        return f"async {text}"

    aonly = StructuredTool.from_function(coroutine=_aonly, name="aonly",
                                         description="Async only.")

    @tool
    def as_dict(text: str) -> dict:
        """A dict."""
        return {"text": text, "n": 1}

    @tool
    def as_int(text: str) -> int:
        """An int."""
        return 7

    @tool
    def as_none(text: str) -> None:
        """Nothing."""

    @tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @tool
    def failing(text: str) -> str:
        """Raises a ToolException."""
        raise ToolException("no such word")

    @tool
    def crashing(text: str) -> str:
        """Raises a ValueError."""
        raise ValueError("crashed")

    handled = failing.model_copy(update={"name": "handled", "handle_tool_error": True})
    return [direct, aonly, as_dict, as_int, as_none, add, failing, crashing, handled]


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("action", [
    AgentAction("direct", "hi", "log"), AgentAction("aonly", "hi", "log"),
    AgentAction("as_dict", "hi", "log"), AgentAction("as_int", "hi", "log"),
    AgentAction("as_none", "hi", "log"), AgentAction("add", {"a": 2, "b": 40}, "log"),
    AgentAction("add", {"a": "two"}, "log"), AgentAction("failing", "hi", "log"),
    AgentAction("crashing", "hi", "log"), AgentAction("handled", "hi", "log"),
    AgentAction("hallucinated", "hi", "log"),
], ids=lambda a: f"{a.tool}-{type(a.tool_input).__name__}")
def test_every_tool_shape_is_run_as_agentexecutor_runs_it(engine, action, use_async):
    def make(cls):
        return cls(agent=scripted(action, AgentFinish({"output": "end"}, ""), parser=False),
                   tools=_tools(), return_intermediate_steps=True)

    def call(ex):
        inputs = {"input": "q"}
        out = asyncio.run(ex.ainvoke(inputs)) if use_async else ex.invoke(inputs)
        return out["output"], plain_steps(out)

    ref, got = compare(make, call)
    assert got == ref
    assert not [r for r in engine.core.requests if r.startswith("session-")]


@pytest.mark.parametrize("method", ["force", "generate"])
def test_early_stopping_methods(method):
    ref, got = compare(lambda cls: cls(agent=scripted(act("shout", "a")), tools=[shout],
                                       max_iterations=2, early_stopping_method=method))
    assert got == ref


@pytest.mark.parametrize("flag", [True, "Follow the format.", lambda e: f"bad: {e}"[:20]])
def test_handle_parsing_errors(flag):
    ref, got = compare(lambda cls: cls(agent=scripted("no format here", FINAL), tools=[shout],
                                       handle_parsing_errors=flag,
                                       return_intermediate_steps=True),
                       lambda ex: plain_steps(ex.invoke({"input": "q"})))
    assert got == ref and got[0][0] == "_Exception"


# --- streaming, callbacks ------------------------------------------------------------------------
class Recorder(BaseCallbackHandler):
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def on_agent_action(self, action, **kwargs):
        self.events.append(("agent_action", action.tool, action.tool_input))

    def on_tool_start(self, serialized, input_str, **kwargs):
        self.events.append(("tool_start", serialized.get("name"), input_str))

    def on_tool_end(self, output, **kwargs):
        self.events.append(("tool_end", str(output)))

    def on_agent_finish(self, finish, **kwargs):
        self.events.append(("agent_finish", finish.return_values))


def _chunk(chunk) -> tuple:
    return tuple(sorted(chunk)), repr(chunk.get("output")), \
        [(a.tool, a.tool_input) for a in chunk.get("actions", ())]


@pytest.mark.parametrize("form", ["stream", "astream", "iter", "aiter"])
def test_streamed_chunks_and_callbacks_match_and_stay_inside_the_run(writer, form):
    """Between two chunks the caller's code ran inside the run's session scope: its own model
    calls got the run's ReAct grammar (and counted as the agent's)."""
    alone = writer.invoke(LIST_FRUITS).content
    results = {}
    for cls in BOTH:
        recorder = Recorder()
        ex = cls(agent=scripted(act("shout", "a"), FINAL), tools=[shout],
                 callbacks=[recorder], tags=["t"], metadata={"m": 1})
        chunks, between, answers = _consume(ex, form, writer)
        assert between == [None] * len(chunks) and answers == [alone]
        results[cls] = chunks, recorder.events
    assert results[agentrt.Executor] == results[AgentExecutor]


def _consume(ex, form: str, writer) -> tuple[list, list, list]:
    """(chunks, the run scope the caller's code saw after each, the caller's own model answer
    after the first chunk) of one streamed run."""
    chunks, between, answers = [], [], []
    prompt = {"input": "q"}

    def seen(chunk) -> bool:
        chunks.append(_chunk(chunk))
        between.append(current_scope())
        return len(chunks) == 1

    if form in ("stream", "iter"):
        for chunk in (ex.stream(prompt) if form == "stream" else ex.iter(prompt)):
            if seen(chunk):
                answers.append(writer.invoke(LIST_FRUITS).content)
        return chunks, between, answers

    async def consume():
        async for chunk in (ex.astream(prompt) if form == "astream" else ex.iter(prompt)):
            if seen(chunk):
                answers.append((await writer.ainvoke(LIST_FRUITS)).content)

    asyncio.run(consume())
    return chunks, between, answers


def test_a_stream_consumed_step_by_step_in_fresh_contexts_is_one_run():
    """A server that iterates a sync generator in a thread pool (Starlette's
    ``iterate_in_threadpool``: each ``next`` in a copy of the caller's context) got steps
    after the first outside the run, and a ValueError from the scope's reset at the end."""
    import contextvars

    scopes = []

    def step(inputs):
        scopes.append(current_scope())
        return FINAL if inputs["intermediate_steps"] else act("shout", "a")

    agent = RunnableLambda(step) | ReActSingleInputOutputParser()
    chunks = agentrt.Executor(agent=agent, tools=[shout]).stream({"input": "q"})
    got = []
    while (chunk := contextvars.copy_context().run(next, chunks, None)) is not None:
        got.append(chunk)
    assert got[-1]["output"] == "done"
    assert len(scopes) == 2 and scopes[0] is not None and scopes[0] is scopes[1]

    async def each_step_in_a_task():  # asyncio.wait_for runs each __anext__ as a task
        chunks = agentrt.Executor(agent=agent, tools=[shout]).astream({"input": "q"})
        try:
            while True:
                got.append(await asyncio.wait_for(anext(chunks), 30))
        except StopAsyncIteration:
            pass

    got, scopes = [], []
    asyncio.run(each_step_in_a_task())
    assert got[-1]["output"] == "done"
    assert len(scopes) == 2 and scopes[0] is not None and scopes[0] is scopes[1]


def test_astream_events_v2(engine):
    """The same events, in the same order, on the real model (a session changes no output)."""
    llm = ChatAgentRT(engine=engine, max_tokens=32, constrained=False)
    agent = create_react_agent(llm, [shout], react_prompt())

    async def events(cls):
        ex = cls(agent=agent, tools=[shout], max_iterations=2, handle_parsing_errors=True)
        return [(e["event"], e["name"]) async for e in ex.astream_events(
            {"input": "Shout the word hi."}, version="v2")]

    ref, got = (asyncio.run(events(cls)) for cls in BOTH)
    assert got == ref
    names = {event for event, _ in got}
    assert {"on_chat_model_stream", "on_tool_start", "on_tool_end"} <= names, names


# --- concurrency, cancellation ------------------------------------------------------------------
@pytest.fixture(scope="module")
def react_llm(engine):
    return ChatAgentRT(engine=engine, max_tokens=64)


@tool
def whisper(text: str) -> str:
    """Lower-case the text."""
    return text.lower()


def _react(llm, tool_=shout):
    return agentrt.Executor(agent=create_react_agent(llm, [tool_], react_prompt()),
                            tools=[tool_], max_iterations=2, return_intermediate_steps=True,
                            handle_parsing_errors=True)


def _used_tools(results) -> set[str]:
    return {a.tool for r in results for a, _ in r["intermediate_steps"]}


def test_batches_and_two_executors_on_one_engine(react_llm, engine):
    """Concurrent runs keep their own sessions: under each run's ReAct grammar a step names
    only that executor's tools, and every session is freed."""
    questions = [{"input": f"Shout the word {w}."} for w in ("apple", "pear")]
    got = _react(react_llm).batch(questions)
    got += asyncio.run(_react(react_llm).abatch(questions))
    assert all(set(r) == {"input", "output", "intermediate_steps"} for r in got)
    assert _used_tools(got) == {"shout"}
    outs: dict[str, list] = {"shout": [], "whisper": []}

    def run(tool_):
        outs[tool_.name].append(_react(react_llm, tool_).invoke(questions[0]))

    threads = [threading.Thread(target=run, args=(t,)) for t in (shout, whisper)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert _used_tools(outs["shout"]) == {"shout"} and _used_tools(outs["whisper"]) == \
        {"whisper"}
    assert not [r for r in engine.core.requests if r.startswith("session-")]


def test_iter_is_one_session_run(react_llm, engine):
    """``iter`` ran the agent's model calls outside any session (``session_stats`` None)."""
    ex = _react(react_llm)
    steps = list(ex.iter({"input": "Shout the word apple."}))
    assert "output" in steps[-1] and ex.session_stats.num_calls >= 1
    assert not [r for r in engine.core.requests if r.startswith("session-")]


async def _last(chunks):
    async for chunk in chunks:
        last = chunk
    return last


@pytest.mark.parametrize("call", ["ainvoke", "astream"])
def test_a_cancelled_run_frees_its_session_and_the_engine_goes_on(react_llm, engine, call):
    question = {"input": "Shout the word apple."}
    before = _react(react_llm).invoke(question)

    async def cancel_midway():
        ex = _react(react_llm)
        run = ex.ainvoke(question) if call == "ainvoke" else _last(ex.astream(question))
        task = asyncio.ensure_future(run)
        while not [r for r in engine.core.requests if r.startswith("session-")]:
            assert not task.done()
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_midway())
    time.sleep(0.2)
    assert not [r for r in engine.core.requests if r.startswith("session-")]
    assert _react(react_llm).invoke(question)["output"] == before["output"]


def test_max_execution_time_during_a_model_call_frees_its_session(react_llm, engine):
    ex = _react(react_llm)
    ex.max_execution_time = 0.05  # NOTE: the first prompt's prefill alone takes longer
    out = asyncio.run(ex.ainvoke({"input": "Shout the word apple."}))
    assert out["output"] == "Agent stopped due to iteration limit or time limit."
    time.sleep(0.2)
    assert not [r for r in engine.core.requests if r.startswith("session-")]


@pytest.mark.parametrize("cls", BOTH)
@pytest.mark.parametrize("stop", ["max_execution_time", "cancel"])
def test_a_stopped_async_run_stops_its_tool(cls, stop):
    """The run's tool went on in the background after a timeout or a cancel (and did what it
    was about to do); under AgentExecutor it is cancelled."""
    finished = []

    async def _slow(text: str) -> str:
        await asyncio.sleep(0.5)
        finished.append(text)
        return "late"

    slow = StructuredTool.from_function(coroutine=_slow, name="slow", description="Slow.")
    ex = cls(agent=scripted(act("slow", "x"), FINAL), tools=[slow],
             max_execution_time=0.1 if stop == "max_execution_time" else None)

    async def main():
        task = asyncio.ensure_future(ex.ainvoke({"input": "q"}))
        if stop == "cancel":
            await asyncio.sleep(0.1)
            task.cancel()
        try:
            out = await task
            assert out["output"] == "Agent stopped due to iteration limit or time limit."
        except asyncio.CancelledError:
            assert stop == "cancel"
        await asyncio.sleep(0.8)

    asyncio.run(main())
    assert finished == []
