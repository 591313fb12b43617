"""The ``sglang`` backend against ``agentrt serve`` speaking SGLang 0.5.8's native API on
loopback: generate, stream, sessions that prefill only what is appended, abort — and the
same greedy answers as the ``local`` backend on the same token ids."""

from __future__ import annotations

import pytest

from agentrt import RequestOptions, SamplingParams
from agentrt.backends import BackendCapabilities, get_backend

GREEDY = SamplingParams(max_tokens=12)


def _abort_count(metrics: dict[str, float]) -> float:
    return metrics.get("agentrt_requests_finished_total{finish_reason=abort}", 0.0)


def test_capabilities_are_honest(sglang, local):
    assert sglang.capabilities == BackendCapabilities(
        can_pause_in_place=False, keeps_kv_across_calls=True,
        kv_held_between_calls=True,  # agentrt serve says so in /server_info; SGLang does not
        prefix_cache=True)
    assert local.capabilities.can_pause_in_place and local.capabilities.in_process
    with pytest.raises(ValueError, match="unknown backend"):
        get_backend("vllm")


def test_generate_equals_local_greedy(sglang, local, prompt_ids):
    remote = sglang.generate(prompt_ids, GREEDY)
    here = local.generate(prompt_ids, GREEDY)
    assert remote.token_ids == here.token_ids and len(remote.token_ids) > 0
    assert remote.text == here.text and remote.finish_reason == here.finish_reason
    assert remote.num_prompt_tokens == len(prompt_ids)


def test_stop_string_and_matched_stop(sglang, local, prompt_ids):
    params = SamplingParams(max_tokens=16, stop=(",",))
    remote, here = sglang.generate(prompt_ids, params), local.generate(prompt_ids, params)
    assert (remote.text, remote.token_ids) == (here.text, here.token_ids)
    assert remote.finish_reason == "stop" and remote.matched_stop == "," == here.matched_stop
    assert "," not in remote.text


def test_stream_chunks_add_up_to_generate(sglang, prompt_ids):
    chunks = list(sglang.stream(prompt_ids, GREEDY,
                                options=RequestOptions(request_id="stream-1")))
    whole = sglang.generate(prompt_ids, GREEDY)
    assert len(chunks) > 1 and all(c.request_id == "stream-1" for c in chunks)
    assert [c.finished for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert sum((c.token_ids for c in chunks), []) == whole.token_ids
    assert "".join(c.text for c in chunks) == whole.text


def test_session_calls_prefill_only_the_appended_tokens(sglang, local, tokenizer, prompt_ids):
    turns = [prompt_ids] + [tokenizer.encode(t, add_special_tokens=False) for t in
                            ("\nAnd three more?", "\nWhich one is your favourite?")]
    params = SamplingParams(max_tokens=8)
    remote_sid, local_sid = sglang.open_session(), local.open_session()
    context: list[int] = []
    try:
        for i, appended in enumerate(turns):
            out = sglang.generate(appended, params, session_id=remote_sid)
            context += appended
            assert out.num_prompt_tokens == len(context)
            if i:  # the context is held: only the appended tokens (+ the last output) computed
                assert out.num_cached_tokens >= len(context) - len(appended) - 1
            fresh = sglang.generate(context, params)  # the same context, from scratch
            assert out.token_ids == fresh.token_ids and out.text == fresh.text
            mine = local.generate(appended, params, session_id=local_sid)
            assert mine.token_ids == out.token_ids and mine.num_prompt_tokens == len(context)
            context += out.token_ids
    finally:
        sglang.close_session(remote_sid)
        local.close_session(local_sid)


def test_abort_mid_stream_frees_the_kv(sglang, sglang_server, prompt_ids):
    before = sglang_server.wait_until_idle()
    # NOTE: a budget no run can use up before the abort lands (independent of machine speed)
    params = SamplingParams(max_tokens=512, ignore_eos=True)
    chunks = []
    for chunk in sglang.stream(prompt_ids, params,
                                options=RequestOptions(request_id="to-abort")):
        chunks.append(chunk)
        if len(chunks) == 1:
            sglang.abort("to-abort")
    assert chunks[-1].finished and chunks[-1].finish_reason == "abort"
    assert sum(len(c.token_ids) for c in chunks) < 512
    after = sglang_server.wait_until_idle()
    assert after["agentrt_num_requests_running"] == 0
    assert after["agentrt_kv_free_blocks"] + after["agentrt_kv_evictable_blocks"] \
        == after["agentrt_kv_total_blocks"]
    assert _abort_count(after) - _abort_count(before) == 1


def test_closing_a_stream_aborts_its_request(sglang, sglang_server, prompt_ids):
    before = sglang_server.wait_until_idle()
    stream = sglang.stream(prompt_ids, SamplingParams(max_tokens=512, ignore_eos=True))
    assert next(stream).token_ids
    stream.close()
    after = sglang_server.wait_until_idle()
    assert after["agentrt_kv_free_blocks"] + after["agentrt_kv_evictable_blocks"] \
        == after["agentrt_kv_total_blocks"]
    assert _abort_count(after) - _abort_count(before) == 1


def test_closing_a_session_frees_its_held_kv(sglang, sglang_server, prompt_ids):
    sglang_server.wait_until_idle()
    sid = sglang.open_session()
    sglang.generate(prompt_ids, SamplingParams(max_tokens=4), session_id=sid)
    held = sglang_server.metrics()
    assert held["agentrt_kv_free_blocks"] + held["agentrt_kv_evictable_blocks"] \
        < held["agentrt_kv_total_blocks"]  # paused between calls, its KV kept
    sglang.close_session(sid)
    after = sglang_server.wait_until_idle()
    assert after["agentrt_kv_free_blocks"] + after["agentrt_kv_evictable_blocks"] \
        == after["agentrt_kv_total_blocks"]


async def test_async_twins(sglang_server, local, prompt_ids):
    async with get_backend("sglang", url=sglang_server.url, timeout=120) as backend:
        whole = await backend.agenerate(prompt_ids, GREEDY)
        chunks = [c async for c in backend.astream(prompt_ids, GREEDY)]
        sid = await backend.aopen_session()
        first = await backend.agenerate(prompt_ids, SamplingParams(max_tokens=4),
                                        session_id=sid)
        second = await backend.agenerate([198], SamplingParams(max_tokens=4), session_id=sid)
        await backend.aclose_session(sid)
    assert whole.token_ids == local.generate(prompt_ids, GREEDY).token_ids
    assert sum((c.token_ids for c in chunks), []) == whole.token_ids
    assert second.num_prompt_tokens == len(prompt_ids) + len(first.token_ids) + 1
    assert second.num_cached_tokens >= second.num_prompt_tokens - 2


def test_errors_and_unknown_sessions(sglang, prompt_ids):
    from agentrt.backends.sglang import SGLangError

    with pytest.raises(ValueError, match="unknown session"):
        sglang.generate(prompt_ids, GREEDY, session_id="nope")
    with pytest.raises(SGLangError, match="context") as info:
        sglang.generate([1] * 9000, GREEDY)
    assert info.value.status_code == 400


def test_keep_rolls_a_session_back_with_offset(sglang, local, prompt_ids, tokenizer):
    """A session call that keeps less than the held context (a seam rolled back) continues
    the last request at ``session_params.offset``: the same tokens as the local backend's
    truncated request and as a fresh call on that context."""
    params = SamplingParams(max_tokens=4)
    appended = tokenizer.encode(" Why?", add_special_tokens=False)
    outs = []
    for backend in (sglang, local):
        sid = backend.open_session()
        try:
            backend.generate(prompt_ids, params, session_id=sid)
            outs.append(backend.generate(appended, params, session_id=sid,
                                         keep=len(prompt_ids)))
        finally:
            backend.close_session(sid)
    context = prompt_ids + appended  # the first call's output rolled back
    remote, here = outs
    assert remote.num_prompt_tokens == len(context) == here.num_prompt_tokens
    assert remote.num_cached_tokens >= len(prompt_ids) - 1  # the kept part was not recomputed
    assert remote.token_ids == here.token_ids == sglang.generate(context, params).token_ids


def test_a_namespace_travels_as_extra_key_and_keeps_prefixes_apart(sglang, tokenizer):
    text = ("Namespaces keep one tenant's cached prefixes from another's. " * 6).strip()
    ids = tokenizer.encode(text, add_special_tokens=False)
    params = SamplingParams(max_tokens=2)

    def cached(namespace: str) -> int:
        return sglang.generate(ids, params,
                               options=RequestOptions(namespace=namespace)).num_cached_tokens

    assert cached("tenant-a") == 0  # a prompt no request sent before
    assert cached("tenant-b") == 0  # the same prompt, another namespace: nothing shared
    assert cached("tenant-a") >= len(ids) // 2  # its own namespace: the prefix is reused
