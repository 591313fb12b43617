"""Agents paused and resumed on a pool that cannot hold them decode as they do alone (H50).

Twenty scripted agents (prompt, then segments each resumed with appended tokens, some rolled
back with ``truncate_to`` first) run interleaved on a 20-page engine under each interception
handling and scheduling policy, their paused KV also moved by hand: every agent's tokens must
equal those of the same script run alone on a 512-page engine, and both pools end whole.
The tiny random model keeps this cheap; greedy tokens still change if any KV page is wrong.
"""

from __future__ import annotations

import random

import pytest

from agentrt import SamplingParams
from agentrt.config import EngineConfig
from agentrt.core.request import Pause, RequestStatus
from agentrt.engine.llm_engine import LLMEngine

Segment = tuple[int, list[int], bool]  # max_tokens, tokens appended after it, roll back first
Script = tuple[list[int], list[Segment]]


def _scripts(rng: random.Random, vocab: int) -> list[Script]:
    def ids(lo: int, hi: int) -> list[int]:
        return [rng.randrange(vocab) for _ in range(rng.randint(lo, hi))]

    return [(ids(4, 30), [(rng.randint(1, 6), ids(1, 6), rng.random() < 0.3)
                          for _ in range(rng.randint(1, 3))]) for _ in range(20)]


def _engine(model: str, num_blocks: int, **options) -> LLMEngine:
    return LLMEngine(EngineConfig(model=model, dtype="float32", num_blocks=num_blocks,
                                  block_size=4, max_num_batched_tokens=32, max_num_seqs=8,
                                  profile_on_start=False, **options))


def _run(core: LLMEngine, scripts: list[Script], rng: random.Random | None) -> dict[int, list]:
    """Every script's tokens; ``rng`` None: one agent at a time, else interleaved at random
    (paused KV sometimes moved by hand)."""
    out: dict[int, list[int]] = {}
    segment: dict[int, int] = {}
    pending = list(range(len(scripts)))
    while pending or segment:
        if pending and (rng is None and not segment or rng is not None and rng.random() < 0.5):
            i = pending.pop(0)
            max_tokens = scripts[i][1][0][0]
            core.add_request(scripts[i][0], SamplingParams(max_tokens=max_tokens, ignore_eos=True),
                             keep_kv=True, request_id=f"a{i}", pause=Pause("tool", 0.01 * i))
            segment[i] = 0
        core.step()
        for i in list(segment):
            req = core.requests[f"a{i}"]
            if req.status is not RequestStatus.INTERCEPTED or rng and rng.random() < 0.5:
                continue
            if rng and req.interception.strategy == "preserve" and rng.random() < 0.2:
                core.move_kv(req.request_id, "swap" if core.kv.can_swap_out(req) else "discard")
            segs, k = scripts[i][1], segment[i]
            if k + 1 == len(segs):
                out[i] = list(req.token_ids)
                core.release(req.request_id)
                del segment[i]
                continue
            _, appended, roll_back = segs[k]
            core.resume(req.request_id, appended,
                        SamplingParams(max_tokens=segs[k + 1][0], ignore_eos=True),
                        truncate_to=max(1, req.num_tokens - 3) if roll_back else None)
            segment[i] = k + 1
    return out


@pytest.fixture(scope="module")
def alone(tiny_model) -> tuple[list[Script], dict[int, list[int]]]:
    scripts = _scripts(random.Random(7), 49152)
    return scripts, _run(_engine(tiny_model, 512, interception_handling="preserve"), scripts,
                         None)


@pytest.mark.parametrize(("handling", "policy"), [
    ("least-waste", "lamps"), ("swap", "fcfs"), ("discard", "arrival")])
def test_interleaved_agents_on_a_small_pool_decode_as_alone(tiny_model, alone, handling, policy):
    scripts, want = alone
    core = _engine(tiny_model, 20, host_kv_cache_gb=0.0005, interception_handling=handling,
                   scheduling_policy=policy)
    got = _run(core, scripts, random.Random(2))
    assert got == want
    assert core.stats.num_preemptions > 0
    moved = core.stats.interceptions
    assert moved.num_swap + moved.num_discard > 0
    assert not core.requests
    core.clear_prefix_cache()
    assert core.kv.pool.num_free == core.kv.pool.num_blocks
    assert core.kv.host_pool.num_free == core.kv.host_pool.num_blocks
