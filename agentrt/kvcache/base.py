"""The prefix-cache interface: match → lock → use → insert → unlock → evict, by handles.

A prefix cache maps token-id prefixes (page-aligned) to KV blocks. Callers hold *handles*
(tree nodes) and the docstrings say what each call mutates. A namespace key separates
tenants or tools whose equal token ids must not share KV.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, NamedTuple

__all__ = ["BasePrefixCache", "InsertResult", "MatchResult"]


class MatchResult(NamedTuple):
    """The longest cached prefix: its handle, its blocks, and its length in tokens."""

    handle: Any
    blocks: list[int]
    num_tokens: int


class InsertResult(NamedTuple):
    """Handle of the inserted key, and how many of its tokens were already cached."""

    handle: Any
    num_cached_tokens: int


class BasePrefixCache(ABC):
    @abstractmethod
    def match_prefix(self, tokens: list[int], namespace: str = "") -> MatchResult:
        """Longest cached page-aligned prefix of ``tokens``. Mutates only LRU timestamps
        (and may split a node so the returned handle ends exactly at the match)."""

    @abstractmethod
    def lock(self, handle: Any) -> None:
        """Protect ``handle`` and its ancestors from eviction (nestable)."""

    @abstractmethod
    def unlock(self, handle: Any) -> None:
        """Undo one :meth:`lock` of ``handle``."""

    @abstractmethod
    def insert(self, tokens: list[int], blocks: list[int], namespace: str = "") -> InsertResult:
        """Cache ``blocks`` as the KV of ``tokens`` (len(tokens) == len(blocks) * page).

        The cache takes its own reference on blocks it adopts; for the already-cached part
        it keeps its existing blocks and the caller's copies stay the caller's to release.
        """

    @abstractmethod
    def evict(self, num_blocks: int) -> int:
        """Release up to ``num_blocks`` blocks from unlocked leaves, least recently used
        first. Returns how many blocks were released."""

    @property
    @abstractmethod
    def num_evictable_blocks(self) -> int:
        """Blocks held only by unlocked nodes."""
