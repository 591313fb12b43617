"""A tool call written inside ``<think>`` is reasoning: inside an agent run whose tools start
while the model writes (``agentrt.Executor``'s partial execution, wired as the executor wires
it), no tool may start on a call the model only considered; a call written after
``</think>`` starts while it is written, and LangChain takes its result. Scripted outputs in
a tiny one-token-a-byte tokenizer, a real tool runtime."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_mistral import ScriptedBackend, mistral_tokenizer

from agentrt.agent import ToolRuntime
from agentrt.chat import ChatProgress, prepare_chat, run_deltas
from agentrt.session import SessionScope, agent_run

partial = pytest.importorskip("langchain_agentrt.partial")
from langchain_agentrt.tools import to_langchain  # noqa: E402

TOOL = {"type": "function", "function": {"name": "calculator", "parameters": {
    "type": "object", "properties": {"expression": {"type": "string"}}}}}
ARGS = {"expression": "6*7"}
CALL = '{"name": "calculator", "arguments": {"expression": "6*7"}}'
CONSIDERED = f"Maybe <tool_call>\n{CALL}\n</tool_call>? No, I know it."
THINKING = f"<think>\n{CONSIDERED}\n</think>\n\nIt is 42.</s>"
THEN_CALL = (f"<think>\n{CONSIDERED} Better check.\n</think>\n\n"
             f"<tool_call>\n{CALL}\n</tool_call></s>")
QWEN3 = (Path(__file__).parent / "templates" / "qwen3.jinja").read_text()
# a template whose generation prompt opens the block (as DeepSeek-R1's): reasoning "open"
OPENS_THINK = QWEN3.replace("'<|im_start|>assistant\\n' }}",
                            "'<|im_start|>assistant\\n<think>\\n' }}")


class Run:
    """One chat call inside an agent run: its progress, the text streamed before each tool
    start, the partial-execution hooks made, and what LangChain's tool step would take."""

    def __init__(self, runtime, template: str, output: str, *, chat_template=None,
                 specials: tuple[str, ...] = (), **options) -> None:
        self.starts: list[tuple[str, str]] = []  # (tool, the output streamed before it)
        self.hooks: list = []
        seen: list[str] = []
        start = runtime.start

        def spy(name, **kwargs):
            self.starts.append((name, "".join(seen)))
            return start(name, **kwargs)

        tools = [to_langchain("calculator", runtime, session="reasoning")]
        factory = partial.partial_execution_for(tools, "json_toolcall")
        scope = SessionScope()

        def recording(tokenizer, **kwargs):  # the executor's factory, its hooks recorded
            self.hooks.append(hook := factory(tokenizer, **kwargs))
            return hook

        recording.withdraw = factory.withdraw
        scope.hook_factory = recording
        runtime.start = spy
        try:
            with agent_run(scope):
                tokenizer = mistral_tokenizer(template, specials=specials)
                call = prepare_chat(ScriptedBackend(tokenizer, [output]),
                                    [{"role": "user", "content": "6*7?"}], tools=[TOOL],
                                    constrained=False, chat_template=chat_template,
                                    **options)
                self.reasoning = call.reasoning
                self.progress = ChatProgress(call)
                for delta in run_deltas(call):
                    self.progress.feed(delta)
                    seen.append(delta.text)
                taken = runtime.take("calculator", ARGS, session="reasoning")
                self.taken = None if taken is None else taken.result().text
        finally:
            del runtime.start


@pytest.fixture(scope="module")
def runtime():
    with ToolRuntime(["calculator"]) as rt:
        yield rt


def test_a_call_inside_think_starts_no_tool(runtime):
    run = Run(runtime, "qwen3.jinja", THINKING)
    assert run.reasoning == "detect" and len(run.hooks) == 1  # the hook runs for reasoning
    assert run.progress.reasoning_content.startswith("Maybe <tool_call>")
    assert run.progress.tool_calls == [] and run.progress.content == "It is 42."
    assert run.starts == [] and run.taken is None  # no worker got the considered call


@pytest.mark.parametrize(("output", "chat_template"), [
    (THEN_CALL, None),
    (THEN_CALL.removeprefix("<think>\n"), OPENS_THINK),  # the prompt opened the block
])
def test_a_call_after_think_starts_while_it_is_written(runtime, output, chat_template):
    run = Run(runtime, "qwen3.jinja", output, chat_template=chat_template)
    assert run.reasoning == ("open" if chat_template else "detect")
    assert [(c["name"], c["args"]) for c in run.progress.tool_calls] == [("calculator", ARGS)]
    [(name, before)] = run.starts  # the call after </think> only, started at its name,
    assert name == "calculator" and before.endswith('{"name": "calculator')
    assert before.count("<tool_call>") == 2  # before its arguments were written
    assert run.taken == "42"  # LangChain's tool step takes the result already made


def test_without_reasoning_the_call_still_starts_while_it_is_written(runtime):
    run = Run(runtime, "mistral-v0.3.jinja", f"[TOOL_CALLS] [{CALL}]</s>")
    assert run.reasoning == "none"
    assert [c["name"] for c in run.progress.tool_calls] == ["calculator"]
    [(name, before)] = run.starts
    assert name == "calculator" and '"arguments"' not in before
    assert run.taken == "42"


@pytest.mark.parametrize("arguments", ["5", '"6*7"', '["6*7"]', "null"])
def test_arguments_that_are_not_an_object_run_no_tool(runtime, arguments):
    output = f'<tool_call>\n{{"name": "calculator", "arguments": {arguments}}}\n</tool_call></s>'
    run = Run(runtime, "qwen3.jinja", output)
    [hook] = run.hooks
    assert hook.stream.completed == [] and run.taken is None  # nothing ran, nothing offered
    assert "must be a JSON object" in hook.stream.observations[-1].text
    [invalid] = run.progress.invalid_tool_calls  # the final parse, as it was
    assert invalid["error"].startswith("invalid tool call: the arguments must be a JSON object")
    assert run.progress.tool_calls == []


def test_a_call_that_may_call_no_tools_gets_no_hook(runtime):
    """tool_choice="none": what looks like a call is the answer, and starts no tool."""
    output = f"<tool_call>\n{CALL}\n</tool_call></s>"
    run = Run(runtime, "qwen3.jinja", output, tool_choice="none")
    assert run.hooks == [None] and run.starts == [] and run.taken is None
    assert run.progress.tool_calls == [] and "calculator" in run.progress.content


def test_the_hook_reads_the_calls_own_tool_format(runtime):
    """A format given to the call (here Hermes on a Mistral template) is the one the hook's
    parser reads, so the call starts while it is written."""
    output = f"<tool_call>\n{CALL}\n</tool_call></s>"
    run = Run(runtime, "mistral-v0.3.jinja", output, tool_format="hermes")
    assert [c["name"] for c in run.progress.tool_calls] == ["calculator"]
    [(name, before)] = run.starts
    assert name == "calculator" and '"arguments"' not in before
    assert run.taken == "42"


def test_a_call_inside_magistral_think_starts_no_tool(runtime):
    """Magistral's [THINK] special tokens: kept in decoding for the hook, the considered call
    inside starts nothing, the call after [/THINK] starts at its name."""
    call = '[TOOL_CALLS]calculator[ARGS]{"expression": "6*7"}'
    output = f"[THINK]Maybe {call}? Better check.[/THINK]{call}</s>"
    run = Run(runtime, "magistral-small-2509.jinja", output,
              specials=("[ARGS]", "[THINK]", "[/THINK]"))
    assert run.reasoning == "detect_mistral" and len(run.hooks) == 1
    assert run.progress.reasoning_content == f"Maybe {call}? Better check."
    assert [(c["name"], c["args"]) for c in run.progress.tool_calls] == [("calculator", ARGS)]
    [(name, before)] = run.starts  # the call after [/THINK] only, before its arguments
    assert name == "calculator" and before.count("[TOOL_CALLS]") == 2
    assert '"expression"' not in before.split("[/THINK]")[1]
    assert run.taken == "42"
