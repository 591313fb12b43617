"""The Llama 3 and Mistral JSON tool-call parsers: events, split invariance (text and UTF-8
bytes), and partial execution through ToolStream (a call's tool starts as it is written)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt.agent import ToolRuntime, ToolStream
from agentrt.agent.parsers import create_parser
from agentrt.agent.parsers.base import CallEnd, CallStart, ParseError, Piece, ToolName

SAMPLES = {
    "llama3_json": (
        'Checking 😀 <|python_tag|>{"name": "search", "parameters": {"query": "日本 €", '
        '"n": [1, 2.5e3]}}; {"name": "g", "parameters": {}} and {"name": oops} tail '
        '{"name": "h", "parameters": {"s": "\\u00fc\\ud83d\\ude00"}} {"name": "t", "par'
    ),
    "mistral_json": (
        'OK [TOOL_CALLS] [{"name": "search", "arguments": {"query": "ü 日本"}, "id": "abc123xyz"}, '
        '{"name": "g", "arguments": {}}] after [TOOL_CALLS][{"name": "h", "arguments": {"a": '
        'true}}] [TOOL_CALLS] [{"name": 5}] [TOOL_CALLS] [{"name": "t", "arguments": {"a": [1'
    ),
}


def parse(name: str, chunks) -> list:
    parser = create_parser(name)
    events = []
    for chunk in chunks:
        events += parser.feed(chunk)
    return events + parser.close()


def calls(events) -> list[tuple[str, dict]]:
    out, name, args = [], None, {}
    for e in events:
        if isinstance(e, CallStart):
            name, args = None, {}
        elif isinstance(e, ToolName):
            name = e.name
        elif isinstance(e, Piece) and e.kind == "argument":
            args[e.key] = e.value
        elif isinstance(e, CallEnd):
            out.append((name, args))
    return out


def test_llama3_calls_with_and_without_the_python_tag():
    events = parse("llama3_json", [SAMPLES["llama3_json"]])
    assert calls(events) == [("search", {"query": "日本 €", "n": [1, 2500.0]}), ("g", {}),
                             ("h", {"s": "ü😀"})]
    assert sum(isinstance(e, CallStart) for e in events) == 5
    assert sum(isinstance(e, ParseError) for e in events) == 2  # invalid, then truncated


def test_mistral_list_items_are_calls():
    events = parse("mistral_json", [SAMPLES["mistral_json"]])
    assert calls(events) == [("search", {"query": "ü 日本"}), ("g", {}), ("h", {"a": True})]
    errors = [e.message for e in events if isinstance(e, ParseError)]
    assert len(errors) == 2 and "name" in errors[0] and "truncated" in errors[1]


def split(data, cuts):
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


@pytest.mark.parametrize("syntax", sorted(SAMPLES))
@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=40))
def test_any_resplitting_of_text_or_bytes_gives_identical_events(syntax, cuts):
    text = SAMPLES[syntax]
    whole = parse(syntax, [text])
    assert parse(syntax, split(text, cuts)) == whole
    assert parse(syntax, split(text.encode(), cuts)) == whole


@pytest.mark.parametrize("syntax", sorted(SAMPLES))
def test_character_by_character_and_byte_by_byte(syntax):
    text = SAMPLES[syntax]
    whole = parse(syntax, [text])
    assert parse(syntax, list(text)) == whole
    assert parse(syntax, [bytes([b]) for b in text.encode()]) == whole


@pytest.mark.parametrize(("syntax", "reply"), [
    ("llama3_json", '{"name": "calculator", "parameters": {"expression": "200 * 701"}}'),
    ("mistral_json", '[TOOL_CALLS] [{"name": "calculator", "arguments": '
                     '{"expression": "200 * 701"}}]'),
])
def test_partial_execution_starts_the_tool_when_its_arguments_are_complete(
        tokenizer, syntax, reply):
    with ToolRuntime(["calculator"]) as runtime:
        stream = ToolStream(tokenizer, runtime, parser=syntax, wait_for_tools=True)
        ids = tokenizer.encode(reply, add_special_tokens=False)
        complete_at = None
        for i, token in enumerate(ids):
            assert stream.on_tokens([token]) == "continue"
            if complete_at is None and stream.call_complete:
                complete_at = i
        assert complete_at is not None  # the call ended with its JSON, before the stream did
        assert "}" in tokenizer.decode(ids[complete_at:])
        stream.close()
        assert stream.observation().text == "140200"
