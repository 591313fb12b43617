"""SGLang's native API on ``agentrt serve`` (SGLang 0.5.8's shapes), over plain HTTP: /generate
whole and streamed, sessions (continue, branch, replace), abort, what sglang-router reads
from a worker, and the prefix-cache counter in /metrics."""

from __future__ import annotations

import json

import httpx
import pytest

GREEDY = {"max_new_tokens": 8, "temperature": 0}
PROMPT = "The three primary colours are"


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=120) as c:
        yield c


def _generate(http, **body) -> dict:
    response = http.post("/generate", json={"sampling_params": GREEDY, **body})
    assert response.status_code == 200, response.text
    return response.json()


def test_generate_matches_the_openai_completion(http, client):
    out = _generate(http, text=PROMPT, rid="native-1")
    openai = client.completions.create(model="SmolLM2-135M-Instruct", prompt=PROMPT,
                                       max_tokens=8)
    assert out["text"] == openai.choices[0].text
    meta = out["meta_info"]
    assert meta["id"] == "native-1" and meta["completion_tokens"] == len(out["output_ids"]) == 8
    assert meta["finish_reason"] == {"type": "length", "length": 8}
    assert meta["prompt_tokens"] == openai.usage.prompt_tokens
    again = _generate(http, input_ids=out["output_ids"][:3])
    assert again["meta_info"]["prompt_tokens"] == 3


def test_stream_is_cumulative_then_done(http):
    body = {"text": PROMPT, "sampling_params": GREEDY, "stream": True}
    with http.stream("POST", "/generate", json=body) as response:
        lines = [line for line in response.iter_lines() if line.startswith("data:")]
    assert lines[-1] == "data: [DONE]"
    events = [json.loads(line[5:]) for line in lines[:-1]]
    assert len(events) == 8
    assert [len(e["output_ids"]) for e in events] == list(range(1, 9))
    assert all(events[i + 1]["text"].startswith(events[i]["text"]) for i in range(7))
    assert [e["meta_info"]["finish_reason"] is None for e in events] == [True] * 7 + [False]
    assert events[-1]["text"] == _generate(http, text=PROMPT)["text"]


def test_stop_strings_trimmed_or_kept(http):
    params = {**GREEDY, "max_new_tokens": 16, "stop": [","]}
    trimmed = _generate(http, text=PROMPT, sampling_params=params)
    kept = _generate(http, text=PROMPT, sampling_params={**params, "no_stop_trim": True})
    assert trimmed["meta_info"]["finish_reason"] == {"type": "stop", "matched": ","}
    assert kept["text"] == trimmed["text"] + ","


@pytest.mark.parametrize("body, param", [
    ({"text": ["a", "b"]}, None),
    ({"text": "a", "input_ids": [1]}, None),
    ({"text": "a", "sampling_params": {"n": 2}}, "sampling_params.n"),
    ({"text": "a", "sampling_params": {"max_new_tokens": 0}}, "sampling_params.max_new_tokens"),
    ({"text": "a", "return_logprob": True}, "return_logprob"),
    ({"text": "a", "session_params": {"id": "no-such-session"}}, "session_params.id"),
])
def test_what_agentrt_cannot_serve_is_a_400(http, body, param):
    response = http.post("/generate", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["message"] and (param is None or error["param"] == param)


def test_sessions_continue_branch_and_replace(http):
    sid = http.post("/open_session", json={"capacity_of_str_len": 1000,
                                           "session_id": "s-1"}).json()
    assert sid == "s-1"
    assert http.post("/open_session", json={"capacity_of_str_len": 10,
                                            "session_id": "s-1"}).status_code == 400
    root_ids = _generate(http, text=PROMPT)["meta_info"]["prompt_tokens"]
    root = _generate(http, text=PROMPT, rid="a", session_params={"id": sid})
    appended = [198, 504]
    b = _generate(http, input_ids=appended, rid="b", session_params={"id": sid, "rid": "a"})
    context = root_ids + len(root["output_ids"])
    assert b["meta_info"]["prompt_tokens"] == context + len(appended)
    assert b["meta_info"]["cached_tokens"] >= context - 1  # held: only the new tokens computed
    c = _generate(http, input_ids=[198], rid="c", session_params={"id": sid, "rid": "b"})
    # a branch: continue "a" again, replacing what continued it ("b", and "c" after it)
    d = _generate(http, input_ids=appended, rid="d",
                  session_params={"id": sid, "rid": "a", "replace": True})
    assert d["output_ids"] == b["output_ids"]
    gone = http.post("/generate", json={"input_ids": [198], "sampling_params": GREEDY,
                                        "session_params": {"id": sid, "rid": "c"}})
    assert gone.status_code == 400 and c["meta_info"]["prompt_tokens"] > 0
    # drop_previous_output: "a"'s prompt without its answer, then the appended tokens
    e = _generate(http, input_ids=appended, session_params={
        "id": sid, "rid": "a", "drop_previous_output": True})
    assert e["meta_info"]["prompt_tokens"] == root_ids + len(appended)
    assert http.post("/close_session", json={"session_id": sid}).status_code == 200
    assert http.post("/close_session", json={"session_id": sid}).status_code == 200


def test_abort_request_by_rid_is_idempotent(http, server):
    assert http.post("/abort_request", json={"rid": "nothing-here"}).status_code == 200
    assert http.post("/abort_request", json={"abort_all": True}).status_code == 200
    server.wait_until_idle()


def test_what_the_router_reads_from_a_worker(http):
    info = http.get("/server_info").json()
    assert info["served_model_name"] == "SmolLM2-135M-Instruct" and info["dp_size"] == 1
    assert info["model_path"] and info["version"] and info["sglang_api_version"] == "0.5.8"
    assert http.get("/get_server_info").json().keys() == info.keys()
    model = http.get("/model_info").json()
    assert model["architectures"] == ["LlamaForCausalLM"] and model["model_type"] == "llama"
    assert http.get("/get_model_info").json() == model
    (load,) = http.get("/get_load").json()
    assert load["dp_rank"] == 0 and isinstance(load["num_tokens"], int)
    assert http.post("/flush_cache").status_code == 200
    assert http.get("/health_generate").status_code == 200
    assert http.get("/health").status_code == 200


def test_prefix_cache_hits_are_counted(http, server, long_text):
    server.wait_until_idle()
    before = server.metrics()["agentrt_prefix_cached_tokens_total"]
    text = long_text[:1200]
    first = _generate(http, text=text)
    second = _generate(http, text=text)
    hit = second["meta_info"]["cached_tokens"]
    assert first["output_ids"] == second["output_ids"] and hit >= 16
    after = server.metrics()["agentrt_prefix_cached_tokens_total"]
    assert after - before >= hit
