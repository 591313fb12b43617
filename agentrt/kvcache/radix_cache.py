"""RadixCache: a page-aligned radix tree over token ids whose nodes own KV blocks.

Each edge holds a run of tokens (a multiple of the page size) and the blocks that store their
KV. Children are keyed by their first page of tokens, so matching walks one dict lookup per
page. Nodes locked by running requests are never evicted; unlocked leaves are evicted least
recently used first, and a parent left childless becomes a leaf in turn. Each namespace has
its own root: equal tokens under different namespaces never share blocks.
"""

from __future__ import annotations

import heapq
import itertools
import time

from agentrt.kvcache.base import BasePrefixCache, InsertResult, MatchResult
from agentrt.kvcache.block_pool import BlockPool

__all__ = ["RadixCache", "RadixNode"]

_ids = itertools.count()


class RadixNode:
    __slots__ = ("key", "blocks", "children", "parent", "lock_ref", "last_access", "id")

    def __init__(self, key: tuple[int, ...] = (), blocks: list[int] | None = None,
                 parent: RadixNode | None = None) -> None:
        self.key = key
        self.blocks = blocks or []
        self.children: dict[tuple[int, ...], RadixNode] = {}
        self.parent = parent
        self.lock_ref = 0
        self.last_access = time.monotonic()
        self.id = next(_ids)

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def __lt__(self, other: RadixNode) -> bool:  # heap order: least recently used first
        return (self.last_access, self.id) < (other.last_access, other.id)


class RadixCache(BasePrefixCache):
    """Prefix cache over a :class:`BlockPool`; see :class:`BasePrefixCache` for the protocol."""

    def __init__(self, pool: BlockPool) -> None:
        self.pool = pool
        self.page = pool.block_size
        self._roots: dict[str, RadixNode] = {}
        self._num_blocks = 0
        self._num_locked_blocks = 0
        self.num_evicted_blocks = 0
        """Blocks released by :meth:`evict` since creation (observability)."""

    # --- queries ---------------------------------------------------------------------------
    @property
    def num_cached_blocks(self) -> int:
        return self._num_blocks

    @property
    def num_evictable_blocks(self) -> int:
        return self._num_blocks - self._num_locked_blocks

    def nodes(self) -> list[RadixNode]:
        """Every non-root node (for inspection and tests)."""
        out, stack = [], list(self._roots.values())
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            if node.parent is not None:
                out.append(node)
        return out

    # --- protocol --------------------------------------------------------------------------
    def match_prefix(self, tokens: list[int], namespace: str = "") -> MatchResult:
        node = self._root(namespace)
        blocks: list[int] = []
        pos, usable = 0, len(tokens) - len(tokens) % self.page
        now = time.monotonic()
        while pos < usable:
            child = node.children.get(tuple(tokens[pos : pos + self.page]))
            if child is None:
                break
            n = self._common_pages(child.key, tokens, pos)
            if n < len(child.key):
                child = self._split(child, n)
            child.last_access = now
            blocks.extend(child.blocks)
            pos += n
            node = child
        return MatchResult(node, blocks, pos)

    def lock(self, handle: RadixNode) -> None:
        node = handle
        while node.parent is not None:
            if node.lock_ref == 0:
                self._num_locked_blocks += len(node.blocks)
            node.lock_ref += 1
            node = node.parent

    def unlock(self, handle: RadixNode) -> None:
        node = handle
        while node.parent is not None:
            if node.lock_ref <= 0:
                raise RuntimeError("unlock of a node that is not locked")
            node.lock_ref -= 1
            if node.lock_ref == 0:
                self._num_locked_blocks -= len(node.blocks)
            node = node.parent

    def insert(self, tokens: list[int], blocks: list[int], namespace: str = "") -> InsertResult:
        if len(tokens) != len(blocks) * self.page:
            raise ValueError("insert needs exactly one block per page of tokens")
        match = self.match_prefix(tokens, namespace)
        node, pos = match.handle, match.num_tokens
        if pos < len(tokens):
            new = RadixNode(tuple(tokens[pos:]), list(blocks[pos // self.page :]), node)
            node.children[new.key[: self.page]] = new
            self.pool.incref(new.blocks)
            self._num_blocks += len(new.blocks)
            node = new
        return InsertResult(node, match.num_tokens)

    def evict(self, num_blocks: int) -> int:
        heap = [n for n in self.nodes() if n.is_leaf and n.lock_ref == 0]
        heapq.heapify(heap)
        freed = 0
        while heap and freed < num_blocks:
            leaf = heapq.heappop(heap)
            self._remove_leaf(leaf)
            freed += len(leaf.blocks)
            self.num_evicted_blocks += len(leaf.blocks)
            parent = leaf.parent
            if parent.parent is not None and parent.is_leaf and parent.lock_ref == 0:
                heapq.heappush(heap, parent)
        return freed

    def clear(self) -> int:
        """Evict every unlocked node; returns the number of blocks released."""
        return self.evict(self._num_blocks)

    # --- helpers ---------------------------------------------------------------------------
    def _root(self, namespace: str) -> RadixNode:
        root = self._roots.get(namespace)
        if root is None:
            root = self._roots[namespace] = RadixNode()
        return root

    def _common_pages(self, key: tuple[int, ...], tokens: list[int], pos: int) -> int:
        """Length (in tokens, page-aligned) of the common prefix of ``key`` and tokens[pos:]."""
        n, limit = self.page, min(len(key), len(tokens) - pos)
        while n + self.page <= limit and key[n : n + self.page] == tuple(
            tokens[pos + n : pos + n + self.page]
        ):
            n += self.page
        return n

    def _split(self, child: RadixNode, n: int) -> RadixNode:
        """Split ``child`` after ``n`` tokens; return the new upper node."""
        parent, pages = child.parent, n // self.page
        upper = RadixNode(child.key[:n], child.blocks[:pages], parent)
        upper.lock_ref, upper.last_access = child.lock_ref, child.last_access
        parent.children[upper.key[: self.page]] = upper
        child.key, child.blocks, child.parent = child.key[n:], child.blocks[pages:], upper
        upper.children[child.key[: self.page]] = child
        return upper

    def _remove_leaf(self, leaf: RadixNode) -> None:
        del leaf.parent.children[leaf.key[: self.page]]
        self.pool.decref(leaf.blocks)
        self._num_blocks -= len(leaf.blocks)
