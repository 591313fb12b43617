"""What agent and benchmark clients send to vLLM, SGLang and llama-server, sent to agentrt
with the ``openai`` package: vLLM's sampling extras on chat (``ignore_eos``, ``min_tokens``,
``stop_token_ids``), the legacy endpoint's ``logprobs``, ``/tokenize`` and ``/detokenize``,
CORS, and ``/v1/embeddings`` (docs/server.md, "Parity with vLLM, SGLang and llama-server").

One server for the module, with an embedding model and one allowed origin; the session's
plain server (``server``) answers the embeddings 404.
"""

from __future__ import annotations

import math

import httpx
import openai
import pytest
from serve_harness import start_server

MODEL = "SmolLM2-135M-Instruct"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
"""Greedy: a short answer (8 tokens), then the end of the turn."""
CHAT_PROMPT = ("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
               "<|im_start|>assistant\n")
ORIGIN = "http://localhost:3000"


@pytest.fixture(scope="module")
def parity(tmp_path_factory):
    log = tmp_path_factory.mktemp("parity") / "serve.log"
    with start_server(log, "--embedding-model", "all-minilm-l6-v2",
                      "--cors-origin", ORIGIN) as server:
        yield server


@pytest.fixture(scope="module")
def pclient(parity):
    with parity.openai_client() as c:
        yield c


def _chat(client, **fields):
    fields.setdefault("max_tokens", 12)
    return client.chat.completions.create(model=MODEL, messages=QUESTION, **fields)


# --- vLLM's sampling extras on chat ------------------------------------------------------------
def test_chat_ignore_eos_and_min_tokens_run_past_the_end_of_the_turn(pclient):
    plain = _chat(pclient)
    assert plain.choices[0].finish_reason == "stop" and plain.usage.completion_tokens < 10
    for extra in ({"ignore_eos": True}, {"min_tokens": 12}):
        longer = _chat(pclient, extra_body=extra)
        assert longer.usage.completion_tokens == 12, extra
        assert longer.choices[0].finish_reason == "length", extra
        assert longer.choices[0].message.content.startswith(plain.choices[0].message.content)
    held = _chat(pclient, extra_body={"min_tokens": 10})
    assert held.usage.completion_tokens >= 10


def test_chat_stop_token_ids_end_the_answer(parity, pclient):
    ids = httpx.post(f"{parity.url}/tokenize", json={"prompt": _chat(pclient).choices[0]
                     .message.content, "add_special_tokens": False}, timeout=60).json()["tokens"]
    cut = _chat(pclient, extra_body={"stop_token_ids": [ids[2]]})
    assert cut.usage.completion_tokens == ids.index(ids[2]) + 1


@pytest.mark.parametrize("field, value, other", [
    ("ignore_eos", True, {"response_format": {"type": "json_object"}}),
    ("min_tokens", 3, {"response_format": {"type": "json_object"}}),
    ("min_tokens", -1, {}),
])
def test_chat_extras_that_cannot_be_honoured_are_a_400_naming_them(pclient, field, value,
                                                                    other):
    with pytest.raises(openai.BadRequestError) as info:
        _chat(pclient, extra_body={field: value}, **other)
    assert field in (info.value.body["param"] or "") + info.value.body["message"]


# --- logprobs on the legacy endpoint ----------------------------------------------------------
def test_completion_logprobs_whole_and_streamed(pclient):
    whole = pclient.completions.create(model=MODEL, prompt=CHAT_PROMPT, max_tokens=5,
                                       logprobs=2)
    lp = whole.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 5
    assert "".join(lp.tokens) == whole.choices[0].text
    assert lp.text_offset == [sum(map(len, lp.tokens[:i])) for i in range(5)]
    for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True):
        assert 2 <= len(top) <= 3 and logprob <= 0
        assert math.isclose(top[token], max(top.values()), abs_tol=1e-5)  # greedy
    chunks = list(pclient.completions.create(model=MODEL, prompt=CHAT_PROMPT, max_tokens=5,
                                             logprobs=2, stream=True))
    streamed = [t for c in chunks if c.choices and c.choices[0].logprobs
                for t in c.choices[0].logprobs.tokens]
    assert streamed == lp.tokens
    plain = pclient.completions.create(model=MODEL, prompt=CHAT_PROMPT, max_tokens=5)
    assert plain.choices[0].logprobs is None
    with pytest.raises(openai.BadRequestError) as info:
        pclient.completions.create(model=MODEL, prompt=CHAT_PROMPT, max_tokens=2, logprobs=21)
    assert "logprobs" in str(info.value.body)


# --- /tokenize and /detokenize (vLLM's shapes) ------------------------------------------------
def test_tokenize_and_detokenize(parity, pclient):
    url = parity.url
    text = "Paris is the capital of France."
    out = httpx.post(f"{url}/tokenize", json={"prompt": text, "return_token_strs": True},
                     timeout=60).json()
    assert out["count"] == len(out["tokens"]) == len(out["token_strs"]) > 0
    assert out["max_model_len"] > out["count"]
    back = httpx.post(f"{url}/detokenize", json={"tokens": out["tokens"]}, timeout=60).json()
    assert back == {"prompt": text}
    chat = httpx.post(f"{url}/tokenize", json={"messages": QUESTION}, timeout=60).json()
    assert chat["count"] == _chat(pclient, max_tokens=1).usage.prompt_tokens
    llama = httpx.post(f"{url}/tokenize", json={"content": text}, timeout=60)
    assert llama.status_code == 400 and "prompt" in llama.json()["error"]["message"]
    bad = httpx.post(f"{url}/detokenize", json={"tokens": [10**9]}, timeout=60)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens"


# --- CORS --------------------------------------------------------------------------------------
def test_cors_allows_the_configured_origin_only(parity, server):
    headers = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST",
               "Access-Control-Request-Headers": "authorization, content-type"}
    pre = httpx.options(f"{parity.url}/v1/chat/completions", headers=headers, timeout=60)
    assert pre.status_code == 200
    assert pre.headers["access-control-allow-origin"] == ORIGIN
    other = httpx.options(f"{parity.url}/v1/chat/completions", timeout=60,
                          headers={**headers, "Origin": "http://evil.example"})
    assert "access-control-allow-origin" not in other.headers
    get = httpx.get(f"{parity.url}/v1/models", headers={"Origin": ORIGIN}, timeout=60)
    assert get.headers["access-control-allow-origin"] == ORIGIN
    off = httpx.get(f"{server.url}/v1/models", headers={"Origin": ORIGIN}, timeout=60)
    assert "access-control-allow-origin" not in off.headers  # NOTE: off by default


# --- /v1/embeddings ----------------------------------------------------------------------------
def test_embeddings_from_the_configured_model(pclient):
    texts = ["a cat sat on the mat", "a kitten sat on a rug", "stock markets fell today"]
    got = pclient.embeddings.create(model="all-MiniLM-L6-v2", input=texts)  # base64 on the wire
    floats = pclient.embeddings.create(model="sentence-transformers/all-MiniLM-L6-v2",
                                       input=texts, encoding_format="float")
    vecs = [d.embedding for d in got.data]
    assert [d.index for d in got.data] == [0, 1, 2] and len(vecs[0]) == 384
    for a, b in zip(vecs, (d.embedding for d in floats.data), strict=True):
        assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < 1e-6
    dot = [[sum(x * y for x, y in zip(u, v, strict=True)) for v in vecs] for u in vecs]
    assert math.isclose(dot[0][0], 1.0, abs_tol=1e-4) and dot[0][1] > dot[0][2]
    assert got.usage.prompt_tokens > len(texts)
    assert "all-MiniLM-L6-v2" in {m.id for m in pclient.models.list().data}


@pytest.mark.parametrize("fields, param", [
    ({"input": [[1, 2, 3]]}, "input"),
    ({"input": "hi", "dimensions": 10}, "dimensions"),
    ({"input": "word " * 400}, "input.0"),
])
def test_embeddings_refusals_name_the_field(pclient, fields, param):
    with pytest.raises(openai.BadRequestError) as info:
        pclient.embeddings.create(model="all-MiniLM-L6-v2", **fields)
    assert info.value.body["param"] == param


def test_embeddings_without_an_embedding_model_is_a_404_saying_so(server, pclient):
    with pytest.raises(openai.NotFoundError) as info:
        pclient.embeddings.create(model=MODEL, input="hi")
    assert info.value.body["param"] == "model"
    answer = httpx.post(f"{server.url}/v1/embeddings", json={"input": "hi"}, timeout=60)
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "embeddings_not_configured"
    assert "--embedding-model" in answer.json()["error"]["message"]
