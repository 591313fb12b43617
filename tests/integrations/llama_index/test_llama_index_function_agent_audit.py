"""Audit of ``FunctionAgent`` / ``AgentWorkflow`` on AgentRT, written as a LlamaIndex user does.

The function-calling surface the agents call (``is_function_calling_model``,
``achat_with_tools``, ``astream_chat_with_tools``, ``get_tool_calls_from_response``), the
events of a run, one ``Context`` and one memory carried across two runs (in two
``agent_session`` blocks, or the second outside any: no call may reach the first run's closed
scope), a ``Context`` serialized with ``to_dict`` and restored, and a cancelled run: every one
leaves no KV held and no request in the engine. NOTE: LlamaIndex (core 0.14, workflows 2.x)
keeps a run's memory in the ``Context`` only for that run — it skips the memory when the
context is saved, and the next run starts a new one — so the chat is carried by passing
``memory=`` to each run, as LlamaIndex's docs now show; that is LlamaIndex's, not agentrt's.
The real SmolLM2-135M engine; tool calls are forced through the grammar (``tool_required`` /
``initial_tool_choice``), and the assertions are on mechanics, not on the small model's
answers.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from llama_index.core.agent.workflow import (
    AgentOutput,
    AgentStream,
    AgentWorkflow,
    FunctionAgent,
    ToolCall,
    ToolCallResult,
)
from llama_index.core.llms import ChatMessage
from llama_index.core.memory import ChatMemoryBuffer
from llama_index.core.tools import FunctionTool
from llama_index.core.workflow import Context
from llama_index.llms.agentrt import AgentRT, agent_session


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


ADD = FunctionTool.from_defaults(add)


def held(engine) -> tuple[int, list[str]]:
    """KV blocks the engine holds for requests (neither free nor cached), and its requests."""
    load = engine.load()
    return (load.num_total_blocks - load.num_free_blocks - load.num_evictable_blocks,
            list(engine.core.requests))


@pytest.fixture
def agent(tool_llm) -> FunctionAgent:
    return FunctionAgent(tools=[ADD], llm=tool_llm, initial_tool_choice="add",
                         system_prompt="You add numbers with the add tool.")


async def _events(handler: Any) -> list[Any]:
    events = [e async for e in handler.stream_events()]
    try:
        await handler
    except Exception:  # NOTE: the 135M model may call again past max_iterations
        pass
    return events


async def _user_messages(memory: ChatMemoryBuffer) -> list[str]:
    return [m.content for m in await memory.aget_all() if m.role.value == "user"]


# --- the function-calling surface ---------------------------------------------------------------
def test_the_function_calling_surface_an_agent_calls(engine, tool_llm):
    assert tool_llm.metadata.is_function_calling_model

    async def run():
        response = await tool_llm.achat_with_tools([ADD], user_msg="What is 2 plus 3?",
                                                   tool_required=True)
        chunks = [r async for r in await tool_llm.astream_chat_with_tools(
            [ADD], user_msg="What is 2 plus 3?", tool_required=True)]
        return response, chunks

    response, chunks = asyncio.run(run())
    calls = tool_llm.get_tool_calls_from_response(response)
    assert [(c.tool_name, sorted(c.tool_kwargs)) for c in calls] == [("add", ["a", "b"])]
    assert all(isinstance(c.tool_kwargs, dict) for c in calls)
    # every streamed response parses (a call as far as written), the last one is the whole call
    partial = [tool_llm.get_tool_calls_from_response(c, error_on_no_tool_call=False)
               for c in chunks]
    assert [(c.tool_name, c.tool_kwargs) for c in partial[-1]] == \
        [(c.tool_name, c.tool_kwargs) for c in calls]
    assert held(engine) == (0, [])


def test_a_run_streams_its_text_and_its_call_then_the_result(engine, agent):
    async def run():
        return await _events(agent.run(user_msg="What is 2 plus 3?", max_iterations=2))

    events = asyncio.run(run())
    kinds = [type(e) for e in events]
    assert AgentStream in kinds and AgentOutput in kinds
    call = next(e for e in events if isinstance(e, ToolCall))
    result = next(e for e in events if isinstance(e, ToolCallResult))
    assert kinds.index(ToolCall) < kinds.index(ToolCallResult)
    assert (result.tool_name, result.tool_id) == (call.tool_name, call.tool_id) == \
        ("add", call.tool_id)
    assert result.tool_output.content == str(add(**result.tool_kwargs))
    streamed = [e for e in events if isinstance(e, AgentStream)]
    assert streamed[-1].tool_calls and streamed[-1].tool_calls[0].tool_name == "add"
    assert held(engine) == (0, [])


# --- one Context across runs ----------------------------------------------------------------------
@pytest.mark.parametrize("second_in_a_session", [True, False])
def test_a_context_carries_the_chat_across_two_runs(engine, agent, second_in_a_session):
    """The second run sees the first's messages; its calls go to its own session (or none),
    never to the first run's scope, closed with its block."""
    async def run():
        ctx, memory = Context(agent), ChatMemoryBuffer.from_defaults()
        with agent_session(agent) as first:
            await _events(agent.run(user_msg="What is 2 plus 3?", ctx=ctx, memory=memory,
                                    max_iterations=2))
        assert first.stats.num_calls >= 1
        if second_in_a_session:
            with agent_session(agent) as second:
                events = await _events(agent.run(user_msg="And 40 plus 2?", ctx=ctx,
                                                 memory=memory, max_iterations=2))
            assert second.stats.num_calls >= 1
        else:
            events = await _events(agent.run(user_msg="And 40 plus 2?", ctx=ctx,
                                              memory=memory, max_iterations=2))
        return events, await _user_messages(memory)

    events, users = asyncio.run(run())
    assert [e.tool_name for e in events if isinstance(e, ToolCallResult)][:1] == ["add"]
    assert users[:2] == ["What is 2 plus 3?", "And 40 plus 2?"]
    assert held(engine) == (0, [])


def test_a_context_restored_from_its_dict_carries_the_chat(engine, agent):
    memory = ChatMemoryBuffer.from_defaults()

    async def first_run() -> dict[str, Any]:
        ctx = Context(agent)
        with agent_session(agent):
            await _events(agent.run(user_msg="What is 2 plus 3?", ctx=ctx, memory=memory,
                                    max_iterations=2))
        return ctx.to_dict()

    data = json.loads(json.dumps(asyncio.run(first_run())))  # as stored between requests
    # the chat is stored too, message by message: AgentRT's messages (tool calls as blocks)
    # round-trip as JSON (NOTE: ChatMemoryBuffer.model_dump_json fails on pydantic 2.14)
    stored = json.loads(json.dumps([m.model_dump(mode="json") for m in memory.get_all()]))
    memory = ChatMemoryBuffer.from_defaults(
        chat_history=[ChatMessage.model_validate(m) for m in stored])

    async def second_run():
        ctx = Context.from_dict(agent, data)
        with agent_session(agent) as scope:
            events = await _events(agent.run(user_msg="And 40 plus 2?", ctx=ctx,
                                             memory=memory, max_iterations=2))
        return events, scope, await _user_messages(memory)

    events, scope, users = asyncio.run(second_run())
    assert users[:2] == ["What is 2 plus 3?", "And 40 plus 2?"]
    assert scope.stats.num_calls >= 1
    assert any(isinstance(e, ToolCallResult) for e in events)
    assert held(engine) == (0, [])


# --- a cancelled run ---------------------------------------------------------------------------
@pytest.mark.parametrize("in_a_session", [True, False])
def test_a_cancelled_run_frees_its_request_and_the_next_run_works(engine, in_a_session):
    llm = AgentRT(engine=engine, max_tokens=300)
    agent = FunctionAgent(tools=[ADD], llm=llm)

    async def cancelled():
        handler = agent.run(user_msg="Write a long story about a cat.")
        n = 0
        async for event in handler.stream_events():
            n += isinstance(event, AgentStream)
            if n == 3:
                await handler.cancel_run()
                break
        with pytest.raises(Exception):  # noqa: B017 (WorkflowCancelledByUser)
            await handler
        return n

    async def run():
        if not in_a_session:
            return await cancelled()
        with agent_session(agent):
            return await cancelled()

    assert asyncio.run(run()) == 3
    assert held(engine) == (0, [])
    answer = asyncio.run(llm.model_copy(update={"max_tokens": 4}).achat(
        [ChatMessage(role="user", content="Hi")]))
    assert answer.message.content is not None
    assert held(engine) == (0, [])


def test_an_agent_workflow_of_function_agents_runs_and_frees_its_kv(engine, tool_llm):
    calc = FunctionAgent(name="calc", description="Adds numbers.", llm=tool_llm,
                         tools=[ADD], initial_tool_choice="add")
    workflow = AgentWorkflow(agents=[calc], root_agent="calc")

    async def run():
        with agent_session(workflow) as scope:
            events = await _events(workflow.run(user_msg="What is 2 plus 3?",
                                                max_iterations=2))
        return events, scope

    events, scope = asyncio.run(run())
    results = [e for e in events if isinstance(e, ToolCallResult)]
    assert results and results[0].tool_name == "add"
    assert results[0].tool_output.content == str(add(**results[0].tool_kwargs))
    assert scope.stats.num_calls >= 2  # the call, then the answer after the result
    assert held(engine) == (0, [])


def test_a_run_after_a_cancelled_one_in_the_same_block_continues_the_session(engine, agent):
    """A chat UI keeps one agent_session for a conversation: a run cancelled mid-answer
    leaves the session usable, and the next run's forced call completes."""
    async def run():
        with agent_session(agent) as scope:
            handler = agent.run(user_msg="Write a long story about a cat.")
            async for event in handler.stream_events():
                if isinstance(event, AgentStream) and event.delta:
                    await handler.cancel_run()
                    break
            with pytest.raises(Exception):  # noqa: B017 (WorkflowCancelledByUser)
                await handler
            events = await _events(agent.run(user_msg="What is 2 plus 3?", max_iterations=2))
        return events, scope

    events, scope = asyncio.run(run())
    results = [e for e in events if isinstance(e, ToolCallResult)]
    assert results and results[0].tool_output.content == str(add(**results[0].tool_kwargs))
    assert scope.stats.num_calls >= 3
    assert held(engine) == (0, [])


def test_a_run_cancelled_while_its_tool_runs_frees_the_held_session(engine, tool_llm):
    """Between steps the session holds the run's KV (a paused request); a cancel during the
    tool call drops it when the block ends."""
    started = asyncio.Event()

    async def wait_forever(x: int) -> str:
        """Wait for x."""
        started.set()
        await asyncio.Event().wait()
        return "never"

    agent = FunctionAgent(tools=[FunctionTool.from_defaults(async_fn=wait_forever)],
                          llm=tool_llm, initial_tool_choice="wait_forever")

    async def run():
        with agent_session(agent):
            handler = agent.run(user_msg="Wait for 3.")
            async for event in handler.stream_events():
                if isinstance(event, ToolCall):
                    await started.wait()
                    kv_during_tool = held(engine)
                    await handler.cancel_run()
                    break
            with pytest.raises(Exception):  # noqa: B017 (WorkflowCancelledByUser)
                await handler
        return kv_during_tool

    blocks, requests = asyncio.run(run())
    assert blocks > 0 and len(requests) == 1  # the paused request, kept for the next step
    assert held(engine) == (0, [])


def test_a_function_agent_that_does_not_stream_calls_and_frees_its_kv(engine, tool_llm):
    """``streaming=False``: the agent calls ``achat_with_tools``, one event per step."""
    agent = FunctionAgent(tools=[ADD], llm=tool_llm, initial_tool_choice="add",
                          streaming=False)

    async def run():
        with agent_session(agent) as scope:
            events = await _events(agent.run(user_msg="What is 2 plus 3?", max_iterations=2))
        return events, scope

    events, scope = asyncio.run(run())
    results = [e for e in events if isinstance(e, ToolCallResult)]
    assert results and results[0].tool_output.content == str(add(**results[0].tool_kwargs))
    assert scope.stats.num_calls >= 2 and scope.stats.num_reused_tokens > 0
    assert held(engine) == (0, [])


@pytest.mark.parametrize("in_a_session", [True, False])
def test_a_workflow_timeout_aborts_the_running_call(engine, in_a_session):
    """The workflow's own ``timeout`` cancels the step in the middle of a long answer: its
    request is aborted, not left decoding in the engine."""
    agent = FunctionAgent(tools=[ADD], llm=AgentRT(engine=engine, max_tokens=2000),
                          timeout=0.5)

    async def timed_out():
        with pytest.raises(Exception, match="timed out|timeout"):
            await agent.run(user_msg="Write a very long story about a cat.")

    async def run():
        if not in_a_session:
            return await timed_out()
        with agent_session(agent):
            return await timed_out()

    asyncio.run(run())
    assert held(engine) == (0, [])
