"""BlockPool reference counts and the RadixCache protocol (match/lock/insert/unlock/evict)."""

from __future__ import annotations

import random

import pytest

from agentrt.kvcache import BlockPool, OutOfBlocksError, RadixCache

PAGE = 4


def test_pool_refcounts_free_exactly_once():
    pool = BlockPool(8, PAGE)
    a = pool.allocate(3)
    pool.incref(a[:1])
    pool.decref(a)
    assert pool.num_free == 7  # a[0] still held once
    pool.decref(a[:1])
    assert pool.num_free == 8
    with pytest.raises(RuntimeError, match="freed twice"):
        pool.decref(a[:1])
    with pytest.raises(OutOfBlocksError):
        pool.allocate(9)


def test_match_insert_split_and_namespaces():
    pool = BlockPool(16, PAGE)
    cache = RadixCache(pool)
    tokens = list(range(12))
    blocks = pool.allocate(3)
    res = cache.insert(tokens, blocks)
    assert res.num_cached_tokens == 0 and pool.ref_count(blocks[0]) == 2
    m = cache.match_prefix(tokens[:8] + [99, 98, 97, 96])  # diverges after two pages: split
    assert m.num_tokens == 8 and m.blocks == blocks[:2]
    assert cache.match_prefix(tokens + [1]).num_tokens == 12
    assert cache.match_prefix(tokens, namespace="other").num_tokens == 0
    assert cache.match_prefix(tokens[:3]).num_tokens == 0  # less than a page
    dup = pool.allocate(3)  # same tokens computed again: the cache keeps its own blocks
    assert cache.insert(tokens, dup).num_cached_tokens == 12
    assert pool.ref_count(dup[0]) == 1


def test_locked_nodes_survive_eviction_lru_order():
    pool = BlockPool(16, PAGE)
    cache = RadixCache(pool)
    a, b = pool.allocate(2), pool.allocate(2)
    cache.insert([1] * 8, a)
    cache.insert([2] * 8, b)
    pool.decref(a + b)  # only the cache holds them now
    m = cache.match_prefix([1] * 8 + [5])
    cache.lock(m.handle)
    assert cache.num_evictable_blocks == 2
    assert cache.evict(4) == 2  # only the unlocked branch goes
    assert cache.match_prefix([2] * 8).num_tokens == 0
    assert cache.match_prefix([1] * 8).num_tokens == 8
    cache.unlock(m.handle)
    assert cache.clear() == 2 and pool.num_free == 16


def test_random_workload_keeps_counts_consistent():
    rng = random.Random(1)
    pool = BlockPool(64, PAGE)
    cache = RadixCache(pool)
    held = []
    for _ in range(300):
        tokens = [rng.randrange(3) for _ in range(PAGE * rng.randint(1, 5))]
        m = cache.match_prefix(tokens)
        cache.lock(m.handle)
        pool.incref(m.blocks)
        need = len(tokens) // PAGE - len(m.blocks)
        if pool.num_free < need:
            cache.evict(need - pool.num_free)
        if pool.num_free < need:
            cache.unlock(m.handle)
            pool.decref(m.blocks)
            continue
        own = m.blocks + pool.allocate(need)
        held.append((tokens, own, m.handle))
        if len(held) > 3 or rng.random() < 0.5:
            t, blocks, handle = held.pop(rng.randrange(len(held)))
            cache.insert(t, blocks)
            cache.unlock(handle)
            pool.decref(blocks)
    for _tokens, blocks, handle in held:
        cache.unlock(handle)
        pool.decref(blocks)
    assert all(n.lock_ref == 0 for n in cache.nodes())
    assert pool.num_free + cache.num_evictable_blocks == 64
    cache.clear()
    assert pool.num_free == 64
