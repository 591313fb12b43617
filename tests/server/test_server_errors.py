"""Malformed requests get a 4xx with OpenAI's error body, and the server stays up."""

from __future__ import annotations

import httpx
import openai
import pytest

MODEL = "SmolLM2-135M-Instruct"
HI = [{"role": "user", "content": "hi"}]


def _post(server, path: str, **kwargs) -> httpx.Response:
    return httpx.post(f"{server.base_url}{path}", timeout=30, **kwargs)


def _error(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] == "invalid_request_error"
    return body["error"]


def test_malformed_json_is_a_400(server):
    error = _error(_post(server, "/chat/completions", content=b'{"model": ',
                         headers={"Content-Type": "application/json"}), 400)
    assert "JSON" in error["message"] and error["code"] == "invalid_json"


def test_unknown_model_is_a_404_model_not_found(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-9", messages=HI, max_tokens=4)
    assert e.value.code == "model_not_found" and e.value.param == "model"
    assert "gpt-9" in e.value.message and MODEL in e.value.message


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
@pytest.mark.parametrize("value", [-5, 0])
def test_non_positive_max_tokens_is_a_400_naming_the_field(client, field, value):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=HI, **{field: value})
    assert e.value.param == field and field in e.value.message


def test_validation_errors_are_400s_in_openai_shape(server):
    missing = _error(_post(server, "/chat/completions", json={"model": MODEL}), 400)
    assert missing["param"] == "messages" and "required" in missing["message"]
    bad_role = _error(_post(server, "/chat/completions",
                            json={"messages": [{"role": "robot", "content": "x"}]}), 400)
    assert bad_role["param"] == "messages.0.role"
    for n in (17, 0):  # at most 16 choices; n=0 is none (OpenAI refuses it too)
        many = _error(_post(server, "/chat/completions", json={"messages": HI, "n": n}), 400)
        assert many["param"] == "n" and str(16 if n else 1) in many["message"]
    legacy = _error(_post(server, "/completions", json={"prompt": "x", "max_tokens": -1}), 400)
    assert legacy["param"] == "max_tokens"


def test_input_the_runtime_rejects_is_a_400(server):
    choice = {"type": "function", "function": {"name": "nope"}}
    error = _error(_post(server, "/chat/completions",
                         json={"messages": HI, "tool_choice": choice}), 400)
    assert "tool" in error["message"]
    tool = {"type": "function", "function": {"name": "f"}}
    twice = _error(_post(server, "/chat/completions",
                         json={"messages": HI, "tools": [tool, tool]}), 400)
    assert twice["param"] == "tools" and "'f'" in twice["message"]
    ids = _error(_post(server, "/completions", json={"prompt": [1, 10**9]}), 400)
    assert "token ids" in ids["message"]
    stream = _error(_post(server, "/completions",
                          json={"prompt": [1, 10**9], "stream": True}), 400)
    assert "token ids" in stream["message"]


def test_unknown_route_is_a_404_in_openai_shape(server):
    error = _error(httpx.get(f"{server.base_url}/engines", timeout=30), 404)
    assert "/v1/engines" in error["message"]


def test_the_server_stays_up_after_errors(server, client):
    for _ in range(3):
        _post(server, "/chat/completions", content=b"not json")
    assert httpx.get(f"{server.url}/health", timeout=30).status_code == 200
    answer = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=4)
    assert answer.choices[0].message.content
    errors = server.metrics()
    assert errors['agentrt_requests_total{endpoint=/v1/chat/completions,status=400}'] >= 3
