"""Tool-call markers that are special tokens: kept when decoding skips special tokens.

Some families open a tool call with a special token (Mistral's ``[TOOL_CALLS]``, Llama 3.1's
``<|python_tag|>``); ``decode(..., skip_special_tokens=True)`` drops it, so a parser never
sees the call open. :func:`marker_tokenizer` wraps such a tokenizer in a :class:`MarkerTokenizer`
whose ``decode`` skips every other special token but keeps the markers, exactly as the
tokenizer would decode them if they were not special (the skipped ids are left out and the
rest is decoded as one run, so spacing around a marker is the tokenizer's own).
:meth:`MarkerTokenizer.strip_special` does the same to text already decoded with the special
tokens in it (the engine's output of a request with ``skip_special_tokens=False``).
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["MarkerTokenizer", "marker_tokenizer", "skipped_special_tokens"]

T = TypeVar("T")
_SKIPPED: weakref.WeakKeyDictionary[Any, dict[int, str]] = weakref.WeakKeyDictionary()
_PLANS: weakref.WeakKeyDictionary[Any, dict[frozenset[str], _Plan]] = \
    weakref.WeakKeyDictionary()


def skipped_special_tokens(tokenizer: Any) -> dict[int, str]:
    """Id → text of every token that ``decode(skip_special_tokens=True)`` drops (cached per
    tokenizer); empty for a tokenizer without added or special tokens."""
    return _cached(_SKIPPED, tokenizer, lambda: _find_skipped(tokenizer))


@dataclass(frozen=True)
class _Plan:
    """What a :class:`MarkerTokenizer` keeps and drops (no reference to the tokenizer, so it
    is cached per tokenizer and marker set: a chat call builds one per request)."""

    kept_ids: frozenset[int]
    skipped_ids: frozenset[int]
    dropped: re.Pattern[str] | None


class MarkerTokenizer:
    """``tokenizer`` whose ``decode(skip_special_tokens=True)`` keeps ``markers``; every other
    attribute is the tokenizer's own."""

    def __init__(self, tokenizer: Any, markers: Iterable[str]) -> None:
        self.tokenizer = tokenizer
        wanted = frozenset(markers)
        plans = _cached(_PLANS, tokenizer, dict)
        plan = plans.get(wanted)
        if plan is None:
            plan = plans[wanted] = _make_plan(tokenizer, wanted)
        #: the markers' ids that decoding would otherwise skip
        self.kept_ids = plan.kept_ids
        self.skipped_ids = plan.skipped_ids
        self._dropped = plan.dropped

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False, **kwargs: Any) -> str:
        """The tokenizer's decode; skipping special tokens keeps the markers."""
        if skip_special_tokens:
            ids = [i for i in ids if i not in self.skipped_ids]
        return self.tokenizer.decode(list(ids), skip_special_tokens=False, **kwargs)

    def strip_special(self, text: str) -> str:
        """``text`` decoded with special tokens, without the special tokens but the markers.

        NOTE: a special token is one token, so it arrives whole in a streamed delta; the text
        of one that ordinary tokens happen to spell is removed as well."""
        return self._dropped.sub("", text) if self._dropped is not None else text

    def __getattr__(self, name: str) -> Any:
        if name == "tokenizer":  # not set yet (a copy being built)
            raise AttributeError(name)
        return getattr(self.tokenizer, name)


def marker_tokenizer(tokenizer: Any, markers: Iterable[str]) -> MarkerTokenizer | None:
    """A :class:`MarkerTokenizer` over ``tokenizer`` when one of ``markers`` is a special
    token that decoding skips; else None (decoding keeps them already)."""
    markers = tuple(markers)
    if not any(_is_skipped_marker(tokenizer, m) for m in markers):
        return None
    return MarkerTokenizer(tokenizer, markers)


def _is_skipped_marker(tokenizer: Any, marker: str) -> bool:
    """``marker`` is one token, and decoding with ``skip_special_tokens`` drops it."""
    try:
        ids = tokenizer.encode(marker, add_special_tokens=False)
    except (AttributeError, TypeError):  # a fake tokenizer without encode(add_special_tokens)
        return False
    return len(ids) == 1 and not tokenizer.decode(ids, skip_special_tokens=True)


def _make_plan(tokenizer: Any, markers: frozenset[str]) -> _Plan:
    skipped = skipped_special_tokens(tokenizer)
    kept = frozenset(i for i, text in skipped.items() if text in markers)
    dropped = sorted({text for i, text in skipped.items() if i not in kept}, key=len,
                     reverse=True)
    pattern = re.compile("|".join(map(re.escape, dropped))) if dropped else None
    return _Plan(kept, frozenset(skipped) - kept, pattern)


def _find_skipped(tokenizer: Any) -> dict[int, str]:
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    ids = sorted({*added, *getattr(tokenizer, "all_special_ids", ())})
    return {i: text for i in ids
            if (text := tokenizer.decode([i], skip_special_tokens=False))
            and not tokenizer.decode([i], skip_special_tokens=True)}


def _cached(cache: weakref.WeakKeyDictionary[Any, T], tokenizer: Any, make: Callable[[], T]) -> T:
    """``cache[tokenizer]``, made on first use (a tokenizer that cannot be weakly referenced
    or hashed gets a fresh one each time)."""
    try:
        return cache[tokenizer]
    except KeyError:
        value = cache[tokenizer] = make()
        return value
    except TypeError:
        return make()
