"""A chat answer whole and streamed describes the same tool calls and finish_reason.

The official ``openai`` client against a real ``agentrt serve`` (the session's server, greedy
decoding): each request is sent once whole and once streamed, and the stream's chunks are
merged the way OpenAI's clients merge them (by ``index``: the id and name of the first
delta, the ``arguments`` fragments concatenated). Invalid calls come about deterministically:
a small ``max_tokens`` cuts a forced call off, and a tool whose parameters schema is an array
makes the grammar force arguments that are not a JSON object. Such a call is shown as the
model wrote it, as OpenAI shows one (never as a call with made-up ``{}`` arguments).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

MODEL = "SmolLM2-135M-Instruct"
MATH = [{"role": "user", "content": "What is 12 times 7? Use the calculator."}]
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
WHOLE_CALL_TOKENS = 48
"""A constrained call to the calculator takes about 42 tokens on SmolLM2."""
CUT_CALL_TOKENS = 30
"""Enough for the name and the first arguments of that call, not for the whole of it."""
PARALLEL_CUT_TOKENS = 80
"""With parallel calls: the whole first call, and the second cut off inside its arguments."""
PAIR = {
    "type": "function",
    "function": {
        "name": "pair",
        "description": "Two numbers.",
        "parameters": {"type": "array", "items": {"type": "number"},
                       "minItems": 2, "maxItems": 2},
    },
}
"""A tool whose arguments the grammar forces to be an array: a call that is not valid."""


def _whole(client, **options: Any) -> tuple[list[dict[str, Any]], str, str]:
    """The tool calls (id, name, arguments), content and finish_reason of a whole answer."""
    choice = client.chat.completions.create(model=MODEL, **options).choices[0]
    calls = [{"id": c.id, "type": c.type, "name": c.function.name,
              "arguments": c.function.arguments} for c in choice.message.tool_calls or ()]
    return calls, choice.message.content or "", choice.finish_reason


def _streamed(client, **options: Any) -> tuple[list[dict[str, Any]], str, str]:
    """The same, merged from the chunks of the streamed answer."""
    calls: dict[int, dict[str, Any]] = {}
    content, finish = "", None
    for chunk in client.chat.completions.create(model=MODEL, stream=True, **options):
        (choice,) = chunk.choices
        content += choice.delta.content or ""
        finish = choice.finish_reason or finish
        for delta in choice.delta.tool_calls or ():
            if delta.index not in calls:
                assert delta.id is not None, "a call's first delta carries its id"
                calls[delta.index] = {"id": delta.id, "type": delta.type,
                                      "name": delta.function.name, "arguments": ""}
            call = calls[delta.index]
            call["name"] = call["name"] or delta.function.name
            call["arguments"] += delta.function.arguments or ""
    assert finish is not None
    return [calls[i] for i in sorted(calls)], content, finish


def _both(client, **options: Any) -> tuple[list[dict[str, Any]], str, str]:
    """The whole answer, after checking the streamed one says the same (ids aside: each
    request gets fresh ones)."""
    whole_calls, whole_content, whole_finish = _whole(client, **options)
    stream_calls, stream_content, stream_finish = _streamed(client, **options)
    assert (stream_content, stream_finish) == (whole_content, whole_finish)
    assert _without_ids(stream_calls) == _without_ids(whole_calls)
    for call in whole_calls + stream_calls:
        assert call["id"].startswith("call_") and call["type"] == "function"
    return whole_calls, whole_content, whole_finish


def _without_ids(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in c.items() if k != "id"} for c in calls]


def _calculator_options(calculator: dict, max_tokens: int, **options: Any) -> dict[str, Any]:
    return dict(messages=MATH, tools=[calculator], tool_choice="required",
                max_tokens=max_tokens, **options)


def test_whole_and_streamed_answers_agree_on_calls_and_finish_reason(client, calculator):
    cases = {  # name: (request, the finish_reason both answers give)
        "a valid call": (_calculator_options(calculator, WHOLE_CALL_TOKENS), "tool_calls"),
        "a call cut off": (_calculator_options(calculator, CUT_CALL_TOKENS), "length"),
        "arguments not an object": (dict(messages=MATH, tools=[PAIR], tool_choice="required",
                                         max_tokens=WHOLE_CALL_TOKENS), "stop"),
        "text, no call": (dict(messages=QUESTION, tools=[calculator], tool_choice="none",
                               max_tokens=16), "stop"),
    }
    for name, (options, expected_finish) in cases.items():
        calls, content, finish = _both(client, **options)
        assert finish == expected_finish, name
        assert len(calls) == (name != "text, no call"), name
        assert (content == "") == bool(calls), name
    (valid,), _, _ = _whole(client, **cases["a valid call"][0])
    assert valid["name"] == "calculator"
    assert set(json.loads(valid["arguments"])) == {"a", "op", "b"}


def test_a_call_cut_off_by_max_tokens_is_shown_as_far_as_it_was_written(client, calculator):
    (full,), _, _ = _whole(client, **_calculator_options(calculator, WHOLE_CALL_TOKENS))
    (call,), _, finish = _both(client, **_calculator_options(calculator, CUT_CALL_TOKENS))
    assert finish == "length" and call["name"] == "calculator"
    _assert_cut_short(call["arguments"], full["arguments"])


def test_a_valid_call_then_one_cut_off_are_both_shown_with_length(client, calculator):
    (full,), _, _ = _whole(client, **_calculator_options(calculator, WHOLE_CALL_TOKENS))
    calls, _, finish = _both(client, **_calculator_options(
        calculator, PARALLEL_CUT_TOKENS, parallel_tool_calls=True))
    assert finish == "length"
    first, second = calls
    assert first["arguments"] == full["arguments"]
    assert first["id"] != second["id"] and second["name"] == "calculator"
    _assert_cut_short(second["arguments"], full["arguments"])


def _assert_cut_short(arguments: str, full: str) -> None:
    """What the model wrote of the arguments before it was cut off, nothing made up."""
    assert arguments and arguments != "{}"
    assert full.startswith(arguments) and arguments != full
    with pytest.raises(json.JSONDecodeError):
        json.loads(arguments)


def test_a_call_with_arguments_that_are_not_an_object_is_shown_as_written(client):
    (call,), content, finish = _both(client, messages=MATH, tools=[PAIR],
                                     tool_choice="required", max_tokens=WHOLE_CALL_TOKENS)
    assert call["name"] == "pair" and json.loads(call["arguments"]) == [12, 7]
    assert finish == "stop" and content == ""  # no valid call: nothing to run
