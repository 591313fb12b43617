"""agentrt.Executor is AgentExecutor, run as one engine session: same steps and answers on
the real model with real tools, fewer tokens prefilled, KV freed at the end."""

from __future__ import annotations

import itertools
import sqlite3

import pytest
from langchain_classic.agents import AgentExecutor, create_react_agent, create_tool_calling_agent
from langchain_core.prompts import ChatPromptTemplate

import agentrt
from agentrt.agent import ToolRuntime
from langchain_agentrt.react import react_prompt
from langchain_agentrt.tools import to_langchain

REACT = react_prompt()
CALLING = ChatPromptTemplate.from_messages([
    ("system", "You are a helpful assistant. Use the tools when they help."),
    ("human", "{input}"), ("placeholder", "{agent_scratchpad}")])

TASKS = [
    ("calculator", "What is 17 * 23?"),
    ("calculator", "Compute 2 ** 10 - 1."),
    ("sqlite", "How many rows does the fruit table have?"),
    ("sqlite", "What is the price of a banana in the fruit table?"),
    ("python_repl", "Use Python to print the sum of the numbers from 1 to 100."),
    ("python_repl", "Use Python to reverse the string 'agent'."),
    ("search", "Search the documentation: what does json.dumps do?"),
    ("search", "Search for the module that implements heap queues."),
]
_runs = itertools.count()


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    db = tmp_path_factory.mktemp("executor") / "shop.db"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE fruit (name TEXT, price REAL)")
        con.executemany("INSERT INTO fruit VALUES (?, ?)",
                        [("apple", 0.5), ("banana", 0.25), ("cherry", 3.0)])
    from agentrt_tools import SqliteTool

    with ToolRuntime(["calculator", "python_repl", SqliteTool(path=str(db)), "search"]) as rt:
        yield rt


def tools_for(runtime, name: str) -> list:
    """Fresh tool sessions per run, so that one run's REPL state cannot leak into another."""
    session = f"executor-{next(_runs)}"
    return [to_langchain(n, runtime, session=session) for n in ("calculator", name)] \
        if name != "calculator" else [to_langchain("calculator", runtime, session=session)]


def run_both(llm, runtime, make_agent, tool_name, question, **options):
    results = []
    for cls in (AgentExecutor, agentrt.Executor):
        tools = tools_for(runtime, tool_name)
        executor = cls(agent=make_agent(llm, tools), tools=tools, return_intermediate_steps=True,
                       max_iterations=2, handle_parsing_errors=True, **options)
        results.append((executor, executor.invoke({"input": question})))
    return results


def steps(result) -> list[tuple]:
    return [(a.tool, a.tool_input, a.log, str(obs)) for a, obs in result["intermediate_steps"]]


@pytest.fixture(scope="module")
def plain(engine):
    from langchain_agentrt import ChatAgentRT

    return ChatAgentRT(engine=engine, max_tokens=32, constrained=False)


@pytest.mark.parametrize("tool_name,question", TASKS)
def test_react_agent_same_steps_and_answer(plain, runtime, tool_name, question):
    make = lambda llm, tools: create_react_agent(llm, tools, REACT)  # noqa: E731
    (_, ref), (ours, got) = run_both(plain, runtime, make, tool_name, question)
    assert steps(got) == steps(ref) and got["output"] == ref["output"]
    stats = ours.session_stats
    assert stats.num_calls == len(ref["intermediate_steps"]) + ("Agent stopped" not in
                                                                 ref["output"])
    assert stats.num_prefill_tokens < stats.num_prompt_tokens or stats.num_calls == 1


@pytest.mark.parametrize("tool_name,question", TASKS)
def test_tool_calling_agent_same_steps_and_answer(plain, runtime, tool_name, question):
    make = lambda llm, tools: create_tool_calling_agent(llm, tools, CALLING)  # noqa: E731
    (_, ref), (_, got) = run_both(plain, runtime, make, tool_name, question)
    assert steps(got) == steps(ref) and got["output"] == ref["output"]


def test_prefill_is_the_prompt_plus_what_each_step_appends(plain, runtime, engine):
    tools = tools_for(runtime, "python_repl")
    agent = create_react_agent(plain, tools, REACT)
    ex = agentrt.Executor(agent=agent, tools=tools, max_iterations=5,
                          handle_parsing_errors=True, return_intermediate_steps=True)
    before = engine.core.kv.num_free_blocks
    out = ex.invoke({"input": "Use Python to print 6 * 7, then tell me the result."})
    s = ex.session_stats
    assert s.num_calls >= 3, out
    # what a stateless backend prefills: every re-rendered prompt in full
    assert s.num_prompt_tokens > 2 * s.num_prefill_tokens
    # what agentrt prefilled: the first prompt, then what each call appended, plus rollbacks
    assert s.num_prefill_tokens <= s.num_prompt_tokens - s.num_reused_tokens + s.num_calls
    assert engine.core.kv.num_free_blocks >= before  # the run's KV went back to the pool
    assert not [r for r in engine.core.requests if r.startswith("session-")]


def test_errors_become_observations_and_limits_hold(plain, runtime, engine):
    from langchain_core.tools import tool

    @tool
    def broken(x: str) -> str:
        """A tool that always fails."""
        raise RuntimeError("the tool broke")

    tools = [broken, *tools_for(runtime, "calculator")]
    agent = create_react_agent(plain, tools, REACT)
    ex = agentrt.Executor(agent=agent, tools=tools, max_iterations=1,
                          handle_parsing_errors="Please follow the format.",
                          return_intermediate_steps=True)
    out = ex.invoke({"input": "Use the broken tool on 'x'."})
    assert len(out["intermediate_steps"]) <= 1
    assert out["output"] == "Agent stopped due to iteration limit or time limit."
    assert not [r for r in engine.core.requests if r.startswith("session-")]


@pytest.fixture(scope="module")
def constrained(engine):
    from langchain_agentrt import ChatAgentRT

    return ChatAgentRT(engine=engine, max_tokens=64)  # constrained by default


def test_constrained_react_steps_parse_and_call_real_tools(constrained, runtime):
    """Under the ReAct grammar every step parses and names a real tool; where the plain
    AgentExecutor's run (no grammar outside a session) also parsed, the runs are identical."""
    make = lambda llm, tools: create_react_agent(llm, tools, REACT)  # noqa: E731
    tool_calls, compared = [], 0
    for tool_name, question in TASKS[::2]:
        (_, ref), (_, got) = run_both(constrained, runtime, make, tool_name, question)
        assert not [a for a, _ in got["intermediate_steps"] if a.tool == "_Exception"], got
        tool_calls += [a.tool for a, _ in got["intermediate_steps"]]
        if not [a for a, _ in ref["intermediate_steps"] if a.tool == "_Exception"]:
            compared += 1
            assert steps(got) == steps(ref) and got["output"] == ref["output"]
    assert len(tool_calls) >= 2 and set(tool_calls) <= {"calculator", "sqlite", "python_repl",
                                                         "search"}


def test_agentrt_tools_start_while_the_model_writes_the_call(constrained, runtime, engine):
    """With agentrt tools, a ReAct action runs in its worker as soon as it is decoded; the
    executor's tool step then takes that result (same observation) instead of running again."""
    taken = []
    take = runtime.take

    def spy(name, arguments, *, session="default"):
        call = take(name, arguments, session=session)
        taken.append((name, arguments, call is not None))
        return call

    runtime.take = spy
    try:
        make = lambda llm, tools: create_react_agent(llm, tools, REACT)  # noqa: E731
        (_, ref), (_, got) = run_both(constrained, runtime, make, "search",
                                      "Search the documentation: what does json.dumps do?")
    finally:
        del runtime.take
    actions = got["intermediate_steps"]
    assert actions and all(a.tool == "search" for a, _ in actions)
    ours = [t for t in taken[-len(actions):]]
    assert all(hit for _, _, hit in ours), taken  # every step's result was already running
    assert [a.tool_input for a, _ in actions] == [args["input"] for _, args, _ in ours]
    # the observations equal running the tool afresh on the same input
    for action, observation in actions:
        assert observation == runtime.run("search", {"query": action.tool_input},
                                          session="fresh").text
