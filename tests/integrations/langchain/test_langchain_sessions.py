"""Sessions for LangChain 1.x agents on the real model: a ``create_agent`` run with
``AgentRTMiddleware`` keeps its KV between its model calls (the second call prefills only
what the step added), the repeat guard ends a run that repeats one call, and a LangGraph
``thread_id`` (a graph built by hand, ``create_react_agent``) maps to a session."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain.agents", reason="needs the [agent] extra (langchain>=1)")

from langchain.agents import create_agent  # noqa: E402
from langchain.agents.middleware import ModelCallLimitMiddleware, wrap_model_call  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402

from agentrt import SessionTable  # noqa: E402
from langchain_agentrt import AgentRTMiddleware, ChatAgentRT  # noqa: E402


@tool
def get_time() -> str:
    """The current time."""
    return "It is 10:30."


@wrap_model_call
def always_call(request, handler):
    """Forced into the one tool at every step, as the 135M model was when it looped."""
    return handler(request.override(tool_choice="get_time"))


def _usage(message: AIMessage) -> tuple[int, int, int]:
    """(prompt tokens, of those computed, output tokens) of one model call."""
    u = message.usage_metadata
    return u["input_tokens"], u["input_tokens"] - u["input_token_details"]["cache_read"], \
        u["output_tokens"]


def test_create_agent_run_is_one_session_and_the_repeat_guard_ends_it(engine):
    paused = engine.load().num_paused
    sessions = SessionTable(ttl_s=60)
    middleware = AgentRTMiddleware(max_repeats=2, sessions=sessions)
    backstop = ModelCallLimitMiddleware(run_limit=3, exit_behavior="end")
    agent = create_agent(ChatAgentRT(engine=engine, max_tokens=24), [get_time],
                         middleware=[middleware, backstop, always_call])
    out = agent.invoke({"messages": [HumanMessage("What time is it?")]})
    calls = [m for m in out["messages"] if isinstance(m, AIMessage) and m.tool_calls]
    assert len(calls) == 2 and calls[0].tool_calls[0]["args"] == calls[1].tool_calls[0]["args"]
    assert sum(isinstance(m, ToolMessage) for m in out["messages"]) == 2
    stop = out["messages"][-1]
    assert "get_time" in stop.content and "2 times in a row" in stop.content  # the guard
    (p1, computed1, o1), (p2, computed2, _) = _usage(calls[0]), _usage(calls[1])
    assert p2 > p1 + o1  # the step added the call, the observation and the template's glue
    assert computed2 <= p2 - p1  # only that was computed: the first call's prompt was held
    stats = sessions.closed_stats  # the run's session closed with the run
    assert stats.num_calls == 2 and stats.num_reused_tokens >= p1
    assert stats.num_prefill_tokens == computed1 + computed2
    assert len(sessions) == 0 and engine.load().num_paused == paused


def _chat_graph(llm: ChatAgentRT):
    def respond(state: MessagesState) -> dict:
        return {"messages": [llm.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("respond", respond)
    graph.add_edge(START, "respond")
    return graph.compile(checkpointer=InMemorySaver())


def _second_turn_is_new_tokens_only(run, sessions: SessionTable) -> None:
    """Two turns of one thread: the second computes only what the thread added."""
    config = {"configurable": {"thread_id": "t1"}}
    first = run({"messages": [HumanMessage("Say hello.")]}, config)["messages"][-1]
    second = run({"messages": [HumanMessage("Again.")]}, config)["messages"][-1]
    (p1, _, o1), (p2, computed2, _) = _usage(first), _usage(second)
    assert computed2 <= p2 - p1 and computed2 < p2 - o1  # not the first prompt again
    assert sessions.find("t1") is not None and sessions.find("t1").stats.num_calls == 2
    assert sessions.close("t1").num_reused_tokens >= p1


def test_langgraph_thread_id_maps_to_a_session(engine):
    sessions = SessionTable(ttl_s=60)
    graph = _chat_graph(ChatAgentRT(engine=engine, max_tokens=4, sessions=sessions))
    _second_turn_is_new_tokens_only(graph.invoke, sessions)


def test_create_react_agent_thread_keeps_its_kv(engine):
    prebuilt = pytest.importorskip("langgraph.prebuilt")
    sessions = SessionTable(ttl_s=60)
    llm = ChatAgentRT(engine=engine, max_tokens=4, sessions=sessions)
    with pytest.warns(Warning):  # NOTE: LangGraph points to create_agent; it still works
        agent = prebuilt.create_react_agent(llm, [], checkpointer=InMemorySaver())
    _second_turn_is_new_tokens_only(agent.invoke, sessions)
