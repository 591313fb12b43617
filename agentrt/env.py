"""Environment variables, read in one place.

Every setting agentrt takes from the environment has the ``AGENTRT_`` prefix and is read here,
so the rest of the code receives plain values.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["api_key", "backend_api_key", "cache_dir", "default_model", "hf_endpoint",
           "hf_hub_cache", "hf_offline", "no_color", "ollama_models_dirs"]


def cache_dir() -> Path:
    """Where converted model weights live: ``$AGENTRT_CACHE``, else ``~/.cache/agentrt``."""
    explicit = os.environ.get("AGENTRT_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "agentrt"


def default_model() -> str | None:
    """``$AGENTRT_MODEL``: a model folder or name to use instead of the embedded default."""
    return os.environ.get("AGENTRT_MODEL") or None


def api_key() -> str | None:
    """``$AGENTRT_API_KEY``: the key ``agentrt serve`` requires when ``--api-key`` is not
    given (as vLLM reads ``$VLLM_API_KEY``); unset or empty = no key."""
    return os.environ.get("AGENTRT_API_KEY") or None


def backend_api_key() -> str | None:
    """``$AGENTRT_BACKEND_API_KEY``: the key ``agentrt serve --backend sglang`` sends to the
    SGLang server it fronts (that server's ``--api-key``) when ``--backend-api-key`` is not
    given; unset or empty = none."""
    return os.environ.get("AGENTRT_BACKEND_API_KEY") or None


def no_color() -> bool:
    """``$NO_COLOR`` (no-color.org): set and not empty = no ANSI colours in any output."""
    return bool(os.environ.get("NO_COLOR"))


def hf_hub_cache() -> Path:
    """The Hugging Face hub cache, found as huggingface_hub finds it but read at call time:
    ``$HF_HUB_CACHE``, else the legacy ``$HUGGINGFACE_HUB_CACHE``, else ``$HF_HOME/hub``, else
    ``$XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub`` (``~`` and
    ``$VARS`` expanded, as huggingface_hub does)."""
    explicit = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if not explicit:
        home = os.environ.get("HF_HOME") or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
            "huggingface")
        explicit = os.path.join(os.path.expandvars(os.path.expanduser(home)), "hub")
    return Path(os.path.expandvars(os.path.expanduser(explicit)))


def hf_endpoint() -> str:
    """The Hugging Face hub that ``agentrt pull`` downloads from: ``$HF_ENDPOINT`` (a mirror, or
    a test hub on 127.0.0.1), else ``https://huggingface.co``; read at call time."""
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def hf_offline() -> bool:
    """``$HF_HUB_OFFLINE`` set to 1 / true / yes / on: huggingface_hub's switch, honoured by
    ``agentrt pull`` (which then refuses to download)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def ollama_models_dirs() -> list[Path]:
    """Where Ollama keeps models: ``$OLLAMA_MODELS`` alone when set, else ``~/.ollama/models``
    and the Linux service's ``/usr/share/ollama/.ollama/models``."""
    explicit = os.environ.get("OLLAMA_MODELS")
    if explicit:
        return [Path(explicit).expanduser()]
    return [Path.home() / ".ollama" / "models", Path("/usr/share/ollama/.ollama/models")]
