"""200 random requests with stops and aborts anywhere leave the KV pool as it started."""

from __future__ import annotations

import random

from agentrt import SamplingParams
from agentrt.core.request import RequestStatus


def test_random_requests_and_aborts_free_everything(engine, tokenizer, long_text):
    core = engine.core
    vocab_text = tokenizer.encode(long_text, add_special_tokens=False)
    rng = random.Random(0)
    with engine._lock:  # drive the synchronous core directly, deterministically
        total = core.kv.pool.num_blocks
        core.clear_prefix_cache()
        assert core.kv.pool.num_free == total
        budget = core.scheduler.max_num_batched_tokens
        core.scheduler.max_num_batched_tokens = 40  # longer prompts prefill in several chunks
        try:
            aborted = _run(core, vocab_text, rng)
        finally:
            core.scheduler.max_num_batched_tokens = budget
        assert aborted["prefill"] > 0 and aborted["decode"] > 0 and aborted["waiting"] > 0
        assert not core.requests and not core.scheduler.has_work()
        assert all(n.lock_ref == 0 for n in core.kv.cache.nodes())
        assert core.kv.pool.num_free + core.kv.cache.num_evictable_blocks == total
        core.clear_prefix_cache()
        assert core.kv.pool.num_free == total


def _run(core, corpus: list[int], rng: random.Random) -> dict[str, int]:
    aborted = {"prefill": 0, "decode": 0, "waiting": 0}
    pending, started = 200, 0
    while pending or core.has_unfinished():
        for _ in range(rng.randint(0, 4) if pending else 0):
            start = rng.randrange(len(corpus) - 200)
            ids = corpus[start : start + rng.randint(1, 90)]
            stop = (rng.choice(["the", "and", ".", "\n"]),) if rng.random() < 0.5 else ()
            core.add_request(ids, SamplingParams(max_tokens=rng.randint(1, 6), stop=stop))
            pending, started = pending - 1, started + 1
        for req in list(core.requests.values()):
            if rng.random() < 0.04:
                kind = ("waiting" if req.status is RequestStatus.WAITING else
                        "prefill" if req.num_computed_tokens < req.segment_start else "decode")
                core.abort(req.request_id)
                aborted[kind] += 1
        core.step()
    return aborted
