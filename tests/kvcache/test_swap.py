"""A paused request swapped to the host pool and back resumes with identical tokens."""

from __future__ import annotations

import pytest

from agentrt import Engine, SamplingParams


def test_swap_out_and_in_preserves_generation(engine, chat):
    prompt = chat("Name three animals.")
    params = SamplingParams(max_tokens=10)
    cont = SamplingParams(max_tokens=8)
    # NOTE: "preserve" so that no policy moves the KV behind the test's back
    with Engine(dtype="float32", num_blocks=64, host_kv_cache_gb=0.05,
                enable_prefix_cache=False, interception_handling="preserve",
                profile_on_start=False) as eng:
        first = eng.generate(prompt, params, keep_kv=True)
        ref = eng.generate(prompt, params, keep_kv=True)
        core = eng.core
        with eng._lock:
            req = core.requests[first.request_id]
            host_free = core.kv.host_pool.num_free
            core.kv.swap_out(req)
            assert core.kv.is_swapped(req) and not req.block_table
            with pytest.raises(RuntimeError, match="already swapped"):
                core.kv.swap_out(req)
            assert core.kv.swap_in(req)
            assert core.kv.host_pool.num_free == host_free
        a = eng.resume(first.request_id, " And", cont, keep_kv=False)
        b = eng.resume(ref.request_id, " And", cont, keep_kv=False)
        assert a.token_ids == b.token_ids and a.num_prefill_tokens == b.num_prefill_tokens
        assert core.kv.pool.num_free == core.kv.pool.num_blocks
