"""Cancellation frees everything, including what a batch had already paused (audit H50).

A request that ends its segment with its KV kept (``keep_kv=True``, or a hook that pauses it)
is paused until its caller resumes or releases it. When the caller of a batch is cancelled
(``task.cancel``, ``asyncio.wait_for``'s timeout, Ctrl-C in ``generate``) it never sees the
ids of the requests already paused: those must be freed with the rest, not held forever.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time

import pytest

from agentrt import Engine, SamplingParams
from agentrt.core.request import RequestStatus

PARAMS = SamplingParams(max_tokens=40, ignore_eos=True)
FIRST, SECOND = "Hi", "Once upon a time, in a land far away,"


def _settled(engine: Engine, timeout: float = 30.0) -> None:
    """Wait until no request is left in the engine (an abort lands between two steps)."""
    deadline = time.monotonic() + timeout
    while engine.core.requests and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not engine.core.requests, f"requests left in the engine: {list(engine.core.requests)}"


def _any_paused(engine: Engine) -> bool:
    with engine._lock:
        return any(r.status is RequestStatus.INTERCEPTED for r in engine.core.requests.values())


class _PauseFirst:
    """A hook that pauses the batch's first request (the shorter prompt) at its first token;
    ``then`` runs in the second request's hook once the first has paused."""

    def __init__(self, engine: Engine, then=None) -> None:
        self.first_len = len(engine.encode(FIRST))
        self.engine, self.then = engine, then

    def __call__(self, request, new_tokens):
        if request.segment_start == self.first_len:
            return "pause"
        if self.then is not None and any(r.status is RequestStatus.INTERCEPTED
                                         for r in self.engine.core.requests.values()):
            self.then()
        return None


async def _until_first_answered(engine: Engine) -> None:
    """Wait until the first request has paused and its caller's task has read its output
    (one ``Engine._aoutput`` task is left: the second request's)."""
    def outputs_read() -> int:
        return sum(t.get_coro().__qualname__ == "Engine._aoutput" for t in asyncio.all_tasks())

    while not _any_paused(engine) or outputs_read() != 1:
        await asyncio.sleep(0.005)


@pytest.mark.parametrize("keep_kv", [True, False], ids=["keep_kv", "hook-pause"])
async def test_a_cancelled_batch_frees_the_requests_it_paused(engine, keep_kv):
    """``agenerate([a, b])`` cancelled once ``a`` has paused: before, ``a`` stayed paused with
    its KV for the engine's life (its id never reached the caller)."""
    task = asyncio.create_task(engine.agenerate([FIRST, SECOND], PARAMS, keep_kv=keep_kv,
                                                hook=_PauseFirst(engine)))
    await _until_first_answered(engine)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    _settled(engine)


async def test_a_timed_out_batch_frees_the_requests_it_paused(engine):
    async def timed_out_once_paused():
        batch = asyncio.ensure_future(engine.agenerate([FIRST, SECOND], PARAMS, keep_kv=True,
                                                       hook=_PauseFirst(engine)))
        await _until_first_answered(engine)
        await asyncio.wait_for(batch, 0.001)

    with pytest.raises(TimeoutError):
        await timed_out_once_paused()
    _settled(engine)


def test_an_interrupted_batch_frees_the_requests_it_paused(engine):
    """``generate([a, b], keep_kv=True)`` interrupted (Ctrl-C) after ``a`` paused: before,
    only ``b`` was aborted and ``a`` held its KV for the engine's life."""
    raised, main = threading.Event(), threading.main_thread().ident

    def handler(signum, frame):
        raised.set()
        raise KeyboardInterrupt

    def interrupt() -> None:
        if not raised.is_set():
            signal.pthread_kill(main, signal.SIGUSR1)
            raised.wait(10)

    previous = signal.signal(signal.SIGUSR1, handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            engine.generate([FIRST, SECOND], PARAMS, keep_kv=True,
                            hook=_PauseFirst(engine, then=interrupt))
    finally:
        signal.signal(signal.SIGUSR1, previous)
    _settled(engine)


# --- under KV pressure (the tiny model: bookkeeping, not outputs) ----------------------------
async def _agent(eng: Engine, i: int, prompt: list[int], appended: list[int]) -> str:
    """Pause for a tool, then leave the resumed segment one way (by ``i % 6``)."""
    from agentrt.core.request import Pause

    params = SamplingParams(max_tokens=6, ignore_eos=True)
    out = await eng.agenerate(prompt, params, keep_kv=True, pause=Pause("tool", 0.5 * (i % 3)))
    rid, mode = out.request_id, i % 6
    if mode == 1:  # break out of an async for (no aclose: the generator is dropped)
        async for _ in eng.aresume_stream(rid, appended, params, keep_kv=False):
            break
    elif mode == 2:  # cancel the task of an aresume once its segment has started
        req = eng.core.requests[rid]
        paused_len = req.num_tokens
        task = asyncio.ensure_future(eng.aresume(rid, appended, params, keep_kv=True))
        while req.num_tokens == paused_len:  # until the resume has appended its tokens
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    elif mode == 3:  # asyncio.wait_for's timeout on an async stream's segment
        async def first_then_wait():
            async for _ in eng.aresume_stream(rid, appended, params, keep_kv=True):
                await asyncio.Event().wait()  # the caller waits for something that never comes

        with pytest.raises(TimeoutError):
            await asyncio.wait_for(first_then_wait(), 0.05)
    elif mode == 4:  # abort while paused (its KV preserved, swapped or discarded)
        eng.abort(rid)
    elif mode == 5:  # aclose a stream early, then release the paused one
        deltas = eng.astream(prompt, params)
        await deltas.__anext__()
        await deltas.aclose()
        eng.release(rid)
    else:
        await eng.aresume(rid, appended, params, keep_kv=False)
    return rid


async def test_every_way_of_leaving_frees_everything_under_kv_pressure(tiny_model):
    """24 agents on 24 pages of 4 tokens: paused KV is swapped and discarded, requests are
    preempted; each leaves by finishing, breaking out of ``async for``, ``task.cancel()``,
    ``wait_for``'s timeout, ``abort`` while paused or ``aclose``. Afterwards both pools are
    whole."""
    import gc
    import random

    rng = random.Random(0)
    with Engine(tiny_model, dtype="float32", num_blocks=24, block_size=4,
                host_kv_cache_gb=0.0003, max_num_batched_tokens=32, max_num_seqs=8,
                profile_on_start=False) as eng:
        vocab = eng.model_info.vocab_size
        prompts = [[rng.randrange(vocab) for _ in range(rng.randint(8, 30))] for _ in range(24)]
        appended = [[rng.randrange(vocab) for _ in range(rng.randint(2, 8))] for _ in range(24)]
        await asyncio.gather(*(_agent(eng, i, prompts[i], appended[i]) for i in range(24)))
        gc.collect()  # NOTE: a dropped async generator is closed by the loop's finalizer
        deadline = time.monotonic() + 30
        while eng.core.requests and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert not eng.core.requests
        s = eng.stats
        assert s.interceptions.num_swap + s.interceptions.num_discard > 0
        assert s.num_preemptions > 0
        eng.clear_prefix_cache()
        load = eng.load()
        assert load.num_free_blocks == load.num_total_blocks and load.num_paused == 0
        assert load.num_free_host_blocks == load.num_total_host_blocks > 0


def test_load_shows_paused_requests_and_the_host_pool(tiny_model):
    """Paused requests hold KV while neither running nor waiting: ``load()`` counts them, and
    the host pool their KV may be swapped to (before: neither was visible, so a user could not
    tell what held the pool, nor check the host pool for leaks)."""
    with Engine(tiny_model, dtype="float32", num_blocks=16, block_size=4,
                host_kv_cache_gb=0.0003, profile_on_start=False) as eng:
        out = eng.generate([5, 6, 7, 8, 9, 10], SamplingParams(max_tokens=3), keep_kv=True)
        load = eng.load()
        assert (load.num_running, load.num_waiting, load.num_paused) == (0, 0, 1)
        assert load.kv_usage > 0
        with eng._lock:
            eng.core.move_kv(out.request_id, "swap")
        load = eng.load()
        assert 0 < load.num_free_host_blocks < load.num_total_host_blocks
        eng.release(out.request_id)
        load = eng.load()
        assert load.num_paused == 0 and load.num_free_host_blocks == load.num_total_host_blocks


@pytest.mark.parametrize("victim", ["sibling", "itself"])
@pytest.mark.parametrize("keep_kv", [True, False])
def test_a_hook_that_aborts_a_request_of_its_step_leaves_no_ghost(tiny_model, victim, keep_kv):
    """First-answer-wins agents: the hook of request ``a`` aborts ``b`` (or ``a`` itself)
    through the engine while both sample in the same step. Before, the aborted request was
    then finished a second time: with ``keep_kv`` it stayed paused in the interception
    manager although gone from the engine (``num_paused`` never fell back to 0), without it
    it was counted finished twice."""
    from agentrt.config import EngineConfig
    from agentrt.engine.llm_engine import LLMEngine

    core = LLMEngine(EngineConfig(model=tiny_model, dtype="float32", num_blocks=32,
                                  block_size=4, profile_on_start=False))
    target = "b" if victim == "sibling" else "a"
    core.add_request([5, 6, 7], SamplingParams(max_tokens=1), request_id="a", keep_kv=keep_kv,
                     hook=lambda req, tokens: core.abort(target))
    core.add_request([8, 9, 10], SamplingParams(max_tokens=1), request_id="b", keep_kv=keep_kv)
    updates = {u.request.request_id: u for u in core.step()}
    assert target not in core.requests and target not in core.interceptions.paused
    if target in updates:
        assert updates[target].finished and updates[target].delta.finish_reason == "abort"
    assert core.stats.num_aborted == 1
    assert core.stats.num_finished == 1 + (not keep_kv)  # the other one ends (or pauses)
