"""A stopped request continued with appended text reuses its KV and matches a fresh run."""

from __future__ import annotations

from agentrt import SamplingParams


def test_continue_after_stop_string(engine, chat, tokenizer):
    prompt = chat("List the days of the week.")
    first = engine.generate(prompt, SamplingParams(max_tokens=40, stop=["Wednes"]),
                            keep_kv=True, namespace="cont")
    assert first.finish_reason == "stop" and first.stop_reason == "Wednes"
    assert first.is_paused and "Wednes" not in first.text
    appended = tokenizer.encode("day (midweek)\n4.", add_special_tokens=False)
    params = SamplingParams(max_tokens=12)
    cont = engine.resume(first.request_id, appended, params, keep_kv=False)
    # only the appended tokens are computed, plus the last sampled token (never fed back yet)
    assert cont.num_prefill_tokens == len(appended) + 1
    context = tokenizer.encode(prompt, add_special_tokens=False) + first.token_ids + appended
    fresh = engine.generate(context, params, namespace="cont-fresh")
    assert fresh.num_cached_tokens == 0
    assert cont.token_ids == fresh.token_ids


def test_resume_text_and_release(engine, chat):
    first = engine.generate(chat("Say yes."), SamplingParams(max_tokens=3), keep_kv=True)
    free_before = engine.core.kv.pool.num_free
    engine.release(first.request_id)
    assert engine.core.kv.pool.num_free + engine.core.kv.cache.num_evictable_blocks >= free_before
    try:
        engine.resume(first.request_id, " more")
    except KeyError as e:
        assert first.request_id in str(e)
    else:
        raise AssertionError("resuming a released request must fail")


def test_forced_tokens_replace_sampled_ones_then_sampling_resumes(exact_engine, chat,
                                                                  tokenizer):
    """The forced tokens run as decode steps, the reference's as prefill: equal outputs on the
    exact path (the integer path's batched and batch-1 kernels sum in different orders)."""
    engine = exact_engine
    forced = tokenizer.encode(" Forty-two is", add_special_tokens=False)
    out = engine.generate(chat("What is six times seven?"), SamplingParams(max_tokens=8),
                          forced_token_ids=forced, namespace="forced")
    assert out.token_ids[: len(forced)] == forced
    assert out.text.startswith(" Forty-two is")
    context = tokenizer.encode(chat("What is six times seven?"), add_special_tokens=False)
    free_run = engine.generate(context + forced, SamplingParams(max_tokens=8 - len(forced)),
                               namespace="forced-ref")
    assert out.token_ids[len(forced):] == free_run.token_ids
