"""Shared prompt prefixes of a semantic session's ready requests (Parrot's PrefixHash).

When two or more ready requests share the text before an input variable (an instruction
every map call repeats), the executor fills that prefix once before it dispatches them.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import anyio

from agentrt.session import common_prefix_len

if TYPE_CHECKING:
    from agentrt.semantic.dag import Node

__all__ = ["PrefixStore", "common_prefix"]


class PrefixStore:
    """PrefixHash → requests, checked online when requests become ready.

    A request's hashes cover its prompt text up to each input-variable boundary (and the
    whole prompt); requests sharing a hash share at least that much text.
    """

    def __init__(self) -> None:
        self.requests: dict[str, list[Node]] = {}
        self._order: dict[Node, list[str]] = {}
        self._filled: dict[str, Any] = {}  # prefix hash -> anyio.Event, set when filled

    @staticmethod
    def hash_text(text: str) -> str:
        return hashlib.sha1(text.encode()).hexdigest()

    def add(self, node: Node, prefixes: Iterable[str]) -> None:
        """Register ``node`` under the hash of each prefix (shortest first)."""
        hashes = [self.hash_text(p) for p in prefixes if p]
        self._order[node] = hashes
        for h in hashes:
            self.requests.setdefault(h, []).append(node)

    def groups(self, ready: list[Node]) -> list[list[Node]]:
        """Partition ``ready`` requests into groups of two or more that share a prefix.

        Each request joins the group of its shortest boundary prefix that another ready
        request shares (the static text before the first variable matters most).
        """
        ready_set, assigned = set(ready), set()
        groups: list[list[Node]] = []
        for node in ready:
            for h in self._order.get(node, ()):
                members = [n for n in self.requests[h] if n in ready_set and n not in assigned]
                if len(members) >= 2:
                    groups.append(members)
                    assigned.update(members)
                    break
        return groups

    def fill_of(self, prefix_ids: list[int]) -> tuple[Any, bool]:
        """The event set once these prefix tokens are filled, and whether the caller is the
        first to ask (and must fill them); later groups sharing the prefix wait on it."""
        key = self.hash_text(",".join(map(str, prefix_ids)))
        event = self._filled.get(key)
        if event is not None:
            return event, False
        event = self._filled[key] = anyio.Event()
        return event, True



def common_prefix(sequences: list[list[int]]) -> list[int]:
    """The longest common prefix of token lists."""
    return functools.reduce(lambda a, b: a[:common_prefix_len(a, b)], sequences)
