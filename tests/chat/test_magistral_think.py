"""Magistral's ``[THINK]`` … ``[/THINK]`` reasoning (Magistral Small 2507/2509): chosen from the
template, read as reasoning_content wherever the stream is cut, kept through decoding where
the tags are special tokens, and never a tool call — neither in the chat layer's final parse
nor in the partial-execution parser (SkipReasoning). Scripted outputs, a one-token-a-byte
Mistral tokenizer with ``[THINK]``, ``[/THINK]`` and ``[ARGS]`` as special tokens."""

from __future__ import annotations

from typing import NamedTuple

import pytest
from tiny_mistral import TEMPLATES, ScriptedBackend, mistral_tokenizer

from agentrt.agent.parsers import create_parser
from agentrt.agent.parsers.base import Piece, ToolName
from agentrt.agent.parsers.reasoning import SkipReasoning
from agentrt.chat import ChatProgress, prepare_chat, run_deltas
from agentrt.chat.formats import (
    MISTRAL_ARGS,
    detect_format,
    detect_reasoning,
    reasoning_tags,
)
from agentrt.chat.tool_calls import ToolCallStream

TEMPLATE = "magistral-small-2509.jinja"
SPECIALS = ("[ARGS]", "[THINK]", "[/THINK]")
TOOL = {"type": "function", "function": {"name": "calc", "parameters": {
    "type": "object", "properties": {"x": {"type": "integer"}}}}}
CONSIDERED = 'I could call [TOOL_CALLS]calc[ARGS]{"x": 1}, or not.'
OUTPUT = f'[THINK]{CONSIDERED}[/THINK]Let me check.[TOOL_CALLS]calc[ARGS]{{"x": 2}}'
NO_CALL = "[THINK]Easy: [TOOL_CALLS] is not needed.[/THINK]It is 4."


class Split(NamedTuple):
    reasoning: str
    content: str
    stream: ToolCallStream


def split(text: str, reasoning: str = "detect_mistral", *, cut: int = 0) -> Split:
    """The chat layer's reading of ``text`` fed in two pieces cut at ``cut``."""
    stream = ToolCallStream(MISTRAL_ARGS, reasoning=reasoning)  # type: ignore[arg-type]
    pieces = [stream.feed(text[:cut]), stream.feed(text[cut:]), stream.close()]
    return Split("".join(p.reasoning_content for p in pieces),
                 "".join(p.content for p in pieces), stream)


def test_the_template_chooses_the_bracket_syntax_and_opens_no_block():
    template = (TEMPLATES / TEMPLATE).read_text()
    tokenizer = mistral_tokenizer(TEMPLATE, specials=SPECIALS)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "2+2?"}], tools=[TOOL],
                                           tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("[INST]2+2?[/INST]")  # the model opens [THINK] itself
    assert "[THINK]" in prompt  # shown by the default system prompt
    assert detect_reasoning(template, prompt) == "detect_mistral"
    assert detect_reasoning(template, prompt + "[THINK]") == "open_mistral"
    assert detect_format(template).name == "mistral_args"
    assert reasoning_tags("detect_mistral")[:2] == ("[THINK]", "[/THINK]")
    assert detect_reasoning("[INST]{{ m }}[/INST]") == "none"  # no reasoning syntax at all
    with pytest.raises(ValueError, match="unknown reasoning mode"):
        reasoning_tags("think")  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "reasoning", "content", "calls"), [
    (OUTPUT, CONSIDERED, "Let me check.", [("calc", {"x": 2})]),
    (NO_CALL, "Easy: [TOOL_CALLS] is not needed.", "It is 4.", []),
])
def test_reasoning_is_the_same_at_every_cut(text, reasoning, content, calls):
    for cut in range(len(text) + 1):
        read = split(text, cut=cut)
        assert (read.reasoning, read.content) == (reasoning, content), cut
        assert [(c["name"], c["args"]) for c in read.stream.tool_calls] == calls, cut
        assert read.stream.invalid_tool_calls == [], cut


def test_open_mode_starts_inside_the_block():
    read = split(OUTPUT.removeprefix("[THINK]"), "open_mistral")
    assert read.reasoning == CONSIDERED and read.content == "Let me check."
    assert [c["args"] for c in read.stream.tool_calls] == [{"x": 2}]


def test_think_tags_mean_nothing_in_the_other_syntax():
    """``<think>`` templates read ``[THINK]`` as text, and the other way round."""
    assert split("<think>a</think>b").content == "<think>a</think>b"
    stream = ToolCallStream(MISTRAL_ARGS, reasoning="detect")
    assert stream.feed("[THINK]a[/THINK]b").content + stream.close().content == \
        "[THINK]a[/THINK]b"


def skip_events(text: str, reasoning: str, cut: int) -> list:
    parser = SkipReasoning(create_parser("mistral_args"), reasoning)  # type: ignore[arg-type]
    events = parser.feed(text[:cut]) + parser.feed(text[cut:]) + parser.close()
    return [e for e in events if isinstance(e, ToolName | Piece)]


@pytest.mark.parametrize(("text", "reasoning"), [
    (OUTPUT, "detect_mistral"),
    (OUTPUT.removeprefix("[THINK]"), "open_mistral"),
    (NO_CALL, "detect_mistral"),
])
def test_a_call_inside_think_starts_no_tool_at_every_cut(text, reasoning):
    expected = [] if text == NO_CALL else [ToolName("calc"), Piece("argument", key="x", value=2)]
    for cut in range(len(text) + 1):
        assert skip_events(text, reasoning, cut) == expected, cut


def test_skip_reasoning_keeps_its_tags_in_decoding_and_refuses_no_syntax():
    parser = SkipReasoning(create_parser("mistral_args"), "detect_mistral")
    assert {"[TOOL_CALLS]", "[ARGS]", "[THINK]", "[/THINK]"} <= set(parser.markers)
    with pytest.raises(ValueError, match="got 'none'"):
        SkipReasoning(create_parser("mistral_args"), "none")


@pytest.mark.parametrize("tools", [[TOOL], []])
def test_a_chat_call_decodes_the_special_tags_into_reasoning_content(tools):
    """``[THINK]`` is a special token: decoding must keep it (as ``[TOOL_CALLS]``), with or
    without tools, else the reasoning would be answer text."""
    tokenizer = mistral_tokenizer(TEMPLATE, specials=SPECIALS)
    assert tokenizer.decode(tokenizer.encode("[THINK]x", add_special_tokens=False),
                            skip_special_tokens=True) == "x"  # special: dropped by default
    backend = ScriptedBackend(tokenizer, [OUTPUT + "</s>"])
    call = prepare_chat(backend, [{"role": "user", "content": "2?"}], tools=tools,
                        constrained=False)
    assert call.reasoning == "detect_mistral" and call.markers is not None
    progress = ChatProgress(call)
    for delta in run_deltas(call):
        progress.feed(delta)
    if tools:
        assert progress.reasoning_content == CONSIDERED
        assert progress.content == "Let me check."
        assert [(c["name"], c["args"]) for c in progress.tool_calls] == [("calc", {"x": 2})]
    else:  # no calls can be made: call markers are dropped as other special tokens are
        assert progress.reasoning_content == 'I could call calc{"x": 1}, or not.'
        assert progress.content == 'Let me check.calc{"x": 2}' and progress.tool_calls == []


def test_the_grammar_lets_a_magistral_answer_start_with_its_think_block():
    from agentrt.chat.grammar import output_structural_tag

    tag = output_structural_tag([TOOL], "auto", None, tool_format=MISTRAL_ARGS,
                                reasoning="detect_mistral")
    think = tag["format"]["elements"][0]
    assert think["type"] == "optional"  # the model may skip it
    assert (think["content"]["begin"], think["content"]["end"]) == ("[THINK]", "[/THINK]")
