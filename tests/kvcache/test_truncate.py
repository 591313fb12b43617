"""KVCacheManager.truncate: a paused request rolled back to an earlier point (a seam)."""

from __future__ import annotations

import torch

from agentrt.core.kv_tensors import KVCacheTensors
from agentrt.core.request import Request
from agentrt.core.sampling_params import SamplingParams
from agentrt.kvcache.manager import KVCacheManager

PAGE = 4


def _manager_and_request(num_tokens: int) -> tuple[KVCacheManager, Request]:
    kv = KVCacheManager(KVCacheTensors.allocate(1, 8, PAGE, 1, 2, torch.float32))
    req = Request("r", list(range(num_tokens)), SamplingParams())
    assert kv.allocate(req, num_tokens)
    req.num_computed_tokens = num_tokens
    return kv, req


def test_plain_resume_rolls_nothing_back():
    kv, req = _manager_and_request(10)
    assert not kv.truncate(req, 10, max_computed=10)
    assert req.num_computed_tokens == 10 and len(req.block_table) == 3


def test_rollback_frees_the_pages_past_the_kept_kv():
    kv, req = _manager_and_request(10)
    free = kv.pool.num_free
    assert kv.truncate(req, 5, max_computed=9)
    assert req.token_ids == [0, 1, 2, 3, 4] and req.num_computed_tokens == 5
    assert len(req.block_table) == 2 and kv.pool.num_free == free + 1
    assert req.recompute_until == 0


def test_max_computed_leaves_tokens_to_compute():
    kv, req = _manager_and_request(8)
    assert kv.truncate(req, 8, max_computed=7)  # the next step must compute a token
    assert req.num_tokens == 8 and req.num_computed_tokens == 7 and len(req.block_table) == 2


def test_a_shared_page_is_never_written_again():
    kv, req = _manager_and_request(10)
    kv.pool.incref([req.block_table[1]])  # page 1 (tokens 4..7) is shared, e.g. cached
    assert kv.truncate(req, 6, max_computed=6)
    # tokens 4 and 5 would land in the shared page: the kept KV stops at its boundary
    assert req.num_computed_tokens == 4 and len(req.block_table) == 1
    assert req.token_ids == list(range(6))
