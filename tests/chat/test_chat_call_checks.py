"""What is and is not a tool call: calls whose arguments are not a JSON object, that name
their tool twice or not at all are invalid calls (never a call with ``{}``), in every format
and however the stream is split; and an answer is never read as a call when the request has
no tools to call (a Llama 3 model's JSON answer ``{"name": …}`` stays the answer)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentrt import SamplingParams
from agentrt.chat import ChatCall, ChatProgress, ToolCallStream, prepare_chat, run_deltas
from agentrt.chat.formats import HERMES, LLAMA3, MISTRAL, ToolCallFormat
from agentrt.engine.outputs import StreamDelta

TEMPLATES = Path(__file__).parent / "templates"
BAD_CALLS = {  # call JSON → what the error says
    '{"name": "f", "arguments": "{\\"a\\": 1}"}': "must be a JSON object, got a string",
    '{"name": "f", "arguments": [1, {"a": 2}]}': "must be a JSON object, got an array",
    '{"name": "f", "arguments": 5}': "must be a JSON object, got a number",
    '{"name": "f", "arguments": null}': "must be a JSON object, got null",
    '{"name": "f", "name": "g", "arguments": {}}': "names its tool twice",
    '{"name": "f", "arguments": {"a": 1}, "arguments": {"b": 2}}': "more than one arguments",
    '{"name": "f", "arguments": {"a": 1}, "parameters": {}}': "more than one arguments",
    '{"name": "", "arguments": {}}': "empty tool name",
}


def wrap(fmt: ToolCallFormat, call_json: str) -> str:
    if fmt is LLAMA3:
        call_json = call_json.replace('"arguments"', '"parameters"', 1)
    return f"{fmt.call_begin}{call_json}{fmt.call_end}"


def parse(fmt: ToolCallFormat, pieces: list[str]):
    stream = ToolCallStream(fmt)
    outs = [stream.feed(p) for p in pieces] + [stream.close()]
    return stream, "".join(o.content for o in outs)


@pytest.mark.parametrize("fmt", [HERMES, LLAMA3, MISTRAL], ids=lambda f: f.name)
@pytest.mark.parametrize("call_json", sorted(BAD_CALLS))
def test_a_malformed_call_is_invalid_wherever_the_stream_is_split(fmt, call_json):
    good = fmt.format_calls([("ok", {"x": 1})])
    bad = wrap(fmt, call_json)
    text = f"{fmt.list_begin}{bad}{fmt.separator}{good[len(fmt.list_begin):]}" if fmt.is_list \
        else f"{bad}{fmt.separator}{good}"
    for cut in range(len(text) + 1):
        stream, _ = parse(fmt, [text[:cut], text[cut:]])
        assert [(c["name"], c["args"]) for c in stream.tool_calls] == [("ok", {"x": 1})]
        [invalid] = stream.invalid_tool_calls
        assert BAD_CALLS[call_json] in invalid["error"], (cut, invalid)
        assert json.loads(invalid["args"]) is not None  # the raw JSON is kept for the caller


def test_a_whole_answer_with_only_a_malformed_call_does_not_finish_with_tool_calls():
    call = ChatCall(None, [1], SamplingParams(), tool_format=HERMES)  # type: ignore[arg-type]
    progress = ChatProgress(call)
    progress.feed(StreamDelta("r", wrap(HERMES, '{"name": "f", "arguments": [1]}'), [1],
                              finished=True, finish_reason="stop"))
    assert progress.tool_calls == [] and progress.finish_reason == "stop"
    assert progress.invalid_tool_calls[0]["name"] == "f"


# --- a request without tools reads no calls -----------------------------------------------

PERSON = {"type": "json_schema", "json_schema": {"name": "person", "schema": {
    "type": "object", "properties": {"name": {"type": "string", "maxLength": 8}},
    "required": ["name"], "additionalProperties": False}}}
TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}}}}}


def answer(engine, **kwargs) -> ChatProgress:
    call = prepare_chat(engine, [{"role": "user", "content": "A person as JSON."}],
                        chat_template=(TEMPLATES / "llama3.1.jinja").read_text(),
                        response_format=PERSON, max_tokens=24, **kwargs)
    assert call.tool_format is LLAMA3
    progress = ChatProgress(call)
    for delta in run_deltas(call):
        progress.feed(delta)
    return progress


@pytest.mark.parametrize("tools", [{}, {"tools": [TOOL], "tool_choice": "none"}],
                         ids=["no-tools", "tool-choice-none"])
def test_a_llama3_json_answer_is_the_answer_when_no_call_may_be_made(engine, tools):
    pytest.importorskip("xgrammar")
    progress = answer(engine, **tools)
    assert progress.tool_calls == [] and progress.invalid_tool_calls == []
    assert isinstance(json.loads(progress.content)["name"], str)  # the schema's answer, whole
    assert progress.finish_reason in ("stop", "length")


def test_without_tools_the_markers_are_answer_text_but_think_is_still_reasoning():
    call = ChatCall(None, [1], SamplingParams(), tool_format=HERMES,  # type: ignore[arg-type]
                    reasoning="detect", can_call_tools=False)
    progress = ChatProgress(call)
    text = '<think>\nhm\n</think>\n\nUse <tool_call>{"name": "f"}</tool_call> like this.'
    for i, piece in enumerate(text):
        progress.feed(StreamDelta("r", piece, [1], finished=i == len(text) - 1,
                                  finish_reason="stop"))
    assert progress.reasoning_content == "hm"
    assert progress.content == 'Use <tool_call>{"name": "f"}</tool_call> like this.'
    assert progress.tool_calls == [] and progress.invalid_tool_calls == []


@pytest.mark.parametrize("call_json", sorted(BAD_CALLS))
def test_streamed_chunks_never_show_a_different_or_emptied_call(call_json):
    """The chunks of a malformed call carry its first name only, and arguments that are not
    an object stream as written, so LangChain's merged chunks hold no valid call ``{}``."""
    lc = pytest.importorskip("langchain_core.messages")
    text = wrap(HERMES, call_json)
    for cut in range(1, len(text)):
        stream = ToolCallStream(HERMES)
        outs = [stream.feed(text[:cut]), stream.feed(text[cut:]), stream.close()]
        chunks = [c for o in outs for c in o.tool_call_chunks]
        assert "".join(c["name"] or "" for c in chunks) in ("f", "")
        merged = lc.AIMessageChunk(content="")
        for out in outs:  # as LangChain adds up the chunks of a stream
            merged += lc.AIMessageChunk(content="", tool_call_chunks=out.tool_call_chunks)
        if "must be a JSON object" in BAD_CALLS[call_json]:
            assert merged.tool_calls == [] and len(merged.invalid_tool_calls) == 1
            written = json.loads(call_json)["arguments"]
            assert json.loads(merged.invalid_tool_calls[0]["args"]) == written


@pytest.mark.parametrize("text", ["Sure [TOOL_CALLS]", "Sure [TOOL_CALLS] [",
                                  'Sure [TOOL_CALLS] [{"name": "f", "arguments": {}}, '])
def test_a_mistral_list_cut_before_its_call_is_a_truncated_call(text):
    """As ``<tool_call>`` or ``<|python_tag|>`` cut off at the end (``max_tokens``)."""
    for cut in range(len(text) + 1):
        stream, content = parse(MISTRAL, [text[:cut], text[cut:]])
        assert content == "Sure "
        [invalid] = stream.invalid_tool_calls
        assert "truncated tool call" in invalid["error"] and invalid["name"] is None


@pytest.mark.parametrize("tool_choice", ["required", "lookup"])
def test_a_forced_call_cut_inside_its_opening_tag_is_a_truncated_call(engine, tool_choice):
    """max_tokens 1-3 ends a forced call inside ``<tool_call>``: no answer text ``<tool``,
    one truncated call (as the whole and the streamed server answers show it: nothing)."""
    for max_tokens in (1, 2, 3):
        call = prepare_chat(engine, [{"role": "user", "content": "Look up Paris."}],
                            tools=[TOOL], tool_choice=tool_choice, max_tokens=max_tokens)
        assert call.must_call_tools
        progress = ChatProgress(call)
        for delta in run_deltas(call):
            progress.feed(delta)
        assert progress.content == "" and progress.tool_calls == [], max_tokens
        [cut] = progress.invalid_tool_calls
        assert "truncated" in cut["error"] and progress.finish_reason == "length"


def test_under_auto_a_fragment_of_an_opening_tag_stays_text():
    """Nothing forced a call: ``<tool`` at the end may be text, so it is shown."""
    stream = ToolCallStream(HERMES)
    pieces = [stream.feed("Use <tool"), stream.close()]
    assert "".join(p.content for p in pieces) == "Use <tool"
    assert stream.invalid_tool_calls == []


def test_one_stop_string_is_one_stop(engine):
    call = prepare_chat(engine, [{"role": "user", "content": "hi"}], stop="Paris")
    assert call.params.stop == ("Paris",)


def test_two_tools_of_one_name_are_refused(engine):
    """A call names the tool it calls: two tools of one name would make it ambiguous."""
    tool = {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}
    other = {"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}
    with pytest.raises(ValueError, match="more than one tool is named 'search'"):
        prepare_chat(engine, [{"role": "user", "content": "hi"}], tools=[tool, other, tool])
