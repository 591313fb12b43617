"""Hostile ``reasoning_content`` in a conversation, through the real ``agentrt serve``:
an assistant's must be text (else a 400 that says so, never a 500); other roles' is ignored,
as OpenAI ignores fields a role does not have."""

from __future__ import annotations

import httpx
import pytest

ODD = [1, 1.5, True, [1], ["a"], {"a": 1}]


def _post(server, messages: list[dict]) -> httpx.Response:
    return httpx.post(f"{server.base_url}/chat/completions", timeout=120,
                      json={"messages": messages, "max_tokens": 2})


@pytest.mark.parametrize("role", ["assistant", "user", "system", "tool"])
def test_reasoning_content_of_every_json_type_is_a_400_or_ignored(server, role):
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    for value in [*ODD, None, "", "x" * 100_000]:
        message = {"role": role, "content": "ok", "reasoning_content": value}
        history = [{"role": "user", "content": "hi"}]
        if role == "tool":
            history.append({"role": "assistant", "content": None, "tool_calls": [call]})
            message["tool_call_id"] = "call_1"
        response = _post(server, [*history, message, {"role": "user", "content": "and?"}])
        if role == "assistant" and value in ODD:
            assert response.status_code == 400, (value, response.text)
            assert "reasoning_content must be a string" in response.json()["error"]["message"]
        else:
            assert response.status_code == 200, (role, repr(value)[:20], response.text)
