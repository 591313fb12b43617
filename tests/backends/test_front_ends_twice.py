"""Every chat front end on both backends — ``local`` (the engine in process) and ``sglang``
(a real ``agentrt serve`` on loopback speaking SGLang's native API, see ``backend`` in
``tests/conftest.py``): ``ChatAgentRT`` (invoke, stream, bound tools), ``agentrt.Executor``
(a ReAct agent with a real tool), LlamaIndex's ``AgentRT`` under a ``FunctionAgent`` and a
``ReActAgent``, ``run_with_tools``. Greedy outputs and agent steps equal the local engine's
(the front ends' default, ``engine=``); the session stats say which backend ran and how many
of the run's prompt tokens it prefilled rather than kept."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("langchain_classic", reason="needs langchain-agentrt[executor]")
pytest.importorskip("llama_index.core", reason="needs the [llamaindex] extra")
pytest.importorskip("xgrammar", reason="needs xgrammar ([constrained] extra)")

from langchain_classic.agents import create_react_agent  # noqa: E402
from llama_index.core.agent.workflow import FunctionAgent, ReActAgent, ToolCallResult  # noqa: E402
from llama_index.llms.agentrt import AgentRT, agent_session, to_llama_index  # noqa: E402

import agentrt  # noqa: E402
from agentrt import SamplingParams  # noqa: E402
from agentrt.agent import ToolRuntime, run_with_tools  # noqa: E402
from langchain_agentrt import ChatAgentRT  # noqa: E402
from langchain_agentrt.react import REACT_TEMPLATE  # noqa: E402
from langchain_agentrt.tools import to_langchain  # noqa: E402

QUESTION = "What is the capital of France? Answer in one sentence."
TASK = "What is 17 * 23? Use the calculator."
_local: dict[str, Any] = {}


def on_local(key: str, run: Callable[[], Any]) -> Any:
    """``run()``'s result on the local engine, computed once per test session."""
    if key not in _local:
        _local[key] = run()
    return _local[key]


@pytest.fixture(scope="module")
def runtime():
    with ToolRuntime(["calculator"]) as rt:
        yield rt


def get_weather(city: str) -> str:
    """The current weather in a city."""
    return f"It is sunny in {city}."


def check_stats(stats, backend) -> None:
    """The run's stats name the backend, and every prompt token was prefilled or kept."""
    assert stats.backend == backend.name and stats.num_calls >= 1
    assert stats.num_prefill_tokens + stats.num_cached_tokens == stats.num_prompt_tokens
    assert 0 < stats.num_prefill_tokens


# --- ChatAgentRT ---------------------------------------------------------------------------
def chat_answers(llm) -> tuple:
    message = llm.invoke(QUESTION)
    streamed = "".join(str(chunk.content) for chunk in llm.stream(QUESTION))
    usage = message.usage_metadata
    return message.content, streamed, usage["input_tokens"], usage["output_tokens"]


def test_chat_invoke_and_stream(backend, engine):
    got = chat_answers(ChatAgentRT(backend=backend, max_tokens=12))
    assert got == on_local("chat", lambda: chat_answers(ChatAgentRT(engine=engine,
                                                                    max_tokens=12)))
    content, streamed, _, num_output = got
    assert content and streamed == content and num_output > 0


def tool_calls(llm) -> list[tuple[str, dict]]:
    message = llm.bind_tools([get_weather], tool_choice="any").invoke("Weather in Paris?")
    return [(c["name"], c["args"]) for c in message.tool_calls]


def test_chat_bound_tools_are_grammar_constrained(backend, engine):
    got = tool_calls(ChatAgentRT(backend=backend, max_tokens=32))
    assert got == on_local("tools", lambda: tool_calls(ChatAgentRT(engine=engine,
                                                                   max_tokens=32)))
    assert [name for name, _ in got] == ["get_weather"] and "city" in got[0][1]


# --- agentrt.Executor ------------------------------------------------------------------------
# NOTE: the 135M model answers from memory (wrongly) unless shown one worked ReAct step
EXAMPLE = ("Question: What is 2 * 21?\nThought: I use the calculator.\nAction: calculator\n"
           "Action Input: 2 * 21\nObservation: 42\nThought: I now know the final answer\n"
           "Final Answer: 42\n\n")


def react_run(llm, runtime) -> tuple:
    from langchain_core.prompts import PromptTemplate

    prompt = PromptTemplate.from_template(REACT_TEMPLATE.replace("Begin!\n\n",
                                                                 "Begin!\n\n" + EXAMPLE))
    tools = [to_langchain("calculator", runtime, session="twice")]
    executor = agentrt.Executor(agent=create_react_agent(llm, tools, prompt), tools=tools,
                                max_iterations=2, handle_parsing_errors=True,
                                return_intermediate_steps=True)
    result = executor.invoke({"input": "Use the calculator: what is 17 * 23?"})
    steps = [(a.tool, a.tool_input, a.log, str(obs)) for a, obs in
             result["intermediate_steps"]]
    return steps, result["output"], executor.session_stats


def test_executor_react_agent(backend, engine, runtime):
    """The ReAct grammar travels to either backend (SGLang's ``ebnf`` sampling field)."""
    steps, output, stats = react_run(ChatAgentRT(backend=backend, max_tokens=48), runtime)
    ref = on_local("react", lambda: react_run(ChatAgentRT(engine=engine, max_tokens=48),
                                              runtime))
    assert (steps, output) == ref[:2]
    assert "calculator" in [tool for tool, *_ in steps]
    check_stats(stats, backend)
    assert stats.num_prefill_tokens < stats.num_prompt_tokens  # later steps kept the context


# --- LlamaIndex AgentRT ------------------------------------------------------------------------
async def li_run(agent) -> tuple:
    with agent_session(agent) as scope:
        handler = agent.run(user_msg=TASK, max_iterations=2)  # then a final answer
        events = [event async for event in handler.stream_events()]
        output = await handler
    calls = [(e.tool_name, e.tool_kwargs, e.tool_output.content) for e in events
             if isinstance(e, ToolCallResult)]
    return calls, str(output), scope.stats


def function_agent(llm, runtime) -> tuple:
    agent = FunctionAgent(tools=[to_llama_index("calculator", runtime, session="twice")],
                          llm=llm, allow_parallel_tool_calls=False,
                          initial_tool_choice="calculator", early_stopping_method="generate")
    return asyncio.run(li_run(agent))


def react_agent(llm, runtime) -> tuple:
    agent = ReActAgent(tools=[to_llama_index("calculator", runtime, session="twice")], llm=llm,
                       early_stopping_method="generate")
    return asyncio.run(li_run(agent))


@pytest.mark.parametrize("make", [function_agent, react_agent], ids=["function", "react"])
def test_llama_index_agents(make, backend, engine, runtime):
    calls, output, stats = make(AgentRT(backend=backend, max_tokens=48), runtime)
    ref = on_local(make.__name__, lambda: make(AgentRT(engine=engine, max_tokens=48), runtime))
    assert (calls, output) == ref[:2]
    assert calls and calls[0][0] == "calculator"
    check_stats(stats, backend)


# --- run_with_tools --------------------------------------------------------------------------
CALC_CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "17 * 23'


def tool_loop(target, runtime, prompt: str) -> tuple:
    run = run_with_tools(target, prompt, SamplingParams(max_tokens=16), tools=runtime,
                         session="twice-loop", reply_prefix=CALC_CALL, max_calls=1)
    segments = [(s.output.token_ids, s.is_paused, s.observation and s.observation.text)
                for s in run.segments]
    return segments, run.stats


def test_run_with_tools(backend, engine, runtime):
    """Local: the hook pauses the request in place and the observation is appended to it.
    SGLang: the hook runs on the streamed tokens, the call ends at the tool call and the next
    one sends the whole context — the same tokens either way."""
    messages = [{"role": "user", "content": TASK}]
    prompt = engine.tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                  tokenize=False)
    segments, stats = tool_loop(backend, runtime, prompt)
    assert segments == on_local("tool_loop", lambda: tool_loop(engine, runtime, prompt))[0]
    (first, paused, observation), second = segments
    assert paused and "391" in observation and second[0]
    check_stats(stats, backend)
    if backend.capabilities.can_pause_in_place:
        assert (stats.num_paused_in_place, stats.num_stopped_client_side) == (1, 0)
        assert stats.num_reused_tokens > 0  # the second segment continued the paused request
    else:
        assert (stats.num_paused_in_place, stats.num_stopped_client_side) == (0, 1)
