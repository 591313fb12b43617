"""Partial execution skips ``<think>`` reasoning (SkipReasoning, ToolStream(reasoning=...)):
the calls it completes are the chat layer's final calls, wherever the output was split, and
a call inside the block never starts a tool. Strict JSON calls: valid JSON that is no valid
call (arguments not an object, a second name or arguments object) never runs a tool."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_agent_parsers_formats import calls

from agentrt.agent import ToolRuntime, ToolStream
from agentrt.agent.parsers import create_parser
from agentrt.agent.parsers.base import CallEnd, ParseError
from agentrt.agent.parsers.reasoning import SkipReasoning
from agentrt.chat.formats import HERMES, LLAMA3, MISTRAL
from agentrt.chat.tool_calls import ToolCallStream

FORMATS = {"json_toolcall": HERMES, "llama3_json": LLAMA3, "mistral_json": MISTRAL}
# (syntax, reasoning mode, output): calls inside <think> (to skip), calls after it (to start),
# <think> / </think> inside a call's argument (argument text, as the chat layer reads it)
SAMPLES = [
    ("json_toolcall", "detect",
     '<think>\nI could <tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>\n</think>\n\n'
     'Sure 😀 <tool_call>\n{"name": "b", "arguments": {"code": "print(\'<think>no</think>\')"}}'
     '\n</tool_call> then <think>again <tool_call>{"name": "c", "arguments": {}}</tool_call>'
     '</think>\n<tool_call>{"name": "d", "arguments": {"s": "日本", "n": [1, 2]}}</tool_call>'),
    ("json_toolcall", "open",
     'Maybe <tool_call>{"name": "a", "arguments": {}}</tool_call>? <thi\n</think>\n\n'
     '<tool_call>{"name": "b", "arguments": {"x": "</think><think>"}}</tool_call>'),
    ("llama3_json", "detect",
     '<think>{"name": "a", "parameters": {}}</think>\n\n<|python_tag|>{"name": "b", '
     '"parameters": {"q": "</think>"}}; {"name": "c", "parameters": {"n": 2}}'),
    ("mistral_json", "detect",
     '<think>[TOOL_CALLS] [{"name": "a", "arguments": {}}]</think>\n[TOOL_CALLS] '
     '[{"name": "b", "arguments": {"t": "<think>"}}, {"name": "c", "arguments": {}}]'),
]
IDS = [f"{syntax}-{mode}" for syntax, mode, _ in SAMPLES]


def skip_parse(syntax: str, mode: str, chunks) -> list:
    parser = SkipReasoning(create_parser(syntax, is_strict=True), mode)
    events = []
    for chunk in chunks:
        events += parser.feed(chunk)
    return events + parser.close()


def chat_calls(syntax: str, mode: str, text: str) -> list[tuple[str, dict]]:
    """The chat layer's final calls of ``text`` (its reasoning split and call reader)."""
    stream = ToolCallStream(FORMATS[syntax], reasoning=mode)
    stream.feed(text)
    stream.close()
    return [(c["name"], c["args"]) for c in stream.tool_calls]


@pytest.mark.parametrize(("syntax", "mode", "text"), SAMPLES, ids=IDS)
def test_the_calls_started_are_the_chat_layers_calls(syntax, mode, text):
    events = skip_parse(syntax, mode, [text])
    assert calls(events) == chat_calls(syntax, mode, text)
    assert {name for name, _ in calls(events)} >= {"b"} and "a" not in dict(calls(events))
    assert not any(isinstance(e, ParseError) for e in events)


@pytest.mark.parametrize(("syntax", "mode", "text"), SAMPLES, ids=IDS)
def test_a_cut_anywhere_gives_the_same_events(syntax, mode, text):
    whole = skip_parse(syntax, mode, [text])
    data = text.encode()
    for i in range(len(data) + 1):  # every byte offset, inside the tags and inside characters
        assert skip_parse(syntax, mode, [data[:i], data[i:]]) == whole, i
    assert skip_parse(syntax, mode, list(text)) == whole


@pytest.mark.parametrize(("syntax", "mode", "text"), SAMPLES, ids=IDS)
@settings(max_examples=40, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=30))
def test_any_resplitting_of_utf8_bytes_gives_the_same_events(syntax, mode, text, cuts):
    data = text.encode()
    points = sorted({c % (len(data) + 1) for c in cuts})
    chunks = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    assert skip_parse(syntax, mode, chunks) == skip_parse(syntax, mode, [text])


def test_only_reasoning_modes_are_skipped():
    with pytest.raises(ValueError, match="'detect' or 'open'"):
        SkipReasoning(create_parser("json_toolcall"), "none")  # type: ignore[arg-type]


# -- ToolStream: real tokens, a real tool ------------------------------------------------------

CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "6*7"}}\n</tool_call>'


@pytest.fixture(scope="module")
def runtime():
    with ToolRuntime(["calculator"]) as rt:
        yield rt


@pytest.fixture
def starts(runtime):
    """The tools started, in order (the runtime's ``start`` spied on)."""
    started, start = [], runtime.start

    def spy(name, **kwargs):
        started.append(name)
        return start(name, **kwargs)

    runtime.start = spy
    yield started
    del runtime.start


def test_tokens_of_a_reasoning_model_start_only_the_call_after_think(
        tokenizer, runtime, starts):
    output = f"<think>\nThe tool: {CALL} would do.\n</think>\n\n{CALL}"
    ids = tokenizer.encode(output, add_special_tokens=False)
    pieces = [tokenizer.decode([i]) for i in ids]
    assert "<think>" not in pieces and "</think>" not in pieces  # the tags span tokens
    stream = ToolStream(tokenizer, runtime, reasoning="detect", wait_for_tools=True)
    n = 0
    while not starts:
        assert stream.on_tokens([ids[n]]) == "continue"
        n += 1
    before = tokenizer.decode(ids[:n])  # not the considered call: the one after </think>,
    assert starts == ["calculator"] and "</think>" in before
    assert before.count('"6*7"') == 1  # started at its name, before its arguments were written
    for token in ids[n:]:
        stream.on_tokens([token])
    stream.close()
    assert stream.observation().text == "42" and starts == ["calculator"]


@pytest.mark.parametrize("cut", range(len("<think>\n") + len(CALL) + len("\n</think>") + 1))
def test_a_think_block_cut_anywhere_starts_nothing(tokenizer, runtime, starts, cut):
    text = f"<think>\n{CALL}\n</think>"
    stream = ToolStream(tokenizer, runtime, reasoning="detect")
    stream.feed_text(text[:cut])
    stream.feed_text(text[cut:])
    assert stream.close() == "continue" and starts == [] and stream.completed == []


# -- strict JSON calls -------------------------------------------------------------------------


@pytest.mark.parametrize(("syntax", "call"), [
    ("json_toolcall", '<tool_call>{"name": "calculator", "arguments": 5}</tool_call>'),
    ("json_toolcall", '<tool_call>{"name": "calculator", "arguments": "6*7"}</tool_call>'),
    ("json_toolcall", '<tool_call>{"arguments": ["6*7"], "name": "calculator"}</tool_call>'),
    ("json_toolcall", '<tool_call>{"name": "calculator", "arguments": null}</tool_call>'),
    ("json_toolcall", '<tool_call>{"name": "calculator", "arguments": {"expression": "1"}, '
                      '"parameters": {"expression": "2"}}</tool_call>'),
    ("json_toolcall", '<tool_call>{"name": "calculator", "arguments": {"expression": "1"}, '
                      '"name": "calculator"}</tool_call>'),
    ("llama3_json", '{"name": "calculator", "parameters": true}'),
    ("mistral_json", '[TOOL_CALLS] [{"name": "calculator", "arguments": [1]}]'),
])
def test_valid_json_that_is_no_valid_call_runs_no_tool(tokenizer, runtime, syntax, call):
    stream = ToolStream(tokenizer, runtime, parser=syntax)
    assert stream.feed_text(call) == "abort"
    assert stream.close() == "abort" and stream.completed == [] and not stream.call_complete
    [observation] = stream.observations
    assert observation.is_error and "invalid tool call" in observation.text


def test_the_chat_layers_parser_still_ends_such_a_call():
    """Without ``is_strict`` (the chat layer's final parse) the call ends; its reader judges."""
    text = '<tool_call>{"name": "calculator", "arguments": 5}</tool_call>'
    events = create_parser("json_toolcall").feed(text)
    assert events[-1] == CallEnd()
