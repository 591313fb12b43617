"""The Llama 3, Mistral JSON, Mistral v11+ (``[ARGS]``) and Qwen3-Coder XML tool-call parsers:
events and partial execution through ToolStream (a call's tool starts as it is written). Split
invariance (text and UTF-8 bytes) is checked for every syntax in test_agent_parsers.py, whose
SAMPLES hold these formats too."""

from __future__ import annotations

import pytest
from test_agent_parsers import SAMPLES, parse  # the formats' samples live with the others

from agentrt.agent import ToolRuntime, ToolStream, create_parser
from agentrt.agent.parsers.base import CallEnd, CallStart, ParseError, Piece, ToolName


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
                             ("h", {"s": "ü😀"}), ("k", {"b": None})]  # Llama 3.2's "type" key
    assert sum(isinstance(e, CallStart) for e in events) == 6
    assert sum(isinstance(e, ParseError) for e in events) == 2  # invalid, then truncated


def test_mistral_list_items_are_calls():
    events = parse("mistral_json", [SAMPLES["mistral_json"]])
    assert calls(events) == [("search", {"query": "ü 日本"}), ("g", {}), ("h", {"a": True})]
    errors = [e.message for e in events if isinstance(e, ParseError)]
    assert len(errors) == 2 and "name" in errors[0] and "truncated" in errors[1]


def test_mistral_v11_calls_start_at_the_name_and_refuse_what_is_no_call():
    events = parse("mistral_args", [SAMPLES["mistral_args"]])
    assert calls(events) == [("search", {"query": "ü 日本"}), ("g", {}), ("h", {"a": True})]
    errors = [e.message for e in events if isinstance(e, ParseError)]
    assert len(errors) == 3 and "tool name" in errors[0] and "'{'" in errors[1]
    assert "truncated" in errors[2]
    parser = create_parser("mistral_args")
    assert parser.feed('[TOOL_CALLS]search[AR') == [CallStart("mistral_args")]
    assert parser.feed('GS]{"q') == [ToolName("search")]  # the tool may start here


def test_qwen_xml_calls_start_at_the_function_and_refuse_what_is_no_call():
    events = parse("qwen_xml", [SAMPLES["qwen_xml"]])
    assert calls(events) == [("search", {"query": "café\n日本\n", "n": 3}), ("g", {})]
    errors = [e.message for e in events if isinstance(e, ParseError)]
    assert len(errors) == 4 and "tool name" in errors[0] and "twice" in errors[1]
    assert "'j'" in errors[2] and "truncated" in errors[3]
    parser = create_parser("qwen_xml", schemas={"run": {"properties": {
        "code": {"type": "string"}}}})
    assert parser.feed("<tool_call>\n<function=run") == [CallStart("qwen_xml")]
    assert parser.feed(">\n<parameter=code>\nx = 1\n") == [  # the held newline may end it
        ToolName("run"), *(Piece("delta", d, key="code") for d in ("x ", "=", " "))]
    assert parser.feed("</parameter>\n</function>") == [
        Piece("delta", "1", key="code"), Piece("argument", key="code", value="x = 1"), CallEnd()]


@pytest.mark.parametrize(("syntax", "reply"), [
    ("llama3_json", '{"name": "calculator", "parameters": {"expression": "200 * 701"}}'),
    ("mistral_json", '[TOOL_CALLS] [{"name": "calculator", "arguments": '
                     '{"expression": "200 * 701"}}]'),
    ("mistral_args", '[TOOL_CALLS]calculator[ARGS]{"expression": "200 * 701"}'),
    ("qwen_xml", "<tool_call>\n<function=calculator>\n<parameter=expression>\n200 * 701\n"
                 "</parameter>\n</function>\n</tool_call>"),
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
        closing = ">" if syntax == "qwen_xml" else "}"  # the call's last character: its token
        assert closing in tokenizer.decode(ids[complete_at : complete_at + 1])
        stream.close()
        assert stream.observation().text == "140200"
