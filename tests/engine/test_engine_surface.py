"""The engine's public surface for front ends: tokenizer calls, model info, request options,
per-segment counters on every delta, and grammars compiled at submit."""

from __future__ import annotations

import json

import pytest

from agentrt import SamplingParams
from agentrt.core.options import RequestOptions
from agentrt.core.outputs import RequestOutput
from agentrt.core.sampling_params import Grammar


def test_encode_decode_and_model_info(engine):
    ids = engine.encode("Hello world")
    assert ids and engine.decode(ids) == "Hello world"
    info = engine.model_info
    assert info.max_model_len == engine.max_model_len > 0
    assert info.vocab_size > max(ids) and info.eos_token_ids
    assert info.architecture.endswith("ForCausalLM") and info.path
    assert engine.encode([1, 2]) == [1, 2]
    assert engine.cuda_graph_batch_sizes == ()  # CPU: eager
    assert engine.cost_model.kv_bytes_per_token > 0


def test_options_object_and_keywords_agree(engine, chat):
    prompt, params = chat("Name a colour."), SamplingParams(max_tokens=4)
    a = engine.generate(prompt, params, RequestOptions(request_id="surface-a", keep_kv=True))
    b = engine.generate(prompt, params, request_id="surface-b", keep_kv=True)
    assert (a.request_id, b.request_id) == ("surface-a", "surface-b")
    assert a.is_paused and b.is_paused and a.token_ids == b.token_ids
    for rid in ("surface-a", "surface-b"):
        engine.release(rid)
    with pytest.raises(TypeError, match="unknown request option"):
        engine.generate(prompt, params, keepkv=True)


def test_every_delta_carries_the_segment_counters(engine, chat):
    prompt = engine.encode(chat("Count from one to five."))
    params = SamplingParams(max_tokens=6)
    first = list(engine.stream(prompt, params, namespace="surface-count", keep_kv=True))
    assert {d.num_prompt_tokens for d in first} == {len(prompt)}
    assert {d.num_cached_tokens for d in first} == {0}
    assert [d.finished for d in first] == [False] * (len(first) - 1) + [True]
    out = RequestOutput.from_deltas(first)
    appended = engine.encode(" And then?")
    second = list(engine.resume_stream(out.request_id, appended, params, keep_kv=False))
    context = len(prompt) + len(out.token_ids) + len(appended)
    # the kept KV is everything but the appended tokens and the last sampled token
    assert {d.num_prompt_tokens for d in second} == {context}
    assert {d.num_cached_tokens for d in second} == {context - len(appended) - 1}
    whole = RequestOutput.from_deltas(second)
    assert whole.num_cached_tokens == context - len(appended) - 1


def test_matched_stop_on_the_finishing_delta(engine, chat):
    params = SamplingParams(max_tokens=40, stop=["Tuesday"])
    deltas = list(engine.stream(chat("List the days of the week."), params))
    assert deltas[-1].finish_reason == "stop" and deltas[-1].matched_stop == "Tuesday"
    assert all(d.matched_stop is None for d in deltas[:-1])


@pytest.mark.parametrize(("grammar", "check"), [
    (Grammar("regex", "[0-9]{3}"), lambda text: text.isdigit() and len(text) == 3),
    (Grammar("json_schema", json.dumps({"type": "object", "properties": {
        "ok": {"type": "boolean"}}, "required": ["ok"]})),
     lambda text: isinstance(json.loads(text)["ok"], bool)),
    (Grammar("ebnf", 'root ::= "yes" | "no"'), lambda text: text in ("yes", "no")),
])
def test_grammar_constrains_the_output(engine, chat, grammar, check):
    pytest.importorskip("xgrammar")
    out = engine.generate(chat("Answer."), SamplingParams(max_tokens=24, grammar=grammar))
    assert out.finish_reason == "stop" and check(out.text), out.text


def test_bad_grammar_fails_at_submit(engine):
    pytest.importorskip("xgrammar")
    with pytest.raises(ValueError):
        engine.generate("x", SamplingParams(grammar=Grammar("ebnf", "root ::= (")))
    with pytest.raises(ValueError, match="JSON text"):
        engine.generate("x", SamplingParams(grammar=Grammar("json_schema", "{not json")))
    with pytest.raises(ValueError, match="not both"):
        engine.generate("x", SamplingParams(grammar=Grammar("regex", "a"),
                                            logits_processor=lambda ids, row: row))
