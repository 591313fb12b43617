"""Unknown keyword fields get a clear error with a "did you mean" (difflib), before any work.

``EngineConfig(kv_cache_gigs=1)`` is a ``TypeError`` naming ``kv_cache_gb``, where the
dataclass's own message said only "unexpected keyword argument".
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["check_known", "did_you_mean"]


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the closest of ``known``, or ``""``."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_known(owner: str, given: Iterable[str], known: Iterable[str]) -> None:
    """A ``TypeError`` naming each of ``given`` that is not ``known``, with the closest
    known name."""
    known = list(known)
    unknown = [name for name in given if name not in known]
    if unknown:
        hints = "; ".join(f"{name!r}{did_you_mean(name, known)}" for name in unknown)
        raise TypeError(f"{owner} got unknown field(s): {hints}")
