"""Incremental detokenization and stop-string matching on the decoded text (no torch).

Token ids are decoded over a short sliding window (a few tokens of context before the new
ones, so leading spaces and merges come out as a full decode would give them). Text ending
in U+FFFD — an incomplete UTF-8 sequence split across tokens — is held back until the next
token completes it, so streamed text never contains a broken character.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["IncrementalDetokenizer", "find_stop", "stop_holdback"]

_CONTEXT_TOKENS = 5


class IncrementalDetokenizer:
    """Decodes a growing list of token ids into text deltas."""

    def __init__(self, tokenizer, context_ids: Sequence[int] = (), *,
                 skip_special_tokens: bool = True) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.ids = list(context_ids[-_CONTEXT_TOKENS:])
        self.prefix_offset = 0
        self.read_offset = len(self.ids)

    def push(self, token_ids: Iterable[int]) -> str:
        """Add tokens; return the newly completed text (possibly empty)."""
        self.ids.extend(token_ids)
        prefix = self._decode(self.ids[self.prefix_offset : self.read_offset])
        full = self._decode(self.ids[self.prefix_offset :])
        if len(full) <= len(prefix) or full.endswith("\ufffd"):
            return ""  # nothing new, or an incomplete character: wait for more tokens
        self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
        return full[len(prefix) :]

    def flush(self) -> str:
        """End of stream: return whatever is still held back (even an incomplete character)."""
        prefix = self._decode(self.ids[self.prefix_offset : self.read_offset])
        full = self._decode(self.ids[self.prefix_offset :])
        self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
        return full[len(prefix) :]

    def _decode(self, ids: Sequence[int]) -> str:
        if not ids:
            return ""
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)


def find_stop(text: str, stops: tuple[str, ...], start: int) -> tuple[int, str] | None:
    """Earliest stop string in ``text`` beginning at or after ``start - len(stop) + 1``.

    Returns (index, stop) or None. ``start`` is where the newly added text begins, so only
    matches that involve new text are searched.
    """
    best: tuple[int, str] | None = None
    for stop in stops:
        i = text.find(stop, max(0, start - len(stop) + 1))
        if i >= 0 and (best is None or i < best[0]):
            best = (i, stop)
    return best


def stop_holdback(text: str, stops: tuple[str, ...]) -> int:
    """Characters at the end of ``text`` that could still become the start of a stop string
    (a streamer must not emit them yet)."""
    hold = 0
    for stop in stops:
        if len(stop) < 2:
            continue
        # NOTE: only where ``stop[0]`` occurs in the tail can a prefix of ``stop`` begin (the
        # scan runs in C); checking every length instead costs len(stop)**2 a token
        tail = text[-(len(stop) - 1):]
        i = tail.find(stop[0])
        while i != -1 and len(tail) - i > hold:
            if stop.startswith(tail[i:]):
                hold = len(tail) - i
                break
            i = tail.find(stop[0], i + 1)
    return hold
