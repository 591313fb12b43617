"""A paused request resumes with exactly the greedy tokens of an uninterrupted run, whatever
happened to its KV meanwhile: preserved, discarded (prefix kept or evicted) or swapped."""

from __future__ import annotations

import itertools

import pytest

from agentrt import Engine, SamplingParams
from agentrt.intercept import get_handling

FIRST = SamplingParams(max_tokens=10)
CONT = SamplingParams(max_tokens=10)
_ns = itertools.count()


@pytest.fixture
def preserve_only(engine):
    """Pin the session engine's handling to "preserve" so only the test moves KV."""
    core = engine.core
    with engine._lock:
        saved, core.interceptions.handling = core.interceptions.handling, get_handling("preserve")
    yield engine
    with engine._lock:
        core.interceptions.handling = saved


def interrupted_and_fresh(eng: Engine, prompt: str, move) -> tuple:
    """Pause after FIRST, let ``move`` act on the paused request, resume; and the same
    context run from scratch in a fresh namespace."""
    tok = eng.tokenizer
    first = eng.generate(prompt, FIRST, keep_kv=True, namespace=f"strategy-{next(_ns)}")
    assert first.is_paused
    with eng._lock:
        move(eng.core, first.request_id)
    appended = tok.encode(" Also, in one word:", add_special_tokens=False)
    cont = eng.resume(first.request_id, appended, CONT, keep_kv=False)
    context = tok.encode(prompt, add_special_tokens=False) + first.token_ids + appended
    fresh = eng.generate(context, CONT, namespace=f"fresh-{next(_ns)}")
    assert fresh.num_cached_tokens == 0
    return first, cont, fresh


def computed_at_pause(first) -> int:
    return first.prompt_len + len(first.token_ids) - 1  # the last sampled token has no KV yet


def test_preserve(preserve_only, chat):
    first, cont, fresh = interrupted_and_fresh(preserve_only, chat("Name a fruit."),
                                               lambda core, rid: None)
    assert cont.token_ids == fresh.token_ids
    assert cont.stats.strategies == ["preserve"] and cont.stats.num_recomputed_tokens == 0
    appended = cont.prompt_len - first.prompt_len - len(first.token_ids)
    assert cont.num_prefill_tokens == appended + 1  # plus the last sampled token


def test_discard_with_prefix_kept(preserve_only, chat):
    first, cont, fresh = interrupted_and_fresh(
        preserve_only, chat("Name a colour."), lambda core, rid: core.move_kv(rid, "discard"))
    assert cont.token_ids == fresh.token_ids
    assert cont.stats.strategies == ["discard"]
    computed, page = computed_at_pause(first), preserve_only.config.block_size
    # the full pages survived in the prefix cache: only the partial last page is recomputed
    assert cont.stats.num_recomputed_tokens == computed % page
    assert cont.stats.num_cached_tokens == first.stats.num_cached_tokens + computed // page * page


def test_discard_with_prefix_evicted(preserve_only, chat):
    def discard_and_evict(core, rid):
        core.move_kv(rid, "discard")
        assert core.clear_prefix_cache() > 0

    first, cont, fresh = interrupted_and_fresh(preserve_only, chat("Name a tree."),
                                               discard_and_evict)
    assert cont.token_ids == fresh.token_ids
    assert cont.stats.strategies == ["discard"]
    assert cont.stats.num_recomputed_tokens == computed_at_pause(first)


def test_swap(chat):
    with Engine(dtype="float32", num_blocks=64, host_kv_cache_gb=0.05,
                interception_handling="preserve", profile_on_start=False) as eng:
        pool = eng.core.kv.pool

        def swap_out(core, rid):
            used = pool.num_blocks - pool.num_free
            core.move_kv(rid, "swap")
            assert core.kv.is_swapped(core.requests[rid])
            assert pool.num_blocks - pool.num_free < used  # its blocks left the device

        first, cont, fresh = interrupted_and_fresh(eng, chat("Name a bird."), swap_out)
        assert cont.token_ids == fresh.token_ids
        assert cont.stats.strategies == ["swap"] and cont.stats.num_recomputed_tokens == 0
        page = eng.config.block_size
        pages = -(-computed_at_pause(first) // page)
        assert cont.stats.num_swapped_tokens == 2 * pages * page  # out and in, whole pages
        assert eng.core.kv.host_pool.num_free == eng.core.kv.host_pool.num_blocks


def test_pause_kind_and_expected_duration_reach_the_policy(preserve_only, chat):
    """A segment declared as waiting for a tool carries its kind; on resume the observed
    duration feeds that kind's estimate, and the interception shows in the stats."""
    from agentrt import Pause

    eng = preserve_only
    first = eng.generate(chat("Name a river."), SamplingParams(max_tokens=4),
                         pause=Pause("calculator", 0.001))
    assert first.is_paused
    req = eng.core.requests[first.request_id]
    assert (req.interception.kind, req.interception.expected_duration) == ("calculator", 0.001)
    eng.set_interception(first.request_id, "search", 0.5)
    assert req.interception.kind == "search"
    estimator = eng.core.interceptions.estimator
    seen = estimator.num_observed("search")
    cont = eng.resume(first.request_id, " and", SamplingParams(max_tokens=2), keep_kv=False)
    assert estimator.num_observed("search") == seen + 1
    assert cont.stats.num_interceptions == 1 and cont.stats.intercepted_seconds > 0
