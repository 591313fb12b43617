"""The ``<tool_call>`` output parser: split-invariant, streamed args add up to the call."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import AIMessageChunk

from agentrt.chat import (
    ToolCallStream,
    format_tool_call,
    normalize_tool_choice,
    output_structural_tag,
)

CALL = format_tool_call("search", {"query": "caf\u00e9 \"paris\"", "limit": 3, "tags": ["a", "b"]})
TEXT = f"Let me look.\n{CALL}\nDone <tool bit."


def _run(pieces: list[str]):
    stream = ToolCallStream()
    outs = [stream.feed(p) for p in pieces] + [stream.close()]
    return stream, outs


def _chunks(outs) -> AIMessageChunk:
    msgs = [AIMessageChunk(content=o.content, tool_call_chunks=o.tool_call_chunks) for o in outs]
    total = msgs[0]
    for m in msgs[1:]:
        total = total + m
    return AIMessageChunk(content=total.content, tool_call_chunks=total.tool_call_chunks,
                          chunk_position="last")


@pytest.mark.parametrize("size", [1, 2, 3, 7, len(TEXT)])
def test_any_split_gives_the_same_text_and_call(size):
    stream, outs = _run([TEXT[i : i + size] for i in range(0, len(TEXT), size)])
    assert "".join(o.content for o in outs) == "Let me look.\n\nDone <tool bit."
    [call] = stream.tool_calls
    assert call["name"] == "search"
    assert call["args"] == {"query": 'caf\u00e9 "paris"', "limit": 3, "tags": ["a", "b"]}
    assert not stream.invalid_tool_calls
    merged = _chunks(outs)  # what LangChain builds from the streamed chunks
    assert merged.tool_calls[0]["args"] == call["args"]
    assert merged.tool_calls[0]["id"] == call["id"]
    assert json.loads(merged.tool_call_chunks[0]["args"]) == call["args"]


def test_string_arguments_stream_before_the_call_ends():
    stream = ToolCallStream()
    outs = [stream.feed(c) for c in CALL] + [stream.close()]
    arg_pieces = [c["args"] for o in outs for c in o.tool_call_chunks if c["args"]]
    assert len(arg_pieces) > 5  # the query string arrives word by word
    assert arg_pieces[0].startswith('{"query": "caf')


def test_two_calls_get_two_indices_and_ids():
    a, b = format_tool_call("f", {}), format_tool_call("g", {"x": 1})
    stream, outs = _run([a + "\n" + b])
    assert [c["name"] for c in stream.tool_calls] == ["f", "g"]
    assert stream.tool_calls[0]["args"] == {}
    merged = _chunks(outs)
    assert [c["index"] for c in merged.tool_call_chunks] == [0, 1]
    assert len({c["id"] for c in stream.tool_calls}) == 2


def test_truncated_and_malformed_calls_are_invalid_not_raised():
    stream, _ = _run(['<tool_call>\n{"name": "f", "arguments": {"a": 1'])
    assert not stream.tool_calls
    [bad] = stream.invalid_tool_calls
    assert bad["name"] == "f" and "truncated" in bad["error"]
    stream, outs = _run(['<tool_call>{"name": f}</tool_call> after'])
    assert not stream.tool_calls and stream.invalid_tool_calls[0]["error"]
    assert "".join(o.content for o in outs) == " after"


def test_missing_close_tag_keeps_the_following_text():
    stream, outs = _run(['<tool_call>{"name": "f", "arguments": {}} and more'])
    assert stream.tool_calls[0]["name"] == "f"
    assert "".join(o.content for o in outs) == "and more"


def test_tool_choice_names_the_bound_tools_in_its_error():
    assert normalize_tool_choice("any", ["a"]) == "required"
    assert normalize_tool_choice({"type": "function", "function": {"name": "b"}},
                                 ["a", "b"]) == "b"
    assert normalize_tool_choice(True, ["a"]) == "a"
    with pytest.raises(ValueError, match="bound tools are: a, b"):
        normalize_tool_choice("c", ["a", "b"])
    with pytest.raises(ValueError, match="at least one bound tool"):
        normalize_tool_choice("required", [])


def test_structural_tags_follow_the_tool_choice():
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
             for n in ("a", "b")]
    assert output_structural_tag([], "auto") is None
    auto = output_structural_tag(tools, "auto")["format"]
    assert auto["type"] == "triggered_tags" and auto["stop_after_first"]
    forced = output_structural_tag(tools, "b", parallel_tool_calls=True)["format"]
    assert [t["begin"] for t in forced["tags"]] == ['<tool_call>\n{"name": "b", "arguments": ']
    assert forced["at_least_one"] and not forced["stop_after_first"]
    assert "<tool_" in output_structural_tag(tools, "none")["format"]["excludes"]
    assert auto["triggers"] == ["<tool_"]
