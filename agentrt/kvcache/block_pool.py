"""BlockPool: reference-counted KV blocks (pages) of one device cache.

A block id is an index into the cache tensors' page dimension. Every holder of a block — a
running request, the radix cache — owns one reference; the block returns to the free list
exactly when its count drops to zero.
"""

from __future__ import annotations

from collections import deque

__all__ = ["BlockPool", "OutOfBlocksError"]


class OutOfBlocksError(RuntimeError):
    """More blocks were requested than are free."""


class BlockPool:
    """Free list plus reference counts over ``num_blocks`` blocks of ``block_size`` tokens."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks <= 0 or block_size <= 0:
            raise ValueError("num_blocks and block_size must be positive")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._ref = [0] * num_blocks
        self._free: deque[int] = deque(range(num_blocks))

    @property
    def num_free(self) -> int:
        return len(self._free)

    def can_allocate(self, n: int) -> bool:
        return n <= len(self._free)

    def allocate(self, n: int) -> list[int]:
        """Take ``n`` free blocks, each with one reference held by the caller."""
        if n > len(self._free):
            raise OutOfBlocksError(f"asked for {n} blocks, {len(self._free)} free")
        blocks = [self._free.popleft() for _ in range(n)]
        for b in blocks:
            self._ref[b] = 1
        return blocks

    def incref(self, blocks: list[int]) -> None:
        """Add one reference to each (already allocated) block."""
        for b in blocks:
            if self._ref[b] <= 0:
                raise RuntimeError(f"incref of free block {b}")
            self._ref[b] += 1

    def decref(self, blocks: list[int]) -> None:
        """Drop one reference from each block; blocks reaching zero become free."""
        for b in blocks:
            if self._ref[b] <= 0:
                raise RuntimeError(f"block {b} freed twice")
            self._ref[b] -= 1
            if self._ref[b] == 0:
                self._free.append(b)

    def ref_count(self, block: int) -> int:
        return self._ref[block]
