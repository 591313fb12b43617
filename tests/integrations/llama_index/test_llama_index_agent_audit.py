"""Audit of the agent layer on AgentRT, as a LlamaIndex agent builder uses it.

What an agent run on AgentRT promises beyond the LLM class: inside :func:`agent_session` only
the ReAct agent's own steps follow the ReAct grammar (a query engine on the same LLM answers
freely), an ``AgentWorkflow``'s ReAct agents are held to their tools and the handoff tool, the
run's KV is freed however the run ends (done, cancelled, timed out, raising), two agents run
at once on one AgentRT as each runs alone, and a failing tool is an error result the agent
sees, as LlamaIndex gives it. The real SmolLM2-135M engine; tool calls are forced.
"""

from __future__ import annotations

import asyncio

import pytest
from llama_index.core import SummaryIndex
from llama_index.core.agent.react.output_parser import ReActOutputParser
from llama_index.core.agent.react.types import ActionReasoningStep, ResponseReasoningStep
from llama_index.core.agent.workflow import (
    AgentOutput,
    AgentStream,
    AgentWorkflow,
    FunctionAgent,
    ReActAgent,
    ToolCallResult,
)
from llama_index.core.schema import TextNode
from llama_index.core.tools import FunctionTool, QueryEngineTool
from llama_index.llms.agentrt import AgentRT, agent_session, react_grammar, to_llama_index

QUESTION = "What is the capital of France?"


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def divide(a: int, b: int) -> float:
    """Divide a by b."""
    return a / b


def held(engine) -> tuple[int, list[str]]:
    """KV blocks the engine holds for requests (neither free nor cached), and its requests."""
    load = engine.load()
    return (load.num_total_blocks - load.num_free_blocks - load.num_evictable_blocks,
            list(engine.core.requests))


@pytest.fixture(scope="module")
def react(tool_llm):
    return ReActAgent(tools=[FunctionTool.from_defaults(add)], llm=tool_llm)


# --- the ReAct grammar holds the agent's steps, and only them ---------------------------------
def test_a_plain_call_in_a_react_session_is_not_held_to_the_react_format(tool_llm, react):
    llm = tool_llm
    alone = llm.complete(QUESTION).text
    with agent_session(react):
        inside = llm.complete(QUESTION).text
    assert not inside.startswith("Thought:")
    assert inside == alone


def test_a_query_engine_tool_on_the_agents_llm_answers_freely(llm):
    index = SummaryIndex([TextNode(text="The shop opens at 9 am and closes at 5 pm.")])
    tool = QueryEngineTool.from_defaults(index.as_query_engine(llm=llm), name="shop_hours",
                                         description="Opening hours of the shop.")
    agent = ReActAgent(tools=[tool], llm=llm)
    with agent_session(agent):
        output = asyncio.run(tool.acall(input="When does the shop open?"))
    assert "Thought:" not in output.content and "Action:" not in output.content
    assert output.content == str(index.as_query_engine(llm=llm).query(
        "When does the shop open?"))


def test_the_react_agents_steps_still_follow_the_grammar(react):
    """Its step is written in the ReAct format (as the grammar holds it) and parses with
    LlamaIndex's ReAct parser: no retry."""
    async def run():
        with agent_session(react):
            handler = react.run(user_msg="Use add: what is 2 plus 3?", max_iterations=2)
            events = [e async for e in handler.stream_events()]
            await handler
        return events

    events = asyncio.run(run())
    outputs = [e for e in events if isinstance(e, AgentOutput)]
    assert outputs and not [o for o in outputs if o.retry_messages]
    written = "".join(e.delta for e in events if isinstance(e, AgentStream))
    assert written.startswith("Thought: ")
    assert "\nAnswer: " in written or "\nAction: add\nAction Input: {" in written


@pytest.fixture(scope="module")
def workflow(tool_llm):
    llm = tool_llm
    calc = ReActAgent(name="calc", description="Does arithmetic.", llm=llm,
                      tools=[FunctionTool.from_defaults(add)], can_handoff_to=["writer"])
    writer = FunctionAgent(name="writer", description="Writes prose.", llm=llm,
                           tools=[FunctionTool.from_defaults(divide)])
    return AgentWorkflow(agents=[calc, writer], root_agent="calc")


@pytest.fixture(scope="module")
def accepts(engine):
    """Whether a grammar accepts a whole turn (then the end of the generation)."""
    xgr = pytest.importorskip("xgrammar")
    info = xgr.TokenizerInfo.from_huggingface(engine.tokenizer)
    compiler = xgr.GrammarCompiler(info)

    def accepts(grammar: str, text: str) -> bool:
        matcher = xgr.GrammarMatcher(compiler.compile_grammar(grammar))
        return (matcher.accept_string(text) and matcher.accept_token(info.stop_token_ids[0])
                and matcher.is_terminated())

    return accepts


STEP = 'Thought: {}\nAction: add\nAction Input: {{"a": 1, "b": 2}}'


@pytest.mark.parametrize(("turn", "kind"), [
    (STEP.format("I add them."), ActionReasoningStep),
    ("Thought: I know it.\nAnswer: 3. Action: none needed", ResponseReasoningStep),
    (STEP.format("The Answer: is a sum"), None),  # LlamaIndex: a final answer, no call
    ("Thought: Action: none\nAnswer: 3", None),  # LlamaIndex: a parse error, a retry
])
def test_every_turn_the_react_grammar_allows_parses_as_written(react, accepts, turn, kind):
    grammar = react_grammar(react.tools)
    if kind is None:
        assert not accepts(grammar, turn)
    else:
        assert accepts(grammar, turn)
        assert type(ReActOutputParser().parse(turn)) is kind


def test_an_agent_workflows_react_agent_may_call_its_tools_and_hand_off(workflow, accepts):
    with agent_session(workflow) as scope:
        grammar = scope.grammar
    assert grammar is not None  # the workflow's one ReAct agent
    step = "Thought: t\nAction: {}\nAction Input: {}"
    assert accepts(grammar, step.format("add", '{"a": 1, "b": 2}'))
    assert accepts(grammar, step.format("handoff", '{"to_agent": "writer", "reason": "r"}'))
    assert not accepts(grammar, step.format("divide", '{"a": 1, "b": 2}'))  # writer's tool


def test_an_agent_workflows_react_steps_follow_the_grammar(workflow):
    async def run():
        with agent_session(workflow):
            handler = workflow.run(user_msg="Use add: what is 2 plus 3?", max_iterations=2)
            events = [e async for e in handler.stream_events()]
            try:
                await handler
            except Exception:  # NOTE: the 135M model may loop past max_iterations
                pass
        return events

    events = [e for e in asyncio.run(run())
              if getattr(e, "current_agent_name", None) == "calc"]
    outputs = [e for e in events if isinstance(e, AgentOutput)]
    assert outputs and not [o for o in outputs if o.retry_messages]
    written = "".join(e.delta for e in events if isinstance(e, AgentStream))
    assert written.startswith("Thought: ")


# --- the run's KV is freed however it ends ------------------------------------------------------
async def _cancelled(agent) -> None:
    handler = agent.run(user_msg="Write a long story about a cat.")
    n = 0
    async for event in handler.stream_events():
        n += isinstance(event, AgentStream)
        if n == 3:
            await handler.cancel_run()
            break
    with pytest.raises(Exception):  # noqa: B017 (WorkflowCancelledByUser)
        await handler


async def _timed_out(agent) -> None:
    agent.llm = agent.llm.model_copy(update={"timeout": 0.2, "max_tokens": 400})
    handler = agent.run(user_msg="Write a long story about a cat.")
    with pytest.raises(Exception, match="longer than timeout"):
        await handler


async def _tool_raises(agent) -> None:
    handler = agent.run(user_msg="Divide 1 by 0.", max_iterations=1)
    with pytest.raises(Exception, match="[Mm]ax iterations"):
        await handler


@pytest.mark.parametrize("ending", [_cancelled, _timed_out, _tool_raises])
def test_no_kv_is_held_after_a_run_ends(engine, ending):
    llm = AgentRT(engine=engine, max_tokens=200)
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(divide)], llm=llm,
                          initial_tool_choice="divide")

    async def run():
        with agent_session(agent) as scope:
            await ending(agent)
        return scope

    scope = asyncio.run(run())
    assert scope.stats.num_calls >= 1  # the run's calls went through the session
    assert held(engine) == (0, [])


def test_a_run_awaited_after_its_block_is_an_error_not_held_kv(engine, tool_llm):
    """The run's calls come after the block freed its sessions: each would hold its KV in
    a session no one closes (21 blocks and a paused request, for good, before)."""
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(add)], llm=tool_llm,
                          initial_tool_choice="add")

    async def run():
        with agent_session(agent):
            handler = agent.run(user_msg="What is 2 plus 3?", max_iterations=3)
        with pytest.raises(Exception, match="agent_session block has ended"):
            await handler

    asyncio.run(run())
    assert held(engine) == (0, [])


# --- tools: errors as LlamaIndex gives them; two agents at once -------------------------------
def test_a_failing_tool_is_an_error_result_the_agent_sees(tool_llm, runtime):
    tools = [FunctionTool.from_defaults(divide), to_llama_index("calculator", runtime)]

    async def run(name: str, question: str):
        agent = FunctionAgent(tools=tools, llm=tool_llm, initial_tool_choice=name)
        with agent_session(agent):
            handler = agent.run(user_msg=question, max_iterations=2)
            events = [e async for e in handler.stream_events()]
            try:
                await handler
            except Exception:  # NOTE: the 135M model may retry past max_iterations
                pass
        return [e for e in events if isinstance(e, ToolCallResult)][0]

    python = asyncio.run(run("divide", "Divide 1 by 0."))
    assert python.tool_output.is_error and "division by zero" in python.tool_output.content
    worker = asyncio.run(run("calculator", "What is 1/0?"))
    assert worker.tool_name == "calculator" and worker.tool_output.is_error


async def _forced_run(llm, question: str, *, own_session: bool) -> list[tuple]:
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(add)], llm=llm,
                          initial_tool_choice="add")

    async def go():
        handler = agent.run(user_msg=question, max_iterations=3)
        events = [e async for e in handler.stream_events()]
        try:
            await handler
        except Exception:  # NOTE: the model may call again past max_iterations
            pass
        return [(e.tool_name, e.tool_kwargs, e.tool_output.content) for e in events
                if isinstance(e, ToolCallResult)]

    if not own_session:
        return await go()
    with agent_session(agent):
        return await go()


QUESTIONS = ["What is 2 plus 3?", "What is 40 plus 2?"]


@pytest.fixture(scope="module")
def short_llm(engine):
    """AgentRT with room for one ``add`` call and a short answer (a call is ~25 tokens)."""
    from llama_index.llms.agentrt import AgentRT

    return AgentRT(engine=engine, max_tokens=40)


@pytest.fixture(scope="module")
def alone_runs(short_llm) -> list[list[tuple]]:
    """Each question's tool results, its agent run alone."""

    async def alone():
        return [await _forced_run(short_llm, q, own_session=True) for q in QUESTIONS]

    return asyncio.run(alone())


@pytest.mark.parametrize("shared_session", [False, True])
def test_two_agents_at_once_on_one_llm_run_as_each_runs_alone(engine, short_llm, alone_runs,
                                                              shared_session):
    async def together():
        if shared_session:
            with agent_session():
                return await asyncio.gather(
                    *(_forced_run(short_llm, q, own_session=False) for q in QUESTIONS))
        return await asyncio.gather(*(_forced_run(short_llm, q, own_session=True)
                                      for q in QUESTIONS))

    assert [r[:1] for r in alone_runs] == [[("add", {"a": 2, "b": 3}, "5")],
                                           [("add", {"a": 40, "b": 2}, "42")]]
    assert list(asyncio.run(together())) == alone_runs
    assert held(engine) == (0, [])
