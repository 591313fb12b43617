"""Releasing a thread's OpenMP pool: the workers a torch op started in that thread go away."""

from __future__ import annotations

import os
import threading
import time

import torch

from agentrt.core.openmp import release_openmp_pool


def _threads() -> set[str]:
    return set(os.listdir("/proc/self/task"))


def test_release_frees_the_calling_threads_openmp_workers():
    seen: list[tuple[set[str], set[str], bool]] = []

    def work() -> None:
        torch.set_num_threads(2)
        before = _threads()
        torch.randn(1 << 22).exp_()  # a parallel region: this thread now owns a pool
        workers = _threads() - before
        released = release_openmp_pool()
        deadline = time.monotonic() + 10  # released workers exit right after the call
        while workers & _threads() and time.monotonic() < deadline:
            time.sleep(0.01)
        seen.append((workers, _threads(), released))

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    workers, after, released = seen[0]
    assert released, "torch's libgomp was not found in this process"
    assert workers, "the parallel op started no OpenMP worker"
    assert not workers & after
    torch.randn(1 << 22).exp_()  # the main thread still runs parallel ops afterwards
