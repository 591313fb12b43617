"""500 requests with random interceptions, durations and aborts — aborts while paused and
while swapped out included — leave the device and host pools exactly as they started."""

from __future__ import annotations

import random

from agentrt import Engine, SamplingParams
from agentrt.core.request import Pause, RequestStatus


def test_random_interceptions_and_aborts_leak_nothing(tiny_model):
    rng = random.Random(1234)
    # NOTE: a pool so small that memory binds: preemption, reclaim, swap and discard all happen
    with Engine(tiny_model, dtype="float32", num_blocks=40, block_size=4, host_kv_cache_gb=0.0015,
                max_num_batched_tokens=64, max_num_seqs=16, interception_handling="least-waste",
                scheduling_policy="lamps", profile_on_start=False) as eng:
        core = eng.core
        eng.close()  # drive the core by hand: deterministic and single-threaded
        kv = core.kv
        device0, host0 = kv.pool.num_free, kv.host_pool.num_free
        vocab = core.model_config.vocab_size
        paused: dict[str, int] = {}  # request id -> steps left in its "tool"
        submitted, swapped_aborts, paused_aborts = 0, 0, 0

        def hook(req, tokens):
            if rng.random() < 0.3:
                return Pause(rng.choice(["calculator", "search", "human"]),
                             rng.choice([None, 0.0, 5.0]))
            return None

        while submitted < 500 or core.has_unfinished() or paused:
            for _ in range(rng.randint(0, 3)):
                if submitted < 500:
                    ids = [rng.randrange(vocab) for _ in range(rng.randint(2, 24))]
                    params = SamplingParams(max_tokens=rng.randint(1, 4), ignore_eos=True)
                    core.add_request(ids, params, keep_kv=rng.random() < 0.5, hook=hook)
                    submitted += 1
            for req in core.step():
                if req.request.status is RequestStatus.INTERCEPTED:
                    paused[req.request.request_id] = rng.randint(0, 6)
            for rid in list(paused):
                req = core.requests[rid]
                roll = rng.random()
                if roll < 0.05:
                    swapped_aborts += kv.is_swapped(req)
                    paused_aborts += 1
                    core.abort(rid)
                    del paused[rid]
                elif roll < 0.1 and req.interception.strategy == "preserve":
                    core.move_kv(rid, rng.choice(["discard", "swap"]) if kv.can_swap_out(req)
                                 else "discard")
                elif paused[rid] == 0:
                    del paused[rid]
                    if rng.random() < 0.1:
                        core.release(rid)
                    else:
                        core.resume(rid, [rng.randrange(vocab) for _ in range(rng.randint(1, 6))],
                                    keep_kv=rng.random() < 0.3)
                else:
                    paused[rid] -= 1
            for rid in list(core.requests):  # abort a few running or waiting ones too
                if rid not in paused and rng.random() < 0.005:
                    core.abort(rid)

        s = core.stats.interceptions
        assert s.num_interceptions > 100 and paused_aborts > 5 and swapped_aborts > 0
        assert s.num_swapped_out_tokens > 0 and s.num_swapped_in_tokens > 0
        assert s.num_discard > 0 and s.num_swap > 0 and s.num_preserve > 0
        assert core.stats.num_recomputed_tokens > 0
        assert not core.requests and not core.interceptions.paused
        core.clear_prefix_cache()
        assert kv.pool.num_free == device0 == kv.pool.num_blocks
        assert kv.host_pool.num_free == host0 == kv.host_pool.num_blocks
        assert not kv._swapped
