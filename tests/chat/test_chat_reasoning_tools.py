"""A tool call written inside ``<think>`` is reasoning: inside an agent run whose tools start
while the model writes (``agentrt.Executor``'s partial execution), no tool worker may get a
call the model only considered. Scripted outputs in a tiny tokenizer, a real tool runtime."""

from __future__ import annotations

import pytest
from tiny_mistral import ScriptedBackend, mistral_tokenizer

from agentrt.agent import ToolRuntime
from agentrt.chat import ChatProgress, detect_format, prepare_chat, run_deltas
from agentrt.session import SessionScope, agent_run

partial = pytest.importorskip("langchain_agentrt.partial")

TOOL = {"type": "function", "function": {"name": "calculator", "parameters": {
    "type": "object", "properties": {"expression": {"type": "string"}}}}}
CALL = '{"name": "calculator", "arguments": {"expression": "6*7"}}'
THINKING = (f"<think>\nMaybe <tool_call>\n{CALL}\n</tool_call>? No, I know it.\n</think>\n\n"
            "It is 42.</s>")


@pytest.fixture(scope="module")
def runtime():
    with ToolRuntime(["calculator"]) as rt:
        yield rt


def run_in_agent(runtime, template: str, output: str):
    """The call's progress and the tool streams the run's partial execution made."""
    streams: list = []

    def factory(tokenizer):
        syntax = detect_format(tokenizer).syntax  # as partial_execution_for reads it
        hook = partial.PartialExecution(tokenizer, runtime, "t", syntax)
        streams.append(hook.stream)
        return hook

    scope = SessionScope()
    scope.hook_factory = factory
    with agent_run(scope):
        call = prepare_chat(ScriptedBackend(mistral_tokenizer(template), [output]),
                            [{"role": "user", "content": "6*7?"}], tools=[TOOL],
                            constrained=False)
        progress = ChatProgress(call)
        for delta in run_deltas(call):
            progress.feed(delta)
    return progress, streams


def test_a_call_inside_think_starts_no_tool(runtime):
    progress, streams = run_in_agent(runtime, "qwen3.jinja", THINKING)
    assert progress.reasoning_content.startswith("Maybe <tool_call>")
    assert progress.tool_calls == [] and progress.content == "It is 42."
    assert [s.completed for s in streams if s.completed] == []  # no worker got the call


def test_without_reasoning_the_call_still_starts_while_it_is_written(runtime):
    output = f'[TOOL_CALLS] [{CALL}]</s>'
    progress, streams = run_in_agent(runtime, "mistral-v0.3.jinja", output)
    assert [c["name"] for c in progress.tool_calls] == ["calculator"]
    [stream] = streams
    assert [args for _, args in stream.completed] == [{"expression": "6*7"}]
