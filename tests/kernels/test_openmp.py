"""Releasing a thread's OpenMP pool: the workers a torch op started in that thread go away,
by hand or when that thread submits a request to the engine."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

import torch

from agentrt import SamplingParams
from agentrt.core.openmp import release_openmp_pool


def _threads() -> set[str]:
    return set(os.listdir("/proc/self/task"))


def _in_a_thread(release: Callable[[], object]) -> tuple[set[str], set[str], object]:
    """In a new thread: a parallel torch op, then ``release()``. Returns the op's OpenMP
    workers, the threads alive after the release, and what ``release`` returned."""
    seen: list[tuple[set[str], set[str], object]] = []

    def work() -> None:
        torch.set_num_threads(2)
        before = _threads()
        torch.randn(1 << 22).exp_()  # a parallel region: this thread now owns a pool
        workers = _threads() - before
        released = release()
        deadline = time.monotonic() + 10  # released workers exit right after the call
        while workers & _threads() and time.monotonic() < deadline:
            time.sleep(0.01)
        seen.append((workers, _threads(), released))

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    return seen[0]


def test_release_frees_the_calling_threads_openmp_workers():
    workers, after, released = _in_a_thread(release_openmp_pool)
    assert released, "torch's libgomp was not found in this process"
    assert workers, "the parallel op started no OpenMP worker"
    assert not workers & after
    torch.randn(1 << 22).exp_()  # the main thread still runs parallel ops afterwards


def test_submitting_to_the_engine_frees_the_callers_openmp_workers(engine):
    """A user thread that ran torch (an embedding, a HF model) would otherwise slow every
    parallel region of the engine's driver thread."""
    workers, after, out = _in_a_thread(
        lambda: engine.generate("Hi", SamplingParams(max_tokens=1)))
    assert workers, "the parallel op started no OpenMP worker"
    assert out.token_ids and not workers & after
