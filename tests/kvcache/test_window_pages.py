"""A windowed model's pages: released behind the window (at most ceil(W / page) + 1 held),
prefix hits, swap and rollback stay correct with released table entries."""

from __future__ import annotations

import math

import torch

from agentrt.core.kv_tensors import KVCacheTensors
from agentrt.core.request import Request
from agentrt.core.sampling_params import SamplingParams
from agentrt.kvcache.manager import KVCacheManager

PAGE, W = 4, 8
BOUND = math.ceil(W / PAGE) + 1


def manager(pages: int = 32, host: int = 0) -> KVCacheManager:
    dev = KVCacheTensors.allocate(1, pages, PAGE, 1, 2, torch.float32)
    dev.k.normal_()
    hosted = KVCacheTensors.allocate(1, host, PAGE, 1, 2, torch.float32) if host else None
    return KVCacheManager(dev, hosted, window=W)


def run(kv: KVCacheManager, req: Request, chunk: int) -> None:
    """Compute ``req``'s pending tokens ``chunk`` at a time, checking the bound each step."""
    while req.num_computed_tokens < req.num_tokens:
        n = min(chunk, req.num_tokens - req.num_computed_tokens)
        assert kv.allocate(req, n)
        first = req.num_computed_tokens - W + 1  # the oldest key the chunk's queries see
        held = [i for i, b in enumerate(req.block_table) if b != kv.null_block]
        assert held[0] <= max(0, first) // PAGE  # every key still seen is held
        if n == 1:
            assert len(held) <= BOUND
        req.num_computed_tokens += n


def test_a_long_sequence_holds_at_most_its_window_s_pages():
    kv = manager()
    free = kv.pool.num_free
    req = Request("r", list(range(10)), SamplingParams())
    run(kv, req, 4)
    for t in range(40):  # decode
        req.token_ids.append(1000 + t)
        run(kv, req, 1)
    assert len(req.block_table) == math.ceil(50 / PAGE)  # aligned with positions
    assert len(kv.held_blocks(req)) <= BOUND
    kv.free(req)
    assert kv.pool.num_free == free  # nothing leaked, nothing cached past a released page


def test_a_prefix_hit_is_served_by_the_cache_s_pages_and_released_behind_the_window():
    kv = manager()
    a = Request("a", list(range(12)), SamplingParams())
    run(kv, a, 12)  # one chunk: nothing released yet
    kv.free(a)  # its three pages go to the prefix cache
    b = Request("b", list(range(22)), SamplingParams())
    assert kv.match_prefix(b) == 12
    cached = list(b.block_table)
    run(kv, b, 4)
    assert b.block_table[:2] == [kv.null_block] * 2  # behind b's window: its refs dropped
    assert all(kv.pool.ref_count(p) >= 1 for p in cached)  # the cache still holds them
    assert kv.match_prefix(Request("c", list(range(13)), SamplingParams())) == 12


def test_swap_out_and_in_moves_only_held_pages_and_keeps_the_table_aligned():
    kv = manager(host=8)
    req = Request("r", list(range(30)), SamplingParams())
    run(kv, req, 4)
    table = list(req.block_table)
    held = kv.held_blocks(req)
    before = kv.device.k[:, held].clone()
    kv.swap_out(req)
    assert kv.num_swapped_blocks(req) == len(held) <= BOUND
    assert req.block_table == []
    assert kv.swap_in(req)
    assert len(req.block_table) == len(table)
    assert req.block_table[: len(table) - len(held)] == [kv.null_block] * (len(table) - len(held))
    assert torch.equal(kv.device.k[:, kv.held_blocks(req)], before)


def test_a_rollback_into_the_released_window_recomputes_from_the_start():
    kv = manager()
    req = Request("r", list(range(30)), SamplingParams())
    run(kv, req, 4)
    assert kv.truncate(req, 6, max_computed=6)  # tokens 0..5: their pages were released
    assert req.num_computed_tokens == 0 and req.block_table == []
    req2 = Request("s", list(range(30)), SamplingParams())
    run(kv, req2, 4)
    assert kv.truncate(req2, 27, max_computed=27)  # its window is still held: kept
    assert req2.num_computed_tokens == 27
