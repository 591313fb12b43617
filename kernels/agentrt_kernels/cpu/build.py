"""Compile agentrt's CPU kernels once per source and machine, into the user cache.

The C++ sources next to this file are built with the system's ``g++`` into
``$AGENTRT_CACHE/kernels/<hash>/`` (the hash covers the source, the flags and torch's
OpenMP runtime path) and loaded with :mod:`ctypes`. The library links the libgomp that torch
itself loaded, so the kernel's threads and torch's are one pool. A machine without a
compiler or without AVX2 gets :class:`KernelUnavailable` with the reason, and callers fall
back to their ``ref_*`` torch twin.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import shutil
import subprocess
from pathlib import Path

import torch

from agentrt import env

__all__ = ["KernelUnavailable", "load_library"]

_SOURCES = Path(__file__).parent
# -ffp-contract=off: a dequantized weight is d * q + mn in two roundings, like the reference
_FLAGS = ["-O3", "-mavx2", "-mfma", "-ffp-contract=off", "-fopenmp", "-shared", "-fPIC",
          "-std=c++17"]


class KernelUnavailable(RuntimeError):
    """The CPU kernels cannot run here (no compiler, no AVX2, a failed build)."""


@functools.cache
def load_library(name: str) -> ctypes.CDLL:
    """The compiled ``<name>.cpp`` (built on first use, then cached on disk)."""
    if not _has_avx2():
        raise KernelUnavailable("this CPU has no AVX2/FMA")
    compiler = shutil.which("g++")
    if compiler is None:
        raise KernelUnavailable("no g++ on PATH to build agentrt's CPU kernels")
    source = _SOURCES / f"{name}.cpp"
    gomp = _torch_gomp()
    digest = hashlib.sha256(source.read_bytes() + " ".join(_FLAGS + [gomp]).encode()).hexdigest()
    target = env.cache_dir() / "kernels" / digest[:16] / f"lib{name}.so"
    if not target.exists():
        _compile(compiler, source, target, gomp)
    return ctypes.CDLL(str(target))


def _compile(compiler: str, source: Path, target: Path, gomp: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".tmp")
    link = [f"-L{Path(gomp).parent}", f"-Wl,-rpath,{Path(gomp).parent}"] if gomp else []
    cmd = [compiler, *_FLAGS, str(source), "-o", str(partial), *link]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise KernelUnavailable(f"building {source.name} failed:\n{done.stderr[-2000:]}")
    partial.replace(target)  # NOTE: atomic, so a concurrent first use never loads half a file


def _torch_gomp() -> str:
    """The libgomp torch ships (and has loaded), or "" to link the system's."""
    found = sorted((Path(torch.__file__).parent / "lib").glob("libgomp*.so*"))
    return str(found[0]) if found else ""


def _has_avx2() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return " avx2" in flags and " fma" in flags
