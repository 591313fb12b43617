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
