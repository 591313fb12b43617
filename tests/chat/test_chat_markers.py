"""A model whose tool-call marker is a special token (Mistral's ``[TOOL_CALLS]``): the chat
layer keeps it in the decoded output, so the call is read, and drops the other special tokens
(``</s>``) from the answer. Scripted outputs in a tiny Mistral-style tokenizer, no model."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tiny_mistral import ScriptedBackend, mistral_tokenizer

from agentrt.chat import ChatProgress, prepare_chat, run_deltas

TOOL = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                   "required": ["expression"]}}}
MESSAGES = [{"role": "user", "content": "What is 6*7?"}]
CALL = '[TOOL_CALLS] [{"name": "calculator", "arguments": {"expression": "6*7"}}]</s>'


@pytest.fixture(scope="module")
def tokenizer():
    return mistral_tokenizer()


def run(call) -> tuple[ChatProgress, str]:
    """The call's progress and the text the backend streamed."""
    progress, texts = ChatProgress(call), []
    for delta in run_deltas(call):
        texts.append(delta.text)
        progress.feed(delta)
    return progress, "".join(texts)


def test_a_special_token_marker_reaches_the_parser(tokenizer):
    call = prepare_chat(ScriptedBackend(tokenizer, [CALL]), MESSAGES, tools=[TOOL],
                        constrained=False)
    assert call.tool_format.name == "mistral" and call.markers is not None
    assert not call.params.skip_special_tokens  # the engine decodes with special tokens ...
    progress, streamed = run(call)
    assert streamed == CALL
    # ... and the call is read while every other special token is dropped
    assert [(c["name"], c["args"]) for c in progress.tool_calls] == [
        ("calculator", {"expression": "6*7"})]
    assert progress.content == "" and progress.finish_reason == "tool_calls"


def test_an_answer_keeps_no_special_tokens(tokenizer):
    call = prepare_chat(ScriptedBackend(tokenizer, [" It is 42.</s>"]), MESSAGES,
                        tools=[TOOL], constrained=False)
    progress, streamed = run(call)
    assert streamed.endswith("</s>") and progress.content == " It is 42."
    assert not progress.tool_calls and progress.finish_reason == "stop"


def test_without_the_marker_kept_the_call_is_lost(tokenizer):
    """What happened before: decoded with special tokens skipped, the list reads as text."""
    call = prepare_chat(ScriptedBackend(tokenizer, [CALL]), MESSAGES, tools=[TOOL],
                        constrained=False)
    call.params = replace(call.params, skip_special_tokens=True)
    call.markers = None
    progress, _ = run(call)
    assert not progress.tool_calls and progress.content.startswith(' [{"name"')


def test_calls_without_tools_or_without_special_markers_decode_as_before(tokenizer, engine):
    call = prepare_chat(ScriptedBackend(tokenizer, []), MESSAGES, constrained=False)
    assert call.markers is None and call.params.skip_special_tokens
    hermes = prepare_chat(engine, MESSAGES, tools=[TOOL], constrained=False)  # SmolLM2
    assert hermes.markers is None and hermes.params.skip_special_tokens
