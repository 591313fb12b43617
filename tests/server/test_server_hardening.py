"""Bad requests against a real ``agentrt serve``, sent as an attacker would: raw HTTP bodies.

Each bad body must get a 4xx with OpenAI's error body (never a 500, never an internal
source path) while a well-formed stream, already running when the bad request arrives,
completes with exactly the greedy text it gives alone. Before the hardening, a ``seed``
above 2**63 overflowed inside the engine step and aborted every request in flight, an
absurd ``max_tokens`` was accepted, a malformed assistant ``tool_calls`` entry was a 500,
schema errors showed xgrammar's C++ paths, and a client that left a ``/v1/completions``
stream was counted as a 200.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from serve_harness import chat_text, stream_events

MODEL = "SmolLM2-135M-Instruct"
HI = [{"role": "user", "content": "hi"}]
GOOD = {"model": MODEL, "max_tokens": 10, "stream": True,
        "messages": [{"role": "user", "content": "Write a long story about a lighthouse."}]}
LEAKS = ("/project/", ".cc:", ".py:", "Traceback", "Check failed")


def _assistant(*calls: Any) -> list[dict[str, Any]]:
    """A conversation whose assistant turn carries ``calls`` as its ``tool_calls``."""
    return [*HI, {"role": "assistant", "content": None, "tool_calls": list(calls)},
            {"role": "user", "content": "and now?"}]


def _tool(parameters: Any) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": "probe", "parameters": parameters}}]


Body = Callable[[int], dict[str, Any]]
"""A bad body, given the server's context length."""

CHAT, COMPLETIONS, GENERATE = "/v1/chat/completions", "/v1/completions", "/generate"
BAD: list[Any] = [
    # seed: the sampler takes a signed 64-bit integer
    pytest.param(CHAT, lambda n: {"messages": HI, "temperature": 1.0, "seed": 2**64},
                 "seed", "2**63", id="chat-seed-2**64"),
    pytest.param(CHAT, lambda n: {"messages": HI, "temperature": 1.0, "seed": 2**63},
                 "seed", "2**63", id="chat-seed-2**63"),
    pytest.param(CHAT, lambda n: {"messages": HI, "temperature": 1.0, "seed": -(2**63) - 1},
                 "seed", "2**63", id="chat-seed-below-int64"),
    pytest.param(COMPLETIONS, lambda n: {"prompt": "Once", "temperature": 1.0,
                                         "seed": 10**40}, "seed", "2**63",
                 id="completions-seed-10**40"),
    pytest.param(GENERATE, lambda n: {"text": "Once", "sampling_params": {
        "temperature": 1.0, "sampling_seed": 2**64}}, "sampling_params.sampling_seed", "2**63",
                 id="generate-seed-2**64"),
    # max_tokens against the context
    pytest.param(CHAT, lambda n: {"messages": HI, "max_tokens": 10**9}, "max_tokens",
                 "maximum context length", id="chat-max-tokens-10**9"),
    pytest.param(CHAT, lambda n: {"messages": HI, "max_completion_tokens": n},
                 "max_completion_tokens", "maximum context length",
                 id="chat-max-completion-tokens-context"),
    pytest.param(CHAT, lambda n: {"messages": HI, "max_tokens": n - 3}, "messages",
                 "in the messages", id="chat-prompt-plus-max-tokens"),
    pytest.param(COMPLETIONS, lambda n: {"prompt": "Once upon a time", "max_tokens": n - 2},
                 "prompt", "in your prompt", id="completions-prompt-plus-max-tokens"),
    pytest.param(COMPLETIONS, lambda n: {"prompt": "Once", "max_tokens": 10**9}, "max_tokens",
                 "maximum context length", id="completions-max-tokens-10**9"),
    pytest.param(GENERATE, lambda n: {"text": "Once upon a time", "sampling_params": {
        "max_new_tokens": n}}, "sampling_params.max_new_tokens", "maximum context length",
                 id="generate-max-new-tokens-context"),
    # malformed message shapes
    pytest.param(CHAT, lambda n: {"messages": _assistant({"id": "c1", "type": "function"})},
                 "messages.1.tool_calls.0.function", "required", id="tool-call-no-function"),
    pytest.param(CHAT, lambda n: {"messages": _assistant({"function": "probe"})},
                 "messages.1.tool_calls.0.function", "dictionary", id="tool-call-function-str"),
    pytest.param(CHAT, lambda n: {"messages": _assistant({"function": {"arguments": "{}"}})},
                 "messages.1.tool_calls.0.function.name", "required", id="tool-call-no-name"),
    pytest.param(CHAT, lambda n: {"messages": _assistant(
        {"function": {"name": "probe", "arguments": 7}})},
                 "messages.1.tool_calls.0.function.arguments", "string",
                 id="tool-call-arguments-int"),
    pytest.param(CHAT, lambda n: {"messages": _assistant(
        {"function": {"name": "probe", "arguments": "[1, 2]"}})}, None, "JSON object",
                 id="tool-call-arguments-list"),
    pytest.param(CHAT, lambda n: {"messages": _assistant(
        {"function": {"name": "probe", "arguments": "{oops"}})}, None, "not valid JSON",
                 id="tool-call-arguments-broken-json"),
    pytest.param(CHAT, lambda n: {"messages": _assistant(5)}, "messages.1.tool_calls.0",
                 "dictionary", id="tool-call-int"),
    pytest.param(CHAT, lambda n: {"messages": [*HI[:0], {"role": "assistant",
                                                         "tool_calls": {"a": 1}}]},
                 "messages.0.tool_calls", "list", id="tool-calls-object"),
    pytest.param(CHAT, lambda n: {"messages": [{"role": "user", "content": [
        {"type": "text", "text": 5}]}]}, "messages.0.content.0.text", "string",
                 id="content-part-text-int"),
    pytest.param(CHAT, lambda n: {"messages": [{"role": "user", "content": [{"text": "x"}]}]},
                 "messages.0.content.0.type", "required", id="content-part-no-type"),
    pytest.param(CHAT, lambda n: {"messages": HI, "tools": _tool({"type": "object"}),
                                  "tool_choice": {"type": "function", "function": "probe"}},
                 None, "does not name a bound tool", id="tool-choice-function-str"),
    # schemas xgrammar rejects: its reason, no C++ path
    pytest.param(CHAT, lambda n: {"messages": HI, "tool_choice": "required",
                                  "tools": _tool({"type": "object", "properties": {
                                      "a": {"type": "fancy"}}})},
                 None, 'Unsupported type "fancy"', id="tool-schema-unknown-type"),
    pytest.param(CHAT, lambda n: {"messages": HI, "tools": _tool({"type": "string",
                                                                  "pattern": "(("})},
                 None, "parenthesis", id="tool-schema-bad-regex"),
    pytest.param(CHAT, lambda n: {"messages": HI, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": {
            "type": "object", "properties": "x"}}}}, None, "properties must be an object",
                 id="response-format-bad-properties"),
    pytest.param(CHAT, lambda n: {"messages": HI, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": "x"}}}, None,
                 "must be a JSON object", id="response-format-schema-str"),
]


@pytest.fixture(scope="module")
def context_length(server) -> int:
    return httpx.get(f"{server.url}/server_info", timeout=30).json()["context_length"]


@pytest.fixture(scope="module")
def reference(server) -> tuple[str, str]:
    """The good stream's text and finish reason, alone on the server."""
    server.wait_until_idle()
    with stream_events(server.url + CHAT, GOOD) as events:
        return chat_text(events)


def _openai_error(response: httpx.Response) -> dict[str, Any]:
    """The error of a rejected request: a 4xx with OpenAI's body, leaking nothing internal."""
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["message"]
    assert not any(leak in error["message"] for leak in LEAKS), error["message"]
    return error


@pytest.mark.parametrize(("path", "make_body", "param", "fragment"), BAD)
def test_a_bad_request_is_a_4xx_while_a_good_stream_runs_on(
        server, reference, context_length, path: str, make_body: Body, param: str | None,
        fragment: str):
    with stream_events(server.url + CHAT, GOOD) as events:
        first = next(events)  # NOTE: the good request is decoding when the bad one arrives
        bad = httpx.post(server.url + path, json=make_body(context_length), timeout=120)
        good = chat_text(iter([first, *events]))
    error = _openai_error(bad)
    assert bad.status_code == 400
    assert fragment in error["message"]
    if param is not None:
        assert error["param"] == param
    assert good == reference
    assert reference[1] in ("length", "stop") and reference[0]


def test_context_errors_name_the_limit_in_openai_words(server, context_length):
    usage = httpx.post(f"{server.base_url}/chat/completions", timeout=120, json={
        "messages": HI, "max_tokens": 1}).json()["usage"]
    prompt = usage["prompt_tokens"]
    asked = context_length - prompt + 1
    error = _openai_error(httpx.post(f"{server.base_url}/chat/completions", timeout=120, json={
        "messages": HI, "max_tokens": asked}))
    assert error["code"] == "context_length_exceeded"
    assert error["message"].startswith(
        f"This model's maximum context length is {context_length} tokens. However, you "
        f"requested {context_length + 1} tokens ({prompt} in the messages, {asked} in the "
        "completion).")
    fits = httpx.post(f"{server.base_url}/chat/completions", timeout=120, json={
        "messages": HI, "max_tokens": asked - 1, "stop": ["\n", "."]})
    assert fits.status_code == 200, fits.text


@pytest.mark.parametrize("seed", [-(2**63), 2**63 - 1])
def test_seeds_at_the_ends_of_the_range_are_served(server, seed):
    body = {"messages": HI, "max_tokens": 6, "temperature": 1.0, "seed": seed}
    answers = [httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=120)
               for _ in range(2)]
    assert [a.status_code for a in answers] == [200, 200]
    texts = [a.json()["choices"][0]["message"]["content"] for a in answers]
    assert texts[0] == texts[1]


def _requests_counted(server, endpoint: str) -> dict[str, float]:
    prefix = f"agentrt_requests_total{{endpoint={endpoint},status="
    return {k.removeprefix(prefix).rstrip("}"): v for k, v in server.metrics().items()
            if k.startswith(prefix)}


def _wait_for(predicate: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize(("path", "body"), [
    (COMPLETIONS, {"prompt": "Once upon a time", "max_tokens": 200, "stream": True}),
    (CHAT, {**GOOD, "max_tokens": 200}),
], ids=["completions", "chat"])
def test_a_client_that_leaves_a_stream_is_counted_499(server, path, body):
    server.wait_until_idle()
    before = _requests_counted(server, path)
    with stream_events(server.url + path, body) as events:
        next(events)
        next(events)
    assert _wait_for(lambda: _requests_counted(server, path).get("499", 0)
                     == before.get("499", 0) + 1)
    server.wait_until_idle()
    assert _requests_counted(server, path).get("200", 0) == before.get("200", 0)
    with stream_events(server.url + path, {**body, "max_tokens": 3}) as events:
        list(events)
    assert _wait_for(lambda: _requests_counted(server, path).get("200", 0)
                     == before.get("200", 0) + 1)
