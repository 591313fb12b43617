"""Qwen3-Coder XML calls in partial execution: the hook's parser (``stream_parser``) types each
parameter by the tools' JSON schemas exactly as the chat layer's final parse does, so a tool
started early gets the arguments the final message reports — wherever the output is cut — and
a string parameter streams as ``delta`` pieces, as in the JSON formats."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from toy_tools import EchoTool

from agentrt.agent import ToolRuntime, ToolStream
from agentrt.agent.parsers import stream_parser
from agentrt.agent.parsers.base import Piece
from agentrt.agent.tool_stream import arguments_of
from agentrt.chat.formats import QWEN_XML
from agentrt.chat.tool_calls import ToolCallStream

TOOLS = [{"type": "function", "function": {"name": "t", "parameters": {
    "type": "object", "properties": {
        "s": {"type": "string"}, "digits": {"type": "string"}, "word": {"type": "string"},
        "n": {"type": "integer"}, "b": {"type": "boolean"}, "o": {"type": "object"},
        "a": {"type": "array"}}}}}]
# values whose text is also JSON of another type: a string parameter must stay a string
ARGS = {"s": "SELECT * FROM t WHERE x = 'a b';", "digits": "42", "word": "true", "n": 7,
        "b": False, "o": {"k": [1, "v"]}, "a": [1, 2.5, None]}
TEXT = "Let me run it.\n" + QWEN_XML.format_calls([("t", ARGS)])


def early_start(text: str, cut: int) -> tuple[dict, dict[str, str]]:
    """What the hook's tool gets from ``text`` fed in two pieces: the complete arguments, and
    per string parameter its streamed deltas joined."""
    parser = stream_parser("qwen_xml", tools=TOOLS)
    events = parser.feed(text[:cut]) + parser.feed(text[cut:]) + parser.close()
    pieces = [e for e in events if isinstance(e, Piece)]
    deltas: dict[str, str] = {}
    for p in pieces:
        if p.kind == "delta":
            deltas[p.key] = deltas.get(p.key, "") + p.text
    return arguments_of(pieces), deltas


def final(text: str, cut: int) -> dict:
    """The arguments of the chat layer's final message for ``text`` cut at ``cut``."""
    stream = ToolCallStream(QWEN_XML, tools=TOOLS)
    stream.feed(text[:cut])
    stream.feed(text[cut:])
    stream.close()
    [call] = stream.tool_calls
    return call["args"]


def test_early_arguments_are_the_final_arguments_at_every_cut():
    for cut in range(len(TEXT) + 1):
        arguments, deltas = early_start(TEXT, cut)
        assert arguments == final(TEXT, cut) == ARGS, cut
        assert [type(arguments[k]) for k in ("digits", "word")] == [str, str], cut
        assert deltas == {k: ARGS[k] for k in ("s", "digits", "word")}, cut  # strings stream


# a string parameter's text: anything but the tags' "<", JSON-looking text included
_TEXT = st.one_of(st.text(st.characters(blacklist_characters="<\r", blacklist_categories=(
    "Cs", "Cc")), max_size=12), st.sampled_from(["42", "-1.5e3", "true", "null", '"q"', "[1]",
                                                   "{}", " 7 "]))
_JSON = st.recursive(st.none() | st.booleans() | st.integers(-999, 999)
                     | st.text("abc xyz", max_size=4),
                     lambda kids: st.lists(kids, max_size=3)
                     | st.dictionaries(st.text("kv", min_size=1, max_size=2), kids, max_size=2),
                     max_leaves=5)


@settings(max_examples=20, deadline=None)
@given(st.fixed_dictionaries({"s": _TEXT, "digits": _TEXT, "n": st.integers(-10**6, 10**6),
                              "b": st.booleans(), "o": st.dictionaries(st.text("xy", min_size=1,
                              max_size=2), _JSON, max_size=2), "a": st.lists(_JSON, max_size=3)}))
def test_any_arguments_start_as_the_final_message_reports_them(args):
    text = QWEN_XML.format_calls([("t", args)])
    for cut in range(len(text) + 1):
        arguments, deltas = early_start(text, cut)
        assert arguments == final(text, cut) == args, cut
        assert json.dumps(arguments) == json.dumps(args)  # same types, not only equal values
        assert deltas == {k: args[k] for k in ("s", "digits") if args[k]}, cut


def test_a_tool_without_a_schema_entry_gets_json_values():
    """A parameter the schema does not type is read as JSON, in both parses alike."""
    text = "<tool_call>\n<function=t>\n<parameter=extra>\n42\n</parameter>\n</function>"
    for cut in range(len(text) + 1):
        assert early_start(text, cut)[0] == final(text, cut) == {"extra": 42}


@pytest.fixture(scope="module")
def runtime():
    with ToolRuntime([EchoTool()]) as rt:
        yield rt


def test_the_tool_stream_hook_gives_the_tool_typed_arguments(tokenizer, runtime):
    """Through the engine hook: token ids → text → the parser built for the tools → the
    worker; the call completed carries ``"42"`` as the string the schema says."""
    reply = QWEN_XML.format_calls([("echo", {"text": "42", "n": 3})])
    parser = stream_parser("qwen_xml", tools=[tool.spec() for tool in runtime.tools.values()])
    with ToolStream(tokenizer, runtime, parser=parser, wait_for_tools=True) as stream:
        for token in tokenizer.encode(reply, add_special_tokens=False):
            assert stream.on_tokens([token]) == "continue"
        stream.close()
        [(_, arguments)] = stream.completed
        assert arguments == {"text": "42", "n": 3} and isinstance(arguments["text"], str)
        assert stream.observation().text == "n=3 text=42"


def test_a_tool_stream_named_by_syntax_types_by_its_runtimes_tools(tokenizer, runtime):
    """``ToolStream(parser="qwen_xml")`` (the hook partial execution and run_with_tools
    build) reads values by the runtime's tools' schemas: ``"42"`` stays a string."""
    reply = QWEN_XML.format_calls([("echo", {"text": "42", "n": 3})])
    with ToolStream(tokenizer, runtime, parser="qwen_xml", wait_for_tools=True) as stream:
        for token in tokenizer.encode(reply, add_special_tokens=False):
            assert stream.on_tokens([token]) == "continue"
        stream.close()
        [(_, arguments)] = stream.completed
        assert arguments == {"text": "42", "n": 3}
