"""Can FlashInfer's kernels run here? A probe that imports neither FlashInfer nor CUDA.

FlashInfer 0.6 ships its attention kernels as sources and compiles them with ``nvcc`` on first
use (``flashinfer/jit``), unless the prebuilt ``flashinfer-jit-cache`` package is installed.
Without either, importing ``flashinfer`` works and the first ``plan`` raises, in the middle of
an engine's start-up. :func:`flashinfer_unusable_reason` finds that out beforehand, looking
for ``nvcc`` where FlashInfer's ``get_cuda_path`` does (``$FLASHINFER_NVCC``, ``$CUDA_HOME`` /
``$CUDA_PATH``, ``nvcc`` on ``PATH``, ``/usr/local/cuda``); an ``attention_backend="auto"``
engine then runs the torch backend and says once, with :data:`HOW_TO_GET_KERNELS`, how to get
the kernels (:func:`agentrt.attention.attention_backend_for`).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

__all__ = ["HOW_TO_GET_KERNELS", "flashinfer_unusable_reason", "find_nvcc"]

HOW_TO_GET_KERNELS = (
    "FlashInfer compiles its kernels with nvcc on first use: install the CUDA toolkit "
    "(e.g. pip install nvidia-cuda-nvcc-cu12, or the system package) and put nvcc on PATH "
    "or set CUDA_HOME, or install FlashInfer's prebuilt kernels "
    "(pip install flashinfer-jit-cache, from FlashInfer's wheel index for your CUDA version); "
    "then pass attention_backend='flashinfer'")
"""What a user does to get FlashInfer's kernels (said once, when "auto" falls back)."""


def find_nvcc() -> Path | None:
    """The ``nvcc`` FlashInfer's JIT would run, or None when there is none."""
    if nvcc := os.environ.get("FLASHINFER_NVCC"):
        found = shutil.which(nvcc)
        return Path(found) if found else None
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home is None and (found := shutil.which("nvcc")):
        return Path(found)
    candidate = Path(home or "/usr/local/cuda") / "bin" / "nvcc"
    return candidate if candidate.is_file() else None


def flashinfer_unusable_reason() -> str | None:
    """Why FlashInfer's attention kernels cannot run on this machine (not installed, or
    nothing to build or load them with), or None when they can."""
    if importlib.util.find_spec("flashinfer") is None:
        return "FlashInfer is not installed (pip install 'agentrt[gpu]')"
    if importlib.util.find_spec("flashinfer_jit_cache") is not None:
        return None  # prebuilt kernels: nothing to compile
    if find_nvcc() is None:
        return ("FlashInfer is installed but finds no CUDA compiler (nvcc) to build its "
                f"kernels. {HOW_TO_GET_KERNELS}")
    return None
