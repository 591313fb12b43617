"""A tool that raises: agentrt.Executor does exactly what AgentExecutor does — the same
exception, callbacks and outputs, with LangChain's ``BaseTool.handle_tool_error`` (True / a
string / a callable) — and turns exceptions into observations only when asked to.

The agent is a tool-calling agent on the real model with ``tool_choice="any"``, so every step
is a (grammar-constrained) call of the raising tool under both executors.
"""

from __future__ import annotations

import pytest
from langchain_classic.agents import AgentExecutor
from langchain_classic.agents.format_scratchpad.tools import format_to_tool_messages
from langchain_classic.agents.output_parsers.tools import ToolsAgentOutputParser
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough
from langchain_core.tools import ToolException, tool

import agentrt

PROMPT = ChatPromptTemplate.from_messages([
    ("system", "You look words up with the lookup tool."),
    ("human", "{input}"), ("placeholder", "{agent_scratchpad}")])
QUESTION = {"input": "Look up the word 'agent'."}


class Recorder(BaseCallbackHandler):
    """The callback events of a run, in order (names and what they carry that matters)."""

    def __init__(self) -> None:
        self.events: list[tuple] = []

    def on_chain_error(self, error, **kwargs):
        self.events.append(("chain_error", type(error).__name__, str(error)))

    def on_agent_action(self, action, **kwargs):
        self.events.append(("agent_action", action.tool))

    def on_tool_start(self, serialized, input_str, **kwargs):
        self.events.append(("tool_start", serialized.get("name")))

    def on_tool_end(self, output, **kwargs):
        self.events.append(("tool_end", str(getattr(output, "content", output))))

    def on_tool_error(self, error, **kwargs):
        self.events.append(("tool_error", type(error).__name__, str(error)))

    def on_agent_finish(self, finish, **kwargs):
        self.events.append(("agent_finish", finish.return_values.get("output")))


@pytest.fixture(scope="module")
def llm(engine):
    from langchain_agentrt import ChatAgentRT

    return ChatAgentRT(engine=engine, max_tokens=32)


def make_tool(exc: Exception, handle_tool_error=False):
    @tool
    def lookup(word: str) -> str:
        """Look a word up in the dictionary."""
        raise exc

    lookup.handle_tool_error = handle_tool_error
    return lookup


def calling_agent(llm, tools):
    """``create_tool_calling_agent`` with ``tool_choice="any"``: every step calls a tool."""
    return (RunnablePassthrough.assign(
        agent_scratchpad=lambda x: format_to_tool_messages(x["intermediate_steps"]))
        | PROMPT | llm.bind_tools(tools, tool_choice="any") | ToolsAgentOutputParser())


def run(cls, llm, tool_, *, use_async=False, **options):
    """(output or exception, callback events) of one run of ``cls``."""
    import asyncio

    recorder = Recorder()
    executor = cls(agent=calling_agent(llm, [tool_]), tools=[tool_], max_iterations=1,
                   return_intermediate_steps=True, **options)
    config = {"callbacks": [recorder]}
    try:
        if use_async:
            result = asyncio.run(executor.ainvoke(QUESTION, config))
        else:
            result = executor.invoke(QUESTION, config)
    except Exception as exc:  # noqa: BLE001 - what the run raised is the result compared
        return exc, recorder.events
    steps = [(a.tool, a.tool_input, str(obs)) for a, obs in result["intermediate_steps"]]
    return (result["output"], steps), recorder.events


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("exc", [RuntimeError("the dictionary is offline"),
                                 ToolException("the dictionary is offline")])
def test_a_raising_tool_raises_the_same_under_both(llm, engine, exc, use_async):
    ref, ref_events = run(AgentExecutor, llm, make_tool(exc), use_async=use_async)
    got, got_events = run(agentrt.Executor, llm, make_tool(exc), use_async=use_async)
    assert type(got) is type(ref) is type(exc) and str(got) == str(ref)
    assert got_events == ref_events
    assert ("tool_error", type(exc).__name__, str(exc)) in got_events
    assert not [r for r in engine.core.requests if r.startswith("session-")]  # KV freed


@pytest.mark.parametrize("flag,observation", [
    (True, "the dictionary is offline"),
    ("the tool failed, try another word", "the tool failed, try another word"),
    (lambda e: f"lookup failed: {e}", "lookup failed: the dictionary is offline"),
])
def test_langchains_handle_tool_error_is_reproduced(llm, flag, observation):
    exc = ToolException("the dictionary is offline")
    ref, ref_events = run(AgentExecutor, llm, make_tool(exc, flag))
    got, got_events = run(agentrt.Executor, llm, make_tool(exc, flag))
    assert got == ref and got_events == ref_events
    output, steps = got
    assert [obs for _, _, obs in steps] == [observation]
    # LangChain applies a tool's flag to ToolException only: anything else still raises
    raised, _ = run(agentrt.Executor, llm, make_tool(RuntimeError("x"), flag))
    assert isinstance(raised, RuntimeError)


@pytest.mark.parametrize("flag,observation", [
    (True, "the dictionary is offline"),
    ("failed", "failed"),
    (lambda e: type(e).__name__, "RuntimeError"),
])
def test_the_executor_default_is_opt_in(llm, flag, observation):
    exc = RuntimeError("the dictionary is offline")
    got, events = run(agentrt.Executor, llm, make_tool(exc), handle_tool_error=flag)
    output, steps = got
    assert [obs for _, _, obs in steps] == [observation]
    assert output.startswith("Agent stopped")
    assert events.count(("tool_error", "RuntimeError", str(exc))) == 1
    # a tool's own flag wins over the Executor's default
    got, _ = run(agentrt.Executor, llm, make_tool(ToolException("no"), "own"),
                 handle_tool_error=flag)
    assert [obs for _, _, obs in got[1]] == ["own"]


def test_a_slow_tool_gets_a_timeout_observation_only_when_asked(llm):
    import time

    @tool
    def slow(word: str) -> str:
        """Look a word up, slowly."""
        time.sleep(1.5)
        return "late"

    executor = agentrt.Executor(agent=calling_agent(llm, [slow]), tools=[slow],
                                max_iterations=1, return_intermediate_steps=True,
                                tool_timeout=0.3)
    steps = executor.invoke(QUESTION)["intermediate_steps"]
    assert [obs for _, obs in steps] == ["Error: the tool took longer than 0.3s"]
