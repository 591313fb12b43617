"""`agentrt serve` as an OpenAI client sees each family's tool calls: a Qwen3, Llama 3.1 and
Mistral chat template on a scripted backend (no model), whole and streamed answers, parallel
calls, every ``tool_choice``, and a ``<think>`` block that writes ``<tool_call>`` text."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient  # noqa: E402
from tiny_mistral import ScriptedBackend, mistral_tokenizer  # noqa: E402

from agentrt.server.app import create_app  # noqa: E402

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "get_time", "parameters": {"type": "object", "properties": {}}}},
]
PARIS_ROME = [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})]
QWEN3 = ('<think>\nI could write <tool_call>\n{"name": "get_time", "arguments": {}}\n'
         '</tool_call> but the weather tool fits.\n</think>\n\n'
         '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
         '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>')
THOUGHT = ('I could write <tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call> but '
           'the weather tool fits.')
OUTPUTS = {  # template -> (what the model writes, the calls in it, its reasoning)
    "qwen3.jinja": (QWEN3, PARIS_ROME, THOUGHT),
    "llama3.1.jinja": ('<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}; '
                       '{"name": "get_weather", "parameters": {"city": "Rome"}}',
                       PARIS_ROME, None),
    "mistral-v0.3.jinja": ('[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}'
                           ', {"name": "get_weather", "arguments": {"city": "Rome"}}]',
                           PARIS_ROME, None),
}


class AsyncScripted(ScriptedBackend):
    """The scripted backend, streamed as the server reads it (``astream``)."""

    async def astream(self, *args, **kwargs):
        for delta in self.stream(*args, **kwargs):
            yield delta


def post(template: str, output: str, **body) -> tuple[dict, AsyncScripted]:
    """One chat request on ``template``'s family; the answer as one message (a streamed one
    merged the way the OpenAI SDK merges deltas) with its finish reason."""
    backend = AsyncScripted(mistral_tokenizer(template), [output])
    request = {"model": "tiny-mistral", "tools": TOOLS, "parallel_tool_calls": True,
               "messages": [{"role": "user", "content": "Weather in Paris and Rome?"}], **body}
    with TestClient(create_app(backend)) as client:
        response = client.post("/v1/chat/completions", json=request)
        assert response.status_code == 200, response.text
        if not request.get("stream"):
            [choice] = response.json()["choices"]
            return {**choice["message"], "finish_reason": choice["finish_reason"]}, backend
        return _merged(response.iter_lines()), backend


def _merged(lines) -> dict:
    message: dict = {"content": "", "reasoning_content": "", "tool_calls": {}}
    for line in lines:
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        for choice in json.loads(line.removeprefix("data: "))["choices"]:
            delta = choice["delta"]
            message["finish_reason"] = choice["finish_reason"] or message.get("finish_reason")
            for key in ("content", "reasoning_content"):
                message[key] += delta.get(key) or ""
            for call in delta.get("tool_calls") or []:
                merged = message["tool_calls"].setdefault(call["index"], {
                    "id": call.get("id"), "type": call.get("type"),
                    "function": {"name": call["function"].get("name"), "arguments": ""}})
                assert call.get("id") in (None, merged["id"])  # the id comes once, first
                merged["function"]["arguments"] += call["function"].get("arguments") or ""
    calls = [message["tool_calls"][i] for i in sorted(message["tool_calls"])]
    return {**message, "content": message["content"] or None, "tool_calls": calls or None,
            "reasoning_content": message["reasoning_content"] or None}


def calls_of(message: dict) -> list[tuple[str, dict]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in message["tool_calls"] or ()]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("template", sorted(OUTPUTS))
def test_parallel_calls_in_each_family_reach_the_client(template, stream):
    output, calls, reasoning = OUTPUTS[template]
    message, _ = post(template, output, stream=stream)
    assert calls_of(message) == calls
    assert message["finish_reason"] == "tool_calls"
    assert message["content"] is None and message.get("reasoning_content") == reasoning
    ids = [c["id"] for c in message["tool_calls"]]
    assert len(set(ids)) == len(ids) and all(i.startswith("call_") for i in ids)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("tool_choice", [
    "auto", "required", {"type": "function", "function": {"name": "get_weather"}}])
def test_a_call_written_inside_think_is_reasoning_whatever_the_tool_choice(tool_choice, stream):
    message, _ = post("qwen3.jinja", QWEN3, tool_choice=tool_choice, stream=stream)
    assert message["reasoning_content"] == THOUGHT
    assert "get_time" not in [name for name, _ in calls_of(message)]
    assert calls_of(message) == PARIS_ROME


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("template", sorted(OUTPUTS))
def test_tool_choice_none_reads_no_calls_and_keeps_the_text(template, stream):
    output, _, reasoning = OUTPUTS[template]
    message, _ = post(template, output, tool_choice="none", stream=stream)
    assert message["tool_calls"] is None and message["finish_reason"] == "stop"
    assert "Rome" in message["content"] and message.get("reasoning_content") == reasoning


@pytest.mark.parametrize("template", sorted(OUTPUTS))
def test_the_answer_s_calls_go_back_into_the_family_s_history(template):
    """The client sends the calls and their results back (ids as the server made them): the
    next prompt shows them in the family's own format, Mistral's 9-character ids included."""
    output, _, reasoning = OUTPUTS[template]
    first, _ = post(template, output)
    history = [{"role": "user", "content": "Weather in Paris and Rome?"},
               {k: v for k, v in first.items() if k != "finish_reason"}]
    history += [{"role": "tool", "tool_call_id": c["id"], "content": f"sunny {i}"}
                for i, c in enumerate(first["tool_calls"])]
    answer, backend = post(template, "Sunny in both.", messages=history)
    assert answer["content"] == "Sunny in both." and answer["finish_reason"] == "stop"
    prompt = backend.tokenizer.decode(backend.prompts[0])
    assert prompt.count('"Paris"') == 1 and prompt.count('"Rome"') == 1
    assert "sunny 0" in prompt and "sunny 1" in prompt
    if reasoning:
        assert "the weather tool fits" in prompt  # Qwen3 keeps the turn's reasoning


def test_a_message_the_template_refuses_is_a_400_quoting_the_template():
    """Magistral's template refuses two user turns in a row: a client error the template
    explains, not the server's 'internal error' 500."""
    backend = AsyncScripted(mistral_tokenizer("magistral-small-2509.jinja"), ["unused"])
    messages = [{"role": "user", "content": "Hi"}, {"role": "user", "content": "Hello?"}]
    with TestClient(create_app(backend)) as client:
        response = client.post("/v1/chat/completions",
                               json={"model": "tiny-mistral", "messages": messages})
    assert response.status_code == 400, response.text
    assert "roles must alternate" in response.json()["error"]["message"]
    assert not backend.prompts
