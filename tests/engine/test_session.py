"""A Session keeps one request across re-rendered prompts: it prefills only what is new,
rolls back a seam that re-tokenizes differently, and reproduces a fresh call's tokens."""

from __future__ import annotations

import itertools

from agentrt import SamplingParams
from agentrt.session import Session, agent_run

PARAMS = SamplingParams(max_tokens=8)
_ns = itertools.count()


def collect(stream) -> tuple[str, list[int]]:
    text, ids = "", []
    for d in stream:
        text, ids = text + d.text, ids + d.token_ids
    return text, ids


def fresh(engine, ids: list[int]) -> list[int]:
    return engine.generate(ids, PARAMS, namespace=f"session-fresh-{next(_ns)}").token_ids


def test_three_calls_prefill_only_what_is_new(engine, chat, tokenizer):
    s = Session(engine, namespace=f"session-{next(_ns)}")
    text = chat("What is 2 + 2? Answer with a number.")
    enc = lambda t: tokenizer.encode(t, add_special_tokens=False)  # noqa: E731
    prompts, computed = [], 0
    for step in range(3):
        ids = enc(text)
        keep, appended = s.plan(ids)
        if step:  # the held context minus its last (sampled, never computed) token
            computed += len(ids) - min(keep, len(s.context) - 1)
        else:
            computed += len(ids)
        out_text, out_ids = collect(s.stream(ids, PARAMS))
        assert out_ids == fresh(engine, ids)  # exactly what a stateless call would produce
        prompts.append(ids)
        text += out_text + f"\nObservation: {step}\nThought:"
    assert s.stats.num_prompt_tokens == sum(map(len, prompts))
    assert s.stats.num_prefill_tokens == computed
    assert s.stats.num_prefill_tokens < s.stats.num_prompt_tokens / 2
    assert s.stats.num_cached_tokens == s.stats.num_prompt_tokens - computed
    s.close()
    assert s.session_id is None and s.context == []


def test_seam_that_retokenizes_differently_is_rolled_back(engine, chat, tokenizer):
    enc = lambda t: tokenizer.encode(t, add_special_tokens=False)  # noqa: E731
    s = Session(engine, namespace=f"session-{next(_ns)}")
    prompt = enc(chat("Greet me."))
    # the model "writes" Hello as two tokens, Hel + lo; the text re-tokenizes as one
    forced = enc("Hel") + enc("lo")
    assert enc("Hello") != forced
    text, ids = collect(s.stream(prompt, SamplingParams(max_tokens=2), forced_token_ids=forced))
    assert ids == forced and text == "Hello"
    rendered = enc(tokenizer.decode(prompt) + "Hello" + " friend!\nUser: and now?")
    keep, appended = s.plan(rendered)
    assert keep == len(prompt) and appended[: len(enc("Hello"))] == enc("Hello")
    _, out = collect(s.stream(rendered, PARAMS))
    assert s.stats.num_rollbacks == 1 and s.stats.num_rollback_tokens == len(forced)
    assert s.context == rendered + out  # the model saw exactly the re-tokenized text
    assert out == fresh(engine, rendered)
    s.close()


def test_agent_run_scope_frees_every_session(engine, chat, tokenizer):
    enc = lambda t: tokenizer.encode(t, add_special_tokens=False)  # noqa: E731
    with engine._lock:
        engine.core.clear_prefix_cache()
    free = engine.core.kv.num_free_blocks
    with agent_run() as scope:
        a = scope.session_for(engine, enc(chat("One question about the weather in Paris today.")))
        collect(a.stream(enc(chat("One question about the weather in Paris today.")), PARAMS))
        b = scope.session_for(engine, enc(chat("Two, a different question.")))
        assert b is not a  # an unrelated prompt does not wipe the first session's context
        collect(b.stream(enc(chat("Two, a different question.")), PARAMS))
        follow_up = a.context + enc("\nObservation: done")
        assert scope.session_for(engine, follow_up) is a
        collect(a.stream(follow_up, PARAMS))
        assert scope.stats.num_calls == 3 and scope.stats.num_reused_tokens > 0
        assert engine.core.kv.num_free_blocks < free
    assert all(s.session_id is None for s in scope.sessions)
    assert not [r for r in engine.core.requests if r.startswith("session-")]
    assert engine.core.kv.num_free_blocks == free


def test_prefill_only_call_keeps_its_kv_until_the_prompt_is_complete(engine, chat, tokenizer):
    ids = tokenizer.encode(chat("Name three colours of the rainbow."), add_special_tokens=False)
    known = ids[: len(ids) - 6]  # the part a graph knows early (instruction, question)
    s = Session(engine, namespace=f"session-{next(_ns)}")
    s.prefill(known)
    rid = s.backend._sessions[s.session_id].request_id  # the engine request holding it
    assert engine.core.requests[rid].status.value == "intercepted"  # waiting, KV kept
    assert engine.core.requests[rid].num_computed_tokens == len(known)
    out_text, out_ids = collect(s.stream(ids, PARAMS))
    assert out_ids == fresh(engine, ids)
    # (+1 when the token sampled after the known part happens to be the next prompt token)
    assert s.stats.num_reused_tokens in (len(known), len(known) + 1)
    assert s.stats.num_rollbacks == 0
    assert s.stats.num_prefill_tokens == len(ids)  # each prompt token computed once
    s.close()
    load = engine.load()
    assert load.num_free_blocks + load.num_evictable_blocks == load.num_total_blocks
