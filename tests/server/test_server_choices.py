"""OpenAI's ``n`` through the official client, as vLLM and SGLang users send it: ``n``
choices, whole and streamed, each parsed on its own, the prompt computed once.

Every test that takes ``served`` runs twice: against the session's server (``direct``) and
against ``agentrt serve --backend sglang`` in front of it (``fronted``). Greedy unless a test
says otherwise (all n choices then agree, as in vLLM); generations stay short."""

from __future__ import annotations

import json
import uuid
from collections import defaultdict

import httpx
import openai
import pytest
from serve_harness import Server, start_server

MODEL = "SmolLM2-135M-Instruct"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
MATH = [{"role": "user", "content": "What is 12 times 7? Use the calculator."}]


@pytest.fixture(scope="module", params=["direct", "fronted"])
def served(request, server, tmp_path_factory) -> Server:
    """The session's server, or a front server for it (``--backend sglang``)."""
    if request.param == "direct":
        yield server
        return
    log = tmp_path_factory.mktemp("front") / "serve.log"
    with start_server(log, "--backend", "sglang", "--backend-url", server.url) as front:
        yield front


@pytest.fixture(scope="module")
def client(served):
    with served.openai_client() as c:
        yield c


def _chat(client, **fields):
    fields = {"model": MODEL, "messages": QUESTION, "max_tokens": 6, **fields}
    return client.chat.completions.create(**fields)


def _by_index(chunks) -> dict[int, list]:
    out: dict[int, list] = defaultdict(list)
    for chunk in chunks:
        for choice in chunk.choices:
            out[choice.index].append(choice)
    return out


def test_chat_n_choices_whole(client):
    """``n=3`` was a 400; now three choices, ``index`` 0..2, greedy so all alike; ``usage``
    counts the prompt once and every choice's tokens."""
    one = _chat(client)
    three = _chat(client, n=3)
    assert [c.index for c in three.choices] == [0, 1, 2]
    assert {c.message.content for c in three.choices} == {one.choices[0].message.content}
    assert three.usage.prompt_tokens == one.usage.prompt_tokens
    assert three.usage.completion_tokens == 3 * one.usage.completion_tokens
    assert three.id.startswith("chatcmpl-")


def test_chat_n_with_a_seed_samples_choice_i_with_seed_plus_i(client):
    """vLLM's rule: the choices differ (each its own seed), and the request repeats."""
    fields = {"temperature": 1.0, "max_tokens": 8}
    both = _chat(client, n=2, seed=11, **fields)
    alone = [_chat(client, seed=seed, **fields).choices[0].message.content for seed in (11, 12)]
    assert [c.message.content for c in both.choices] == alone


def test_chat_n_choices_streamed(client):
    """Each chunk's choice names its index; each choice opens with the role, ends with one
    ``finish_reason`` and says what the whole answer says; one usage chunk, last."""
    whole = _chat(client, n=3)
    chunks = list(_chat(client, n=3, stream=True, stream_options={"include_usage": True}))
    assert chunks[-1].choices == [] and chunks[-1].usage == whole.usage
    assert all(c.usage is None for c in chunks[:-1])
    assert len({c.id for c in chunks}) == 1
    per = _by_index(chunks)
    assert sorted(per) == [0, 1, 2]
    for index, choices in per.items():
        assert choices[0].delta.role == "assistant"
        assert [c.finish_reason for c in choices if c.finish_reason] == \
            [whole.choices[index].finish_reason]
        text = "".join(c.delta.content or "" for c in choices)
        assert text == whole.choices[index].message.content


def test_chat_n_with_tools_parses_each_choice(client, calculator):
    """Each choice's tool call is its own: whole and streamed, named and with arguments."""
    fields = {"messages": MATH, "tools": [calculator], "tool_choice": "required",
              "max_tokens": 48, "n": 2}
    whole = _chat(client, **fields)
    for choice in whole.choices:
        (call,) = choice.message.tool_calls
        assert call.function.name == "calculator"
        assert choice.finish_reason == "tool_calls"
        assert set(json.loads(call.function.arguments)) == {"a", "op", "b"}
    per = _by_index(_chat(client, stream=True, **fields))
    for index, choices in per.items():
        deltas = [t for c in choices for t in c.delta.tool_calls or ()]
        assert deltas[0].function.name == "calculator"
        arguments = "".join(t.function.arguments or "" for t in deltas)
        assert arguments == whole.choices[index].message.tool_calls[0].function.arguments


def test_completions_n_choices_per_prompt(client):
    """Prompt p's choice j has index ``p * n + j`` (vLLM's numbering); usage counts each
    prompt once."""
    prompts = ["The capital of France is", "One, two, three,"]
    alone = [client.completions.create(model=MODEL, prompt=p, max_tokens=4) for p in prompts]
    both = client.completions.create(model=MODEL, prompt=prompts, max_tokens=4, n=2)
    assert [c.index for c in both.choices] == [0, 1, 2, 3]
    assert [c.text for c in both.choices] == [a.choices[0].text for a in alone for _ in (0, 1)]
    assert both.usage.prompt_tokens == sum(a.usage.prompt_tokens for a in alone)
    assert both.usage.completion_tokens == 2 * sum(a.usage.completion_tokens for a in alone)
    chunks = list(client.completions.create(model=MODEL, prompt=prompts[0], max_tokens=4, n=2,
                                            stream=True,
                                            stream_options={"include_usage": True}))
    per = _by_index(chunks)
    assert sorted(per) == [0, 1]
    for choices in per.values():
        assert "".join(c.text for c in choices) == alone[0].choices[0].text
    assert chunks[-1].usage.prompt_tokens == alone[0].usage.prompt_tokens
    assert chunks[-1].usage.completion_tokens == 2 * alone[0].usage.completion_tokens


@pytest.mark.parametrize("n", [0, 17])
def test_n_outside_1_to_16_is_a_400_naming_it(client, n):
    with pytest.raises(openai.BadRequestError) as info:
        _chat(client, n=n)
    assert info.value.body["param"] == "n"
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=MODEL, prompt="Hi", max_tokens=2, n=n)
    assert info.value.body["param"] == "n"


def test_the_n_choices_compute_the_prompt_once(server, client):
    """The n calls find the prompt in the prefix cache (it is prefilled once, then they are
    submitted together); they computed it n times. Read on the engine's server."""
    page = httpx.get(f"{server.url}/server_info", timeout=30).json()["page_size"]
    system = f"Request {uuid.uuid4().hex}. You answer questions about geography briefly. " * 6
    messages = [{"role": "system", "content": system}, *QUESTION]
    before = server.metrics()["agentrt_prefill_computed_tokens_total"]
    answer = _chat(client, messages=messages, n=4, max_tokens=2)
    computed = server.metrics()["agentrt_prefill_computed_tokens_total"] - before
    prompt = answer.usage.prompt_tokens
    assert answer.usage.prompt_tokens_details.cached_tokens == 0  # a prompt never seen
    assert computed <= prompt + 4 * page < 2 * prompt
    again = _chat(client, messages=messages, n=2, max_tokens=2)
    assert again.usage.prompt_tokens_details.cached_tokens > 0


def test_n_above_the_max_batch_is_a_400(tiny_model):
    """On an engine that decodes 2 requests at once, n=3 is refused, naming the max batch."""
    from starlette.testclient import TestClient

    from agentrt import Engine
    from agentrt.server import create_app

    with Engine(tiny_model, dtype="float32", max_num_seqs=2) as engine, \
            TestClient(create_app(engine)) as http:
        body = {"messages": QUESTION, "max_tokens": 1}
        refused = http.post("/v1/chat/completions", json={**body, "n": 3})
        assert refused.status_code == 400
        error = refused.json()["error"]
        assert error["param"] == "n" and "max batch is 2" in error["message"]
        assert len(http.post("/v1/chat/completions", json={**body, "n": 2}).json()["choices"]) \
            == 2
