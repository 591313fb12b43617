"""The ``local`` backend on the real engine: sessions resume a paused request (only the
appended tokens are prefilled), abort, and in-place pause through a hook."""

from __future__ import annotations

import asyncio

import pytest

from agentrt import RequestOptions, SamplingParams
from agentrt.core.outputs import RequestOutput


def test_session_resumes_with_only_the_appended_tokens(local, prompt_ids, tokenizer):
    params = SamplingParams(max_tokens=6)
    sid = local.open_session()
    try:
        first = local.generate(prompt_ids, params, session_id=sid)
        appended = tokenizer.encode("\nWhy?", add_special_tokens=False)
        second = local.generate(appended, params, session_id=sid)
    finally:
        local.close_session(sid)
    context = prompt_ids + first.token_ids + appended
    assert second.num_prompt_tokens == len(context)
    assert second.num_cached_tokens >= len(context) - len(appended) - 1
    assert second.token_ids == local.generate(context, params).token_ids


def test_abort_by_request_id(local, prompt_ids):
    # NOTE: the engine decodes on while the first chunk is handled: a budget no run can use
    # up before the abort lands keeps this independent of the machine's speed
    params = SamplingParams(max_tokens=512, ignore_eos=True)
    chunks = []
    for chunk in local.stream(prompt_ids, params, options=RequestOptions(request_id="local-abort")):
        chunks.append(chunk)
        local.abort("local-abort")
    out = RequestOutput.from_deltas(chunks)
    assert out.finish_reason == "abort" and len(out.token_ids) < 512


def test_a_hook_pauses_in_place(local, prompt_ids):
    """The one backend that can stop mid-decode: the hook pauses after 3 tokens."""
    def pause_after_three(req, token_ids):
        return "pause" if len(req.output_token_ids) >= 3 else None

    sid = local.open_session()
    try:
        chunks = list(local.stream(prompt_ids, SamplingParams(max_tokens=16), session_id=sid,
                                   options=RequestOptions(hook=pause_after_three)))
        paused = local.engine.core.requests[local._sessions[sid].request_id]
        assert paused.status.name == "INTERCEPTED"  # its KV held, ready to resume
    finally:
        local.close_session(sid)
    assert sum(len(c.token_ids) for c in chunks) == 3 and chunks[-1].finish_reason == "stop"


def test_busy_and_unknown_sessions_are_refused(local, prompt_ids):
    with pytest.raises(ValueError, match="unknown session"):
        local.generate(prompt_ids, session_id="nope")
    sid = local.open_session()
    try:
        with pytest.raises(ValueError, match="keep must be"):
            local.generate(prompt_ids, session_id=sid, keep=3)  # the session holds nothing
    finally:
        local.close_session(sid)


def test_keep_rolls_the_session_back(local, prompt_ids, tokenizer):
    """``keep`` < the held context: the request is truncated there, then appended to."""
    params = SamplingParams(max_tokens=4)
    sid = local.open_session()
    try:
        first = local.generate(prompt_ids, params, session_id=sid)
        appended = tokenizer.encode(" Why?", add_special_tokens=False)
        second = local.generate(appended, params, session_id=sid, keep=len(prompt_ids))
    finally:
        local.close_session(sid)
    assert len(first.token_ids) == 4
    context = prompt_ids + appended  # the first call's output rolled back
    assert second.num_prompt_tokens == len(context)
    assert second.num_cached_tokens >= len(prompt_ids) - 1
    assert second.token_ids == local.generate(context, params).token_ids


async def test_async_twin(local, prompt_ids):
    params = SamplingParams(max_tokens=6)
    whole, again = await asyncio.gather(local.agenerate(prompt_ids, params),
                                        local.agenerate(prompt_ids, params))
    assert whole.token_ids == again.token_ids == local.generate(prompt_ids, params).token_ids


def test_capabilities_follow_the_engines_prefix_cache():
    """An engine built without a prefix cache is not advertised as having one (semantic
    sessions then skip shared-prefix fills that nothing would reuse)."""
    from agentrt import Engine
    from agentrt.backends.local import LocalBackend

    with Engine(enable_prefix_cache=False, num_blocks=64, profile_on_start=False) as engine:
        caps = LocalBackend(engine).capabilities
        assert caps.prefix_cache is False
        assert caps.can_pause_in_place


async def test_a_call_after_its_agent_run_ended_is_refused_not_held(engine):
    """A task started inside ``agent_run`` that calls the model after the block ended (its
    context still names the scope) gets a clear error, not a session whose KV no one frees."""
    import asyncio

    from agentrt.chat import arun_deltas, prepare_chat
    from agentrt.session import SessionScope, agent_run

    go = asyncio.Event()

    async def late_call() -> None:
        await go.wait()
        call = prepare_chat(engine, [{"role": "user", "content": "Hi"}], max_tokens=2)
        async for _ in arun_deltas(call):
            pass

    scope = SessionScope()
    with agent_run(scope):
        task = asyncio.ensure_future(late_call())  # copies the context: the scope with it
    go.set()
    with pytest.raises(RuntimeError, match="agent run has ended"):
        await task
    assert scope.is_closed and not any(r.startswith("session") for r in engine.core.requests)
