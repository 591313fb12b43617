"""Environment variables, read in one place.

Every setting agentrt takes from the environment has the ``AGENTRT_`` prefix and is read here,
so the rest of the code receives plain values.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir", "default_model"]


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
