"""Tool-call formats per model family: detection from real templates, the history each
template shows back, grammars that accept exactly what the format writes, and streamed
parsing (calls, chunks, ``<think>`` reasoning) that does not depend on where the text is split."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt.chat import ToolCallStream, detect_format, render_prompt, template_caps
from agentrt.chat.formats import (
    HERMES,
    LLAMA3,
    MISTRAL,
    MISTRAL_ARGS,
    QWEN_XML,
    detect_reasoning,
    get_format,
)
from agentrt.chat.grammar import output_structural_tag

TEMPLATES = Path(__file__).parent / "templates"
TOOL = {"type": "function", "function": {
    "name": "multiply", "description": "Multiply two numbers.",
    "parameters": {"type": "object", "properties": {"a": {"type": "number"},
                                                    "b": {"type": "number"}},
                   "required": ["a", "b"]}}}
HISTORY = [
    {"role": "user", "content": "What is 3 times 7?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0123456789abcdef", "type": "function",
         "function": {"name": "multiply", "arguments": '{"a": 3, "b": 7}'}}]},
    {"role": "tool", "tool_call_id": "call_0123456789abcdef", "content": "21"},
]


def template(name: str) -> str:
    return (TEMPLATES / f"{name}.jinja").read_text()


# -- detection and history ------------------------------------------------------------------

@pytest.mark.parametrize(("name", "expected", "list_begin"), [
    ("llama3.1", "llama3", ""),
    ("mistral-v0.3", "mistral", "[TOOL_CALLS] ["),
    ("mistral-nemo", "mistral", "[TOOL_CALLS]["),
    ("qwen3", "hermes", ""),
    ("ministral-3", "mistral_args", ""),
    ("mistral-v11", "mistral_args", ""),
    ("qwen3-coder", "qwen_xml", ""),
])
def test_the_format_is_read_from_the_real_template(name, expected, list_begin):
    fmt = detect_format(template(name))
    assert fmt.name == expected and fmt.list_begin == list_begin
    assert (fmt.call_id_tag, fmt.call_id_len) == (("[CALL_ID]", 9) if name == "mistral-v11"
                                                   else ("", 9 if fmt.is_list else 0))
    assert detect_format(template(name), "hermes") is HERMES  # the caller can override


def test_templates_without_tools_get_hermes_and_unknown_names_are_refused(tokenizer):
    assert detect_format(tokenizer) is HERMES  # SmolLM2's template renders no tools
    assert detect_format(None) is HERMES
    with pytest.raises(ValueError, match="known: hermes, llama3, mistral, mistral_args, qwen_xml"):
        get_format("pythonic")


def test_reasoning_is_read_from_the_template_and_the_prompt():
    assert detect_reasoning(template("llama3.1")) == "none"
    assert detect_reasoning(template("qwen3"), "<|im_start|>assistant\n") == "detect"
    assert detect_reasoning(template("qwen3"), "<|im_start|>assistant\n<think>\n") == "open"
    assert detect_reasoning(template("qwen3"), "assistant\n<think>\n\n</think>\n\n") == "detect"


@pytest.mark.parametrize("name", ["llama3.1", "mistral-v0.3", "mistral-nemo", "qwen3",
                                  "ministral-3", "mistral-v11", "qwen3-coder"])
def test_the_history_shows_back_what_the_format_writes(tokenizer, name):
    text = template(name)
    fmt = detect_format(text)
    caps = template_caps(tokenizer, text)
    assert caps.renders_tools and caps.renders_tool_calls
    prompt = render_prompt(tokenizer, HISTORY, [TOOL], tool_format=fmt, chat_template=text)
    written = fmt.format_calls([("multiply", {"a": 3, "b": 7})])
    if fmt.is_list:  # Mistral's template adds the call's (9-character) id inside the list
        call_id = fmt.template_call_id("call_0123456789abcdef")
        assert len(call_id) == 9 and call_id.isalnum()
        written = written[:-2] + f', "id": "{call_id}"}}]'
        assert f'"call_id": "{call_id}"' in prompt  # the tool result names the same id
    elif fmt.call_id_tag:  # Mistral v11: [TOOL_CALLS]name[CALL_ID]id[ARGS]{…}
        call_id = fmt.template_call_id("call_0123456789abcdef")
        written = f'[TOOL_CALLS]multiply[CALL_ID]{call_id}[ARGS]{{"a": 3, "b": 7}}'
        assert f"[TOOL_RESULTS]{call_id}[TOOL_CONTENT]21[/TOOL_RESULTS]" in prompt
    elif fmt.args_tag:
        assert "[TOOL_RESULTS]21[/TOOL_RESULTS]" in prompt
    elif fmt.is_xml:
        assert "<tool_response>\n21\n</tool_response>" in prompt
    assert written in prompt
    assert "multiply" in prompt.split(written)[0]  # the tool was shown first


def test_a_forced_format_writes_the_history_for_a_template_without_tools(tokenizer):
    prompt = render_prompt(tokenizer, HISTORY, [TOOL], tool_format=LLAMA3)
    assert '{"name": "multiply", "parameters": {"a": 3, "b": 7}}' in prompt
    assert '"parameters": dictionary of argument name' in prompt
    assert "<tool_call>" not in prompt


# -- grammar --------------------------------------------------------------------------------

xgr = pytest.importorskip("xgrammar")


@pytest.fixture(scope="module")
def compiler(tokenizer):
    info = xgr.TokenizerInfo.from_huggingface(tokenizer)
    return info, xgr.GrammarCompiler(info)


def accepts(compiler, tag, text: str) -> bool:
    info, comp = compiler
    matcher = xgr.GrammarMatcher(comp.compile_structural_tag(json.dumps(tag)))
    return (matcher.accept_string(text) and matcher.accept_token(info.stop_token_ids[0])
            and matcher.is_terminated())


TOOLS = [{"type": "function", "function": {"name": n, "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}
    for n in ("f", "g")]


MISTRAL_V11 = replace(MISTRAL_ARGS, call_id_tag="[CALL_ID]", call_id_len=9)


@pytest.mark.parametrize("fmt", [HERMES, LLAMA3, MISTRAL, MISTRAL_ARGS, MISTRAL_V11, QWEN_XML],
                         ids=["hermes", "llama3", "mistral", "mistral_args", "mistral_v11",
                              "qwen_xml"])
def test_grammars_accept_exactly_what_the_format_writes(compiler, fmt):
    one = fmt.format_calls([("g", {"a": 1})])
    two = fmt.format_calls([("f", {"a": 1}), ("g", {"a": 2})])
    text = "The answer is 4."

    def tag(choice, **kw):
        return output_structural_tag(TOOLS, choice, tool_format=fmt, **kw)

    assert [accepts(compiler, tag("required"), s) for s in (one, two, text)] == \
        [True, False, False]  # one call unless parallel_tool_calls
    assert accepts(compiler, tag("required", parallel_tool_calls=True), two)
    assert [accepts(compiler, tag("f"), s) for s in (one, fmt.format_calls([("f", {"a": 1})]))] \
        == [False, True]
    assert [accepts(compiler, tag("auto"), s) for s in (one, text, text + " " + one)] == \
        [True, True, True]
    assert not accepts(compiler, tag("auto"), fmt.format_calls([("g", {"b": 1})]))  # schema
    assert [accepts(compiler, tag("none"), s) for s in (one, text)] == [False, True]
    think = "<think>\nShould I call g?\n</think>\n\n"
    assert accepts(compiler, tag("required", reasoning="detect"), think + one)
    assert accepts(compiler, tag("required", reasoning="detect"), one)
    assert accepts(compiler, tag("required", reasoning="open"), think[8:] + one)
    assert not accepts(compiler, tag("required", reasoning="open"), one)
    marker_in_thought = f"<think>\nMaybe {fmt.open_tags[0]} later.\n</think>\n\n"
    for choice, answer in (("auto", text), ("none", text), ("required", one)):
        assert accepts(compiler, tag(choice, reasoning="detect"), marker_in_thought + answer)


def test_hermes_grammar_is_unchanged():
    forced = output_structural_tag(TOOLS, "g")["format"]
    assert forced == {"type": "tags_with_separator", "separator": "\n", "at_least_one": True,
                      "stop_after_first": True, "tags": [{
                          "type": "tag", "begin": '<tool_call>\n{"name": "g", "arguments": ',
                          "content": {"type": "json_schema",
                                      "json_schema": TOOLS[1]["function"]["parameters"],
                                      "max_whitespace_cnt": 1},
                          "end": "}\n</tool_call>"}]}


# -- streamed parsing -----------------------------------------------------------------------

SAMPLES = {  # (format, reasoning, output text)
    "hermes": (HERMES, "detect",
               '<think>\nLet me see… 日本 <tool_call>{"name": "x"} is no call\n\n</think>\n\n'
               'Sure — ' + HERMES.format_call("search", {"query": 'café "paris"', "n": 3})
               + "\n" + HERMES.format_call("f", {}) + ' then 😀 <tool_call>{"name": f}'
               "</tool_call> after <tool bit"),
    "llama3": (LLAMA3, "none",
               'Checking 😀 <|python_tag|>{"name": "search", "parameters": {"query": "日本 €", '
               '"n": [1, 2.5e3]}}; {"name": "g", "parameters": {}} and {"name": oops} tail '
               '{"name": "h", "parameters": {"s": "\\u00fc\\ud83d\\ude00"}} (3.2:) {"type": '
               '"function", "name": "k", "parameters": {"b": null}}'),
    "mistral": (MISTRAL, "open",
                "still thinking 🤔\n</think>\n\nOK [TOOL_CALLS] [{\"name\": \"search\", "
                "\"arguments\": {\"query\": \"ü\"}, \"id\": \"abc123xyz\"}, {\"name\": \"g\", "
                "\"arguments\": {}}] after [TOOL_CALLS][{\"name\": \"h\", \"arguments\": "
                "{\"a\": true}}] [TOOL_CALLS] [{\"name\": \"t\", \"arguments\": {\"a\": [1"),
    "mistral_args": (MISTRAL_ARGS, "none",
                     'Let me check 😀 [TOOL_CALLS]search[ARGS]{"query": "ü 日本", "n": 2}'
                     "[TOOL_CALLS]g[CALL_ID]abc123xyz[ARGS]{} then [TOOL_CALLS]bad name[ARGS]{} x "
                     "[TOOL_CALLS][ARGS]{} [TOOL_CALLS]h[ARGS]5 [TOOL_CALLS]k[ARGS]{\"a\": true}"
                     '[TOOL_CALLS]t[ARGS]{"a": [1'),
    "qwen_xml": (QWEN_XML, "none",
                 "Sure 😀\n" + QWEN_XML.format_call("search", {"query": 'café "paris"\n€', "n": 3})
                 + " then <tool_call>\n<function=g>\n</function>\n</tool_call>"
                 "<tool_call><function=bad name></function></tool_call> x <tool_call>\n"
                 "<function=h>\n<parameter=a>\ntrue\n</parameter>\n<parameter=a>\n1\n"
                 "</parameter>\n</function>\n</tool_call>"
                 + QWEN_XML.format_call("k", {"s": [1, 2]})
                 + "<tool_call>\n<function=t>\n<parameter=code>\nprint(1)\n"),
}
EXPECTED = {
    "hermes": dict(
        # the "\n" between the two calls is no answer text (held, then dropped: a call followed)
        content="Sure —  then 😀  after <tool bit", reasoning="Let me see… 日本 <tool_call>"
        '{"name": "x"} is no call',
        calls=[("search", {"query": 'café "paris"', "n": 3}), ("f", {})], invalid=[None]),
    "llama3": dict(
        content="Checking 😀 and ops} tail (3.2:) ", reasoning="",  # an invalid call ends at
        calls=[("search", {"query": "日本 €", "n": [1, 2500.0]}), ("g", {}),  # the error
               ("h", {"s": "ü😀"}), ("k", {"b": None})], invalid=[None]),
    "mistral": dict(
        # the " " between two lists of calls is no answer text (as between Hermes calls)
        content="OK  after ", reasoning="still thinking 🤔",
        calls=[("search", {"query": "ü"}), ("g", {}), ("h", {"a": True})], invalid=["t"]),
    "mistral_args": dict(  # a bad name, an empty one, arguments that are no object: invalid
        content="Let me check 😀 then name[ARGS]{} x {}  ", reasoning="",
        calls=[("search", {"query": "ü 日本", "n": 2}), ("g", {}), ("k", {"a": True})],
        invalid=[None, None, "h", "t"]),
    "qwen_xml": dict(  # a bad name, a parameter given twice, a truncated call: invalid
        content="Sure 😀\n then  x ", reasoning="",
        calls=[("search", {"query": 'café "paris"\n€', "n": 3}), ("g", {}), ("k", {"s": [1, 2]})],
        invalid=[None, "h", "t"]),
}
XML_TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "properties": {"query": {"type": "string"}, "n": {"type": "integer"}}}}}]


def run_stream(name: str, pieces: list[str]):
    fmt, reasoning, _ = SAMPLES[name]
    stream = ToolCallStream(fmt, reasoning=reasoning, tools=XML_TOOLS)
    outs = [stream.feed(p) for p in pieces] + [stream.close()]
    args: dict[int, str] = {}
    ids: dict[int, str] = {}
    for out in outs:
        for chunk in out.tool_call_chunks:
            args[chunk["index"]] = args.get(chunk["index"], "") + chunk["args"]
            if chunk["id"] is not None:
                ids[chunk["index"]] = chunk["id"]
    return {
        "content": "".join(o.content for o in outs),
        "reasoning": "".join(o.reasoning_content for o in outs),
        "calls": [(c["name"], c["args"]) for c in stream.tool_calls],
        "invalid": [(c["name"], c["args"], c["error"]) for c in stream.invalid_tool_calls],
        "streamed": [(ids[i], json.loads(a)) for i, a in sorted(args.items())
                     if ids[i] in {c["id"] for c in stream.tool_calls}],
        "ids": [c["id"] for c in stream.tool_calls],
    }


def split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]


def comparable(result: dict) -> dict:
    return {k: v for k, v in result.items() if k not in ("ids", "streamed")} | {
        "streamed": [args for _, args in result["streamed"]]}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_each_format_parses_calls_content_and_reasoning(name):
    result = run_stream(name, [SAMPLES[name][2]])
    expected = EXPECTED[name]
    assert result["content"] == expected["content"]
    assert result["reasoning"] == expected["reasoning"]
    assert result["calls"] == expected["calls"]
    assert [name for name, _, _ in result["invalid"]] == expected["invalid"]
    assert result["streamed"] == list(zip(result["ids"], [a for _, a in expected["calls"]],
                                          strict=True))  # chunks add up to each call


@pytest.mark.parametrize("name", sorted(SAMPLES))
@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=40))
def test_any_resplitting_gives_identical_calls_chunks_and_text(name, cuts):
    text = SAMPLES[name][2]
    assert comparable(run_stream(name, split(text, cuts))) == \
        comparable(run_stream(name, [text]))


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_character_by_character(name):
    text = SAMPLES[name][2]
    assert comparable(run_stream(name, list(text))) == comparable(run_stream(name, [text]))


def test_xml_values_are_typed_by_the_tool_schema():
    text = QWEN_XML.format_call("search", {"query": "42", "n": 7})
    typed = ToolCallStream(QWEN_XML, tools=XML_TOOLS)
    typed.feed(text)
    typed.close()
    untyped = ToolCallStream(QWEN_XML)  # no schema: a value that is JSON is read as JSON
    untyped.feed(text)
    untyped.close()
    assert typed.tool_calls[0]["args"] == {"query": "42", "n": 7}
    assert untyped.tool_calls[0]["args"] == {"query": 42, "n": 7}


def test_mistral_v11_grammar_takes_a_9_character_call_id(compiler):
    tag = output_structural_tag(TOOLS, "required", tool_format=MISTRAL_V11)
    call = '[TOOL_CALLS]g[CALL_ID]{}[ARGS]{{"a": 1}}'
    assert accepts(compiler, tag, call.format("abc123XYZ"))
    assert not accepts(compiler, tag, call.format("abc123XY"))
    assert not accepts(compiler, tag, '[TOOL_CALLS]g[ARGS]{"a": 1}')


def test_arguments_stream_before_a_llama3_call_ends():
    stream = ToolCallStream(LLAMA3)
    text = LLAMA3.format_call("search", {"query": "a long query, word by word"})
    pieces = [c["args"] for ch in text for c in stream.feed(ch).tool_call_chunks if c["args"]]
    assert len(pieces) > 5 and pieces[0].startswith('{"query": "a')


@pytest.mark.parametrize("between, after, content", [
    ("\n", "\n", "Let me check.\n"),  # parallel calls: the line breaks are no answer
    ("\n", "\n\nDone.", "Let me check.\n\n\nDone."),  # text after: its whitespace kept
    ("  \n ", "", "Let me check.\n")])
def test_whitespace_between_calls_is_no_answer_at_any_cut(between, after, content):
    text = ("Let me check.\n" + HERMES.format_call("f", {"a": 1}) + between
            + HERMES.format_call("g", {}) + after)
    for cut in range(len(text) + 1):
        stream = ToolCallStream(HERMES)
        outs = [stream.feed(text[:cut]), stream.feed(text[cut:]), stream.close()]
        assert "".join(o.content for o in outs) == content, cut
        assert [c["name"] for c in stream.tool_calls] == ["f", "g"]
