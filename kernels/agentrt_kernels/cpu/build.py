"""Compile agentrt's CPU kernels once per source and machine, into the user cache.

The C++ sources next to this file are built with the system's ``g++`` into
``$AGENTRT_CACHE/kernels/<hash>/`` (the hash covers the source, the flags and torch's
OpenMP runtime path) and loaded with :mod:`ctypes`. The library links the libgomp that torch
itself loaded, so the kernel's threads and torch's are one pool. The sources ship inside the
wheel as package data (CI checks that every one does). A machine without a source, a
compiler or AVX2 gets :class:`KernelUnavailable` with the reason — and one
:class:`KernelFallbackWarning` per process — and callers fall back to their ``ref_*`` torch
twin.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import shutil
import subprocess
import warnings
from pathlib import Path

import torch

from agentrt import env

__all__ = ["KERNELS", "KernelFallbackWarning", "KernelUnavailable", "load_library"]

_SOURCES = Path(__file__).parent
KERNELS = ("decode_ops", "gguf_int8", "gguf_linear", "quant_linear")
"""The ``<name>.cpp`` sources next to this file."""
_warned = False  # NOTE: one KernelFallbackWarning per process, whichever kernel failed first
# -ffp-contract=off: a dequantized weight is d * q + mn in two roundings, like the reference
_FLAGS = ["-O3", "-mavx2", "-mfma", "-ffp-contract=off", "-fopenmp", "-shared", "-fPIC",
          "-std=c++17"]


class KernelUnavailable(RuntimeError):
    """The CPU kernels cannot run here (no source, no compiler, no AVX2, a failed build)."""


class KernelFallbackWarning(RuntimeWarning):
    """A CPU kernel is unavailable and its torch reference runs instead (slower, same math)."""


def load_library(name: str) -> ctypes.CDLL:
    """The compiled ``<name>.cpp`` (built on first use, then cached on disk and in process).

    Raises:
        KernelUnavailable: it cannot be built or loaded here (the reason is the message).
    """
    loaded = _load(name)
    if isinstance(loaded, KernelUnavailable):
        raise KernelUnavailable(str(loaded))
    return loaded


@functools.cache
def _load(name: str) -> ctypes.CDLL | KernelUnavailable:
    """The library, or why not (a failure is cached too: one try, one warning)."""
    global _warned
    try:
        return _build_and_open(name)
    except KernelUnavailable as exc:
        if not _warned:
            _warned = True
            warnings.warn(f"agentrt's CPU kernels are unavailable ({exc}); the torch reference "
                          "runs instead", KernelFallbackWarning, stacklevel=4)
        return exc


def _build_and_open(name: str) -> ctypes.CDLL:
    if not _has_avx2():
        raise KernelUnavailable("this CPU has no AVX2/FMA")
    compiler = shutil.which("g++")
    if compiler is None:
        raise KernelUnavailable("no g++ on PATH to build agentrt's CPU kernels")
    source = _SOURCES / f"{name}.cpp"
    if not source.is_file():
        raise KernelUnavailable(f"{source} is missing (an install without the kernel sources)")
    gomp = _torch_gomp()
    digest = hashlib.sha256(source.read_bytes() + " ".join(_FLAGS + [gomp]).encode()).hexdigest()
    target = env.cache_dir() / "kernels" / digest[:16] / f"lib{name}.so"
    if not target.exists():
        _compile(compiler, source, target, gomp)
    try:
        return ctypes.CDLL(str(target))
    except OSError as exc:
        raise KernelUnavailable(f"loading {target} failed: {exc}") from exc


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
