"""The official ``openai`` client against ``agentrt serve``: chat, streaming, tools, usage,
stop, legacy completions — answers equal what ``agentrt.Engine`` gives in process.

Every test runs twice: against the server (``direct``), and against a second ``agentrt serve
--backend sglang`` in front of it (``fronted``: chat templates, tool calls and grammars in
the front server, tokens from the back one over SGLang's native API)."""

from __future__ import annotations

import json

import jsonschema
import pytest
from serve_harness import start_server

from agentrt import SamplingParams
from agentrt.chat import prepare_chat

MODEL = "SmolLM2-135M-Instruct"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
MATH = [{"role": "user", "content": "What is 12 times 7? Use the calculator."}]
TOOL_CALL_TOKENS = 48
"""A constrained call to the calculator takes about 42 tokens on SmolLM2."""


@pytest.fixture(scope="module", params=["direct", "fronted"])
def server(request, server, tmp_path_factory):
    """The session's server, or a front server for it (``--backend sglang``)."""
    if request.param == "direct":
        yield server
        return
    log = tmp_path_factory.mktemp("front") / "serve.log"
    with start_server(log, "--backend", "sglang", "--backend-url", server.url) as front:
        yield front


@pytest.fixture(scope="module")
def client(server):
    """The official OpenAI client pointed at this module's server."""
    with server.openai_client() as c:
        yield c


def _local_answer(engine, messages, **options) -> str:
    """The same chat request on an in-process engine (the same chat layer, greedy)."""
    call = prepare_chat(engine, messages, **options)
    return engine.generate(call.prompt_ids, call.params).text


def test_models_lists_the_served_name(client):
    assert [m.id for m in client.models.list().data] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL


def test_chat_greedy_equals_the_engine(client, engine):
    answer = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=16,
                                            temperature=0)
    choice = answer.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == _local_answer(engine, QUESTION, max_tokens=16)
    assert "Paris" in choice.message.content
    assert answer.id.startswith("chatcmpl-") and answer.model == MODEL


def test_chat_is_deterministic_and_lenient_about_the_model_name(client):
    first = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=12)
    again = client.chat.completions.create(model=f"HuggingFaceTB/{MODEL.lower()}",
                                           messages=QUESTION, max_tokens=12)
    assert first.choices[0].message.content == again.choices[0].message.content


def test_usage_counts_prompt_and_output_tokens(client, engine):
    answer = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=4)
    prompt_len = len(prepare_chat(engine, QUESTION).prompt_ids)
    assert answer.usage.prompt_tokens == prompt_len
    assert answer.usage.completion_tokens == 4
    assert answer.usage.total_tokens == prompt_len + 4
    assert answer.choices[0].finish_reason == "length"


def test_stream_concatenates_to_the_whole_answer(client):
    whole = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=16)
    stream = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=16,
                                            stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    finals = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finals[-1] == whole.choices[0].finish_reason and not any(finals[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage == whole.usage
    assert len({c.id for c in chunks}) == 1


def test_stop_string_ends_the_answer_before_it(client):
    whole = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=16)
    stopped = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=16,
                                             stop=["Paris"])
    content = stopped.choices[0].message.content
    assert "Paris" not in content
    assert whole.choices[0].message.content.startswith(content)
    assert stopped.choices[0].finish_reason == "stop"


def test_required_tool_call_matches_the_schema(client, calculator):
    answer = client.chat.completions.create(model=MODEL, messages=MATH,
                                            max_tokens=TOOL_CALL_TOKENS, tools=[calculator],
                                            tool_choice="required")
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "calculator"
    assert call.id.startswith("call_")
    jsonschema.validate(json.loads(call.function.arguments),
                        calculator["function"]["parameters"])


def test_streamed_tool_call_reassembles_to_the_same_call(client, calculator):
    options = dict(model=MODEL, messages=MATH, max_tokens=TOOL_CALL_TOKENS, tools=[calculator],
                   tool_choice={"type": "function", "function": {"name": "calculator"}})
    whole = client.chat.completions.create(**options).choices[0].message.tool_calls[0]
    calls: dict[int, dict] = {}
    finish = None
    for chunk in client.chat.completions.create(**options, stream=True):
        choice = chunk.choices[0]
        finish = choice.finish_reason or finish
        assert not choice.delta.content
        for d in choice.delta.tool_calls or ():
            call = calls.setdefault(d.index, {"id": d.id, "name": d.function.name, "args": ""})
            call["args"] += d.function.arguments or ""
    assert list(calls) == [0] and finish == "tool_calls"
    assert calls[0]["id"].startswith("call_") and calls[0]["name"] == "calculator"
    assert json.loads(calls[0]["args"]) == json.loads(whole.function.arguments)


def test_tool_result_goes_back_into_the_conversation(client, calculator):
    first = client.chat.completions.create(model=MODEL, messages=MATH,
                                           max_tokens=TOOL_CALL_TOKENS, tools=[calculator],
                                           tool_choice="required").choices[0].message
    call = first.tool_calls[0]
    history = [*MATH, first.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": call.id, "content": "84"}]
    answer = client.chat.completions.create(model=MODEL, messages=history, max_tokens=24,
                                            tools=[calculator], tool_choice="none")
    assert answer.choices[0].message.content and not answer.choices[0].message.tool_calls
    assert answer.usage.prompt_tokens > 0


def test_response_format_json_object(client):
    messages = [{"role": "user", "content": "Give the capital of France as JSON."}]
    answer = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=24,
                                            response_format={"type": "json_object"})
    if answer.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(answer.choices[0].message.content), dict)
    else:  # cut by max_tokens: still the start of a JSON object
        assert answer.choices[0].message.content.lstrip().startswith("{")


def test_completions_text_and_token_ids(client, engine, tokenizer):
    prompt = "The capital of France is"
    expected = engine.generate(prompt, SamplingParams(max_tokens=8)).text
    answer = client.completions.create(model=MODEL, prompt=prompt, max_tokens=8)
    assert answer.choices[0].text == expected
    assert answer.usage.completion_tokens == 8 and answer.choices[0].finish_reason == "length"
    ids = tokenizer.encode(prompt, add_special_tokens=False)
    by_ids = client.completions.create(model=MODEL, prompt=ids, max_tokens=8)
    assert by_ids.choices[0].text == expected and by_ids.usage.prompt_tokens == len(ids)


def test_completions_stream_and_batch(client):
    prompts = ["The capital of France is", "Once upon a time"]
    whole = client.completions.create(model=MODEL, prompt=prompts, max_tokens=6)
    assert [c.index for c in whole.choices] == [0, 1]
    assert whole.usage.completion_tokens == 12
    stream = client.completions.create(model=MODEL, prompt=prompts[1], max_tokens=6,
                                       stream=True)
    assert "".join(c.choices[0].text for c in stream) == whole.choices[1].text


@pytest.mark.parametrize("path", ["/health", "/metrics"])
def test_health_and_metrics_answer(server, path):
    import httpx

    response = httpx.get(server.url + path, timeout=30)
    assert response.status_code == 200
    if path == "/metrics":
        for name in ("agentrt_kv_free_blocks", "agentrt_kv_total_blocks",
                     "agentrt_time_to_first_token_seconds", "agentrt_num_requests_running",
                     "agentrt_generation_tokens_total", "agentrt_requests_total"):
            assert name in response.text
