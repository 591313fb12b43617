"""Free the calling thread's OpenMP worker pool, so the engine's thread keeps fast wake-ups.

libgomp gives every thread that starts a parallel region its own pool of worker threads,
kept until that thread exits. Once the pools of all threads together hold more threads than
the machine has CPUs, libgomp cuts its spin-wait from ~300,000 iterations to 100, so every
parallel region (each of the hundreds of torch ops in a decode step) waits on a futex to wake
its workers. On a 2-core machine, one torch op in the caller's thread (loading the model,
embedding a query in a worker thread) was enough to make the engine thread's decode step
~40% slower. ``omp_pause_resource_all`` (OpenMP 5.0) frees the calling thread's pool; the
next parallel region in that thread simply makes a new one.
"""

from __future__ import annotations

import ctypes
import functools
import sys

__all__ = ["release_openmp_pool"]

_OMP_PAUSE_SOFT = 1


def release_openmp_pool() -> bool:
    """Free the OpenMP worker threads the calling thread owns, in every libgomp loaded (torch
    ships its own; faiss and others may load the system's). False when none is loaded (another
    OpenMP runtime, or not Linux) or none has OpenMP 5.0's pause call."""
    results = [pause(_OMP_PAUSE_SOFT) == 0 for pause in _pause_functions()]
    return bool(results) and all(results)


def _pause_functions() -> list:
    """``omp_pause_resource_all`` of each libgomp this process has loaded so far (the memory
    map is read again only after new modules were imported: that is when libraries load)."""
    global _scanned
    if _scanned[0] != len(sys.modules):
        _scanned = (len(sys.modules), _scan())
    return _scanned[1]


def _scan() -> list:
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            paths = {line.split()[-1] for line in maps if "libgomp" in line}
    except OSError:
        return []
    return [fn for path in sorted(paths) if (fn := _pause_function(path)) is not None]


_scanned: tuple[int, list] = (-1, [])


@functools.cache
def _pause_function(path: str):
    try:
        fn = ctypes.CDLL(path).omp_pause_resource_all
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int
    return fn
