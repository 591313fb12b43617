"""A program written against OpenAI's Python SDK, pointed at ``agentrt serve``: what it sends
works as OpenAI documents it, or fails with a 400 naming the field — never silently different.

The fields other OpenAI-compatible servers honour (vLLM's and SGLang's sampling extras sent
through ``extra_body``, OpenAI's deprecated ``functions``, audio output) are refused unless
they ask for nothing; ``usage.prompt_tokens_details.cached_tokens`` is reported as OpenAI
does; an API key is checked as vLLM's ``--api-key`` is (an in-process app on the session
engine). Generations stay short (at most 16 tokens)."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest
from pydantic import BaseModel

MODEL = "SmolLM2-135M-Instruct"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
CHAT_PROMPT = ("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
               "<|im_start|>assistant\n")
"""QUESTION in SmolLM2's chat template, for the legacy endpoint (greedy: 8 tokens, then EOS)."""


def _chat(client, **fields):
    return client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=4,
                                          **fields)


# --- fields that would be silently ignored ---------------------------------------------------
@pytest.mark.parametrize("field, value", [
    ("repetition_penalty", 1.3), ("min_p", 0.1), ("skip_special_tokens", False),
    ("include_stop_str_in_output", True), ("guided_json", {"type": "object"}),
    ("guided_regex", "[0-9]+"), ("guided_choice", ["yes", "no"]), ("use_beam_search", True),
    ("continue_final_message", True),
    ("add_generation_prompt", False), ("regex", "[0-9]+"), ("best_of", 2),
])
def test_sampling_extras_agentrt_does_not_honour_are_a_400(client, field, value):
    """vLLM / SGLang users send these through ``extra_body``; ignored, the answer would not be
    what they asked for (no penalty, no constraint, EOS still ending it)."""
    with pytest.raises(openai.BadRequestError) as info:
        _chat(client, extra_body={field: value})
    error = info.value.body
    assert error["param"] == field
    assert f"{field}=" in error["message"] and "not supported by agentrt" in error["message"]


def test_sampling_extras_at_their_neutral_value_are_accepted(client):
    neutral = {"repetition_penalty": 1.0, "min_tokens": 0, "min_p": 0.0, "ignore_eos": False,
               "stop_token_ids": [], "skip_special_tokens": True, "guided_json": None,
               "use_beam_search": False, "add_generation_prompt": True,
               "chat_template_kwargs": {}}
    assert _chat(client, extra_body=neutral).choices[0].message.content == \
        _chat(client).choices[0].message.content


def test_chat_template_kwargs_reach_the_template_and_cannot_replace_it(client):
    """Qwen3 users send ``{"enable_thinking": false}``: a variable SmolLM2's template does not
    read changes nothing; one of apply_chat_template's own arguments is a 400 naming it."""
    plain = _chat(client).choices[0].message.content
    kwargs = {"chat_template_kwargs": {"enable_thinking": False}}
    assert _chat(client, extra_body=kwargs).choices[0].message.content == plain
    with pytest.raises(openai.BadRequestError, match="chat_template"):
        _chat(client, extra_body={"chat_template_kwargs": {"chat_template": "{{ 'x' }}"}})
    with pytest.raises(openai.BadRequestError):
        _chat(client, extra_body={"chat_template_kwargs": ["enable_thinking"]})


def test_guided_decoding_error_points_at_response_format(client):
    with pytest.raises(openai.BadRequestError, match="response_format"):
        _chat(client, extra_body={"guided_json": {"type": "object"}})


def test_deprecated_functions_are_a_400_pointing_at_tools(client):
    """OpenAI still serves ``functions`` / ``function_call``; ignored, the model never calls."""
    function = {"name": "f", "parameters": {"type": "object", "properties": {}}}
    with pytest.raises(openai.BadRequestError, match="tools") as info:
        _chat(client, functions=[function], function_call="auto")
    assert info.value.body["param"] in ("functions", "function_call")


def test_audio_output_is_a_400(client):
    with pytest.raises(openai.BadRequestError) as info:
        _chat(client, modalities=["text", "audio"], audio={"voice": "alloy", "format": "wav"})
    assert info.value.body["param"] in ("modalities", "audio")
    assert _chat(client, modalities=["text"]).choices[0].message.content


def test_continuous_usage_stats_is_a_400(client):
    """vLLM's per-chunk usage; ignored, every chunk but the last had ``usage`` None."""
    with pytest.raises(openai.BadRequestError) as info:
        _chat(client, stream=True, stream_options={"include_usage": True,
                                                   "continuous_usage_stats": True})
    assert info.value.body["param"] == "stream_options.continuous_usage_stats"


def test_legacy_logprobs_zero_gives_the_sampled_tokens_logprobs(client):
    """``logprobs=0`` asks the legacy endpoint for the sampled tokens' logprobs (no
    alternatives but the token itself); it was a 400 before the endpoint served them."""
    got = client.completions.create(model=MODEL, prompt="Hi", max_tokens=2, logprobs=0)
    lp = got.choices[0].logprobs
    assert len(lp.tokens) == 2 and all(len(top) == 1 for top in lp.top_logprobs)
    assert [next(iter(top)) for top in lp.top_logprobs] == lp.tokens


@pytest.mark.parametrize("top_k", [-1, None])
def test_top_k_off_as_vllm_and_sglang_write_it(client, top_k):
    """SGLang's default ``top_k`` is -1 (vLLM takes -1 or 0 for "off"), sent by their
    clients; it was a 400 ("greater than or equal to 0"), as was null."""
    assert _chat(client, extra_body={"top_k": top_k}).choices[0].message.content == \
        _chat(client).choices[0].message.content


def test_top_k_below_minus_one_is_a_400(client):
    with pytest.raises(openai.BadRequestError) as info:
        _chat(client, extra_body={"top_k": -2})
    assert info.value.body["param"] == "top_k"


# --- what is honoured -------------------------------------------------------------------------
def test_legacy_ignore_eos_runs_to_max_tokens(client):
    """Benchmark clients (``vllm bench serve``, SGLang's bench_serving) send ``ignore_eos``."""
    stops = client.completions.create(model=MODEL, prompt=CHAT_PROMPT, max_tokens=16)
    assert stops.choices[0].finish_reason == "stop" and stops.usage.completion_tokens < 16
    runs = client.completions.create(model=MODEL, prompt=CHAT_PROMPT, max_tokens=16,
                                     extra_body={"ignore_eos": True})
    assert runs.choices[0].finish_reason == "length" and runs.usage.completion_tokens == 16
    assert runs.choices[0].text.startswith(stops.choices[0].text)


def test_legacy_stop_token_ids_end_the_completion(server, client):
    sampling = {"max_new_tokens": 8, "temperature": 0}
    ids = httpx.post(f"{server.url}/generate", json={"text": CHAT_PROMPT,
                     "sampling_params": sampling}, timeout=120).json()["output_ids"]
    cut = client.completions.create(model=MODEL, prompt=CHAT_PROMPT, max_tokens=8,
                                    extra_body={"stop_token_ids": [ids[2]]})
    assert cut.choices[0].finish_reason == "stop"
    assert cut.usage.completion_tokens == ids.index(ids[2]) + 1


def test_usage_reports_cached_prompt_tokens(client):
    """``usage.prompt_tokens_details.cached_tokens`` as OpenAI sends it: a repeated prompt is
    served from the prefix cache."""
    messages = [{"role": "system", "content": "You answer in one short sentence. " * 8},
                *QUESTION]
    client.chat.completions.create(model=MODEL, messages=messages, max_tokens=2)
    again = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=2)
    cached = again.usage.prompt_tokens_details.cached_tokens
    assert 0 < cached < again.usage.prompt_tokens
    stream = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=2,
                                            stream=True,
                                            stream_options={"include_usage": True})
    assert [c.usage for c in stream][-1].prompt_tokens_details.cached_tokens == cached
    prompt = "The quick brown fox jumps over the lazy dog. " * 8
    for _ in range(2):
        legacy = client.completions.create(model=MODEL, prompt=prompt, max_tokens=2)
    assert 0 < legacy.usage.prompt_tokens_details.cached_tokens < legacy.usage.prompt_tokens


# --- already right, pinned ------------------------------------------------------------------
class Answer(BaseModel):
    answer: int


def test_parse_with_a_pydantic_model(client):
    """``chat.completions.parse`` sends a strict ``json_schema``; the answer parses."""
    completion = client.chat.completions.parse(
        model=MODEL, messages=[{"role": "user", "content": "What is 12 times 7?"}],
        response_format=Answer, max_tokens=16)
    assert isinstance(completion.choices[0].message.parsed, Answer)


def test_stream_usage_chunk_is_last_with_no_choices(client):
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=QUESTION, max_tokens=4, stream=True,
        stream_options={"include_usage": True}))
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 4
    assert chunks[-2].choices[0].finish_reason == "length"
    assert all(c.usage is None for c in chunks[:-1])


def test_max_completion_tokens_and_seed(client):
    first, second = (_chat(client, max_completion_tokens=6, temperature=1.0, seed=7)
                     for _ in range(2))
    assert first.usage.completion_tokens == 6 and first.choices[0].finish_reason == "length"
    assert first.choices[0].message.content == second.choices[0].message.content


def test_async_client_streams_what_the_sync_client_gets(client, aclient):
    async def stream() -> str:
        async with aclient:
            chunks = await aclient.chat.completions.create(model=MODEL, messages=QUESTION,
                                                           max_tokens=4, stream=True)
            return "".join([c.choices[0].delta.content or "" async for c in chunks])

    assert asyncio.run(stream()) == _chat(client).choices[0].message.content


# --- an API key, as vLLM's and SGLang's --api-key ---------------------------------------------
@pytest.fixture(scope="module")
def keyed_app(engine):
    """The app on the session engine, in process, with an API key."""
    from starlette.testclient import TestClient

    from agentrt.server import create_app

    with TestClient(create_app(engine, api_key="sk-test")) as http:
        yield http


def _keyed_client(http, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url="http://testserver/v1", api_key=key, max_retries=0,
                         http_client=http)


def test_a_wrong_api_key_is_a_401(keyed_app):
    """Without a key check, ``agentrt serve --host 0.0.0.0`` serves (and flushes, aborts)
    for anyone who can reach it; OpenAI's SDK raises ``AuthenticationError`` on a 401."""
    with pytest.raises(openai.AuthenticationError) as info:
        _keyed_client(keyed_app, "sk-wrong").models.list()
    assert info.value.body["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        _keyed_client(keyed_app, "sk-wrong").chat.completions.create(
            model=MODEL, messages=QUESTION, max_tokens=2)
    for path in ("/generate", "/flush_cache", "/abort_request"):
        assert keyed_app.post(path, json={"text": "Hi"}).status_code == 401
    assert keyed_app.get("/health").status_code == 200


def test_the_right_api_key_is_served(keyed_app):
    client = _keyed_client(keyed_app, "sk-test")
    assert [m.id for m in client.models.list().data] == [MODEL]
    answer = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=2)
    assert answer.usage.completion_tokens == 2


def _requests_total(http, endpoint: str, status: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(http.get("/metrics").text):
        for s in family.samples:
            if s.name == "agentrt_requests_total" and \
                    s.labels == {"endpoint": endpoint, "status": status}:
                return s.value
    return 0.0


def test_requests_refused_for_the_key_are_counted_in_metrics(keyed_app):
    """A client with a wrong key (or a scanner) shows in ``/metrics`` as a 401 of the route it
    asked for; before, the middleware answered it without counting it anywhere."""
    chat, native = "/v1/chat/completions", "/generate"
    before = {p: _requests_total(keyed_app, p, "401") for p in (chat, native, "other")}
    with pytest.raises(openai.AuthenticationError):
        _keyed_client(keyed_app, "sk-wrong").chat.completions.create(
            model=MODEL, messages=QUESTION, max_tokens=2)
    assert keyed_app.post(native, json={"text": "Hi"}).status_code == 401
    assert keyed_app.post("/flush_cache").status_code == 401
    assert _requests_total(keyed_app, chat, "401") == before[chat] + 1
    assert _requests_total(keyed_app, native, "401") == before[native] + 1
    assert _requests_total(keyed_app, "other", "401") == before["other"] + 1


# --- request ids, as vLLM's X-Request-Id ------------------------------------------------------
def test_an_incoming_request_id_is_echoed_and_one_is_set_when_absent(client, keyed_app):
    """vLLM answers with the client's ``X-Request-Id`` (or one of its own), so a client can
    match its request to the server's log; the answer's ``id`` stays OpenAI's."""
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=QUESTION, max_tokens=2, extra_headers={"X-Request-Id": "job-17"})
    assert raw.headers["x-request-id"] == "job-17"
    assert raw.parse().id.startswith("chatcmpl-")
    with client.chat.completions.with_streaming_response.create(
            model=MODEL, messages=QUESTION, max_tokens=2, stream=True,
            extra_headers={"X-Request-Id": "job-18"}) as streamed:
        assert streamed.headers["x-request-id"] == "job-18"
    made = {client.models.with_raw_response.list().headers["x-request-id"] for _ in range(2)}
    assert len(made) == 2 and all(made)
    refused = keyed_app.get("/v1/models", headers={"X-Request-Id": "job-19"})
    assert refused.status_code == 401 and refused.headers["x-request-id"] == "job-19"


def test_an_empty_api_key_is_refused(engine):
    from agentrt.server import create_app

    with pytest.raises(ValueError, match="api_key"):
        create_app(engine, api_key=" ")


# --- logprobs ------------------------------------------------------------------------------------
def test_chat_logprobs_whole_and_streamed(client):
    """``logprobs`` / ``top_logprobs`` as OpenAI gives them: one entry per answer token whose
    texts join into the answer, the greedy token first among its alternatives; the stream's
    chunks carry the same entries."""
    whole = _chat(client, max_completion_tokens=8, logprobs=True, top_logprobs=3).choices[0]
    tokens = whole.logprobs.content
    assert tokens and "".join(t.token for t in tokens) == whole.message.content
    for t in tokens:
        assert len(t.top_logprobs) == 3 and t.logprob <= 0
        assert [a.logprob for a in t.top_logprobs] == sorted(
            (a.logprob for a in t.top_logprobs), reverse=True)
        assert t.top_logprobs[0].token == t.token  # greedy: the likeliest
        assert abs(t.top_logprobs[0].logprob - t.logprob) < 1e-6
        assert bytes(t.bytes).decode() == t.token
    chunks = _chat(client, max_completion_tokens=8, logprobs=True, top_logprobs=3,
                   stream=True)
    streamed = [entry for chunk in chunks
                for choice in chunk.choices if choice.logprobs
                for entry in choice.logprobs.content]
    assert [t.token for t in streamed] == [t.token for t in tokens]
    # NOTE: the second run reads the prompt's KV from the prefix cache: the same values to
    # float rounding, not bit for bit
    assert [t.logprob for t in streamed] == pytest.approx([t.logprob for t in tokens],
                                                          abs=1e-3)
    plain = _chat(client, max_completion_tokens=8, logprobs=True).choices[0].logprobs.content
    assert [t.token for t in plain] == [t.token for t in tokens]
    assert all(t.top_logprobs == [] for t in plain)
    assert _chat(client, max_completion_tokens=8).choices[0].logprobs is None


@pytest.mark.parametrize("fields, says", [
    ({"top_logprobs": 2}, "needs logprobs"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"logprobs": True, "tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {}}}}]}, "tools"),
])
def test_chat_logprobs_it_cannot_serve_are_a_400(client, fields, says):
    with pytest.raises(openai.BadRequestError, match=says):
        _chat(client, **fields)
