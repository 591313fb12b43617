"""KVCacheManager: the one boundary between the scheduler and KV memory.

It owns the device block pool, the radix prefix cache and the host pool, and keeps each
request's block table consistent with them. The scheduler calls, in this order:
``match_prefix`` once when a request is first admitted, ``allocate`` before every step that
computes tokens for it, and ``free`` when it finishes, is preempted or is aborted; the
engine calls ``truncate`` when a paused request resumes from an earlier point (a seam).
``swap_out``/``swap_in`` move a paused request's KV to the host pool and back, through a
:class:`~agentrt.kvcache.transfer.PageCopier` (on CUDA: a side stream; the device pages of a
swap-out stay allocated until its copy has completed, see :meth:`reap`).
"""

from __future__ import annotations

from agentrt.core.kv_tensors import KVCacheTensors
from agentrt.core.request import Request
from agentrt.kvcache.block_pool import BlockPool
from agentrt.kvcache.radix_cache import RadixCache
from agentrt.kvcache.transfer import PageCopier, make_copier

__all__ = ["KVCacheManager"]


class KVCacheManager:
    def __init__(self, device: KVCacheTensors, host: KVCacheTensors | None = None,
                 enable_prefix_cache: bool = True, copier: PageCopier | None = None) -> None:
        self.device = device
        self.block_size = device.page_size
        self.pool = BlockPool(device.num_pages, self.block_size)
        self.cache = RadixCache(self.pool)
        self.enable_prefix_cache = enable_prefix_cache
        self.host = host
        self.host_pool = BlockPool(host.num_pages, self.block_size) if host is not None else None
        self._swapped: dict[str, list[int]] = {}
        self.copier = copier or make_copier(device, host)
        self._copying: list[tuple[object, list[int]]] = []
        """(event, device blocks) of swap-outs still copying; the blocks are held till done."""

    # --- capacity --------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        """Blocks free now, blocks the prefix cache would give up on demand, and blocks of
        swap-outs still copying (free once their copy completes)."""
        copying = sum(len(blocks) for _, blocks in self._copying)
        return self.pool.num_free + self.cache.num_evictable_blocks + copying

    def reap(self, wait: bool = False) -> None:
        """Release the device blocks of swap-outs whose copy has completed (with ``wait``,
        of all of them, waiting for the copies)."""
        if wait and self._copying:
            self.copier.synchronize()
        pending = []
        for done, blocks in self._copying:
            if wait or done.query():
                self.pool.decref(blocks)
            else:
                pending.append((done, blocks))
        self._copying = pending

    def _make_room(self, need: int) -> bool:
        """Free blocks until ``need`` are free: finished swap-outs, then the prefix cache."""
        if self.pool.num_free < need and self._copying:
            self.reap(wait=self.pool.num_free + self.cache.num_evictable_blocks < need)
        if self.pool.num_free < need:
            self.cache.evict(need - self.pool.num_free)
        return self.pool.num_free >= need

    def blocks_needed(self, req: Request, num_new_tokens: int) -> int:
        total = req.num_computed_tokens + num_new_tokens
        return max(0, -(-total // self.block_size) - len(req.block_table))

    # --- request lifecycle -----------------------------------------------------------------
    def match_prefix(self, req: Request) -> int:
        """Adopt the longest cached prefix of ``req`` (leaving at least one token to compute).

        Sets ``num_computed_tokens`` and returns the number of tokens reused.
        """
        if not self.enable_prefix_cache or req.num_computed_tokens or req.block_table:
            return 0
        m = self.cache.match_prefix(req.token_ids[: req.num_tokens - 1], req.namespace)
        if m.num_tokens == 0:
            return 0
        self.pool.incref(m.blocks)
        self.cache.lock(m.handle)
        req.prefix_handle = m.handle
        req.block_table = list(m.blocks)
        req.num_computed_tokens = m.num_tokens
        return m.num_tokens

    def allocate(self, req: Request, num_new_tokens: int) -> bool:
        """Give ``req`` blocks for ``num_new_tokens`` more tokens; False if memory is short."""
        need = self.blocks_needed(req, num_new_tokens)
        if need == 0:
            return True
        if not self._make_room(need):
            return False
        req.block_table.extend(self.pool.allocate(need))
        return True

    def free(self, req: Request, cache: bool = True) -> None:
        """Release every block ``req`` holds; with ``cache``, computed full pages go to the
        prefix cache first so a later request (or this one, resumed) can reuse them."""
        if cache and self.enable_prefix_cache and req.block_table:
            n = min(req.num_computed_tokens // self.block_size, len(req.block_table))
            if n:
                pages = n * self.block_size
                self.cache.insert(req.token_ids[:pages], req.block_table[:n], req.namespace)
        if req.prefix_handle is not None:
            self.cache.unlock(req.prefix_handle)
            req.prefix_handle = None
        self.pool.decref(req.block_table)
        req.block_table = []

    def reset(self, req: Request) -> None:
        """Free ``req``'s blocks (caching them) and forget its computed KV (recompute)."""
        self.free(req, cache=True)
        req.num_computed_tokens = 0
        self.discard_swapped(req)

    def truncate(self, req: Request, num_tokens: int, max_computed: int) -> bool:
        """Roll ``req`` back to its first ``num_tokens`` tokens, keeping at most
        ``max_computed`` tokens of KV; returns False when there is nothing to roll back.

        Mutates ``req.token_ids``, ``block_table``, ``num_computed_tokens`` and
        ``recompute_until``; the pages past the kept KV are released. A page shared with the
        prefix cache is never written again, so the kept KV stops at a page boundary when
        the page holding the first token to compute is shared.
        """
        bs = self.block_size
        keep = min(req.num_computed_tokens, num_tokens, max_computed)
        if keep == req.num_computed_tokens and num_tokens == req.num_tokens:
            return False  # the plain resume: nothing to roll back
        page = keep // bs
        if keep % bs and page < len(req.block_table) and \
                self.pool.ref_count(req.block_table[page]) > 1:
            keep = page * bs
        num_pages = -(-keep // bs)
        if len(req.block_table) > num_pages:
            self.pool.decref(req.block_table[num_pages:])
            del req.block_table[num_pages:]
        del req.token_ids[num_tokens:]
        req.num_computed_tokens = keep
        req.recompute_until = min(req.recompute_until, num_tokens)
        return True

    # --- host tier -------------------------------------------------------------------------
    def can_swap_out(self, req: Request) -> bool:
        return self.host_pool is not None and self.host_pool.can_allocate(len(req.block_table))

    def swap_out(self, req: Request) -> None:
        """Copy ``req``'s blocks to the host pool and release them on the device."""
        if self.host_pool is None:
            raise RuntimeError("no host pool configured")
        if self.is_swapped(req):
            raise RuntimeError(f"request {req.request_id!r} is already swapped out")
        host_blocks = self.host_pool.allocate(len(req.block_table))
        done = self.copier.swap_out(self.device, self.host, req.block_table, host_blocks)
        if done is not None:  # NOTE: hold the device blocks until the copy has read them
            self.pool.incref(req.block_table)
            self._copying.append((done, list(req.block_table)))
        self._swapped[req.request_id] = host_blocks
        self.free(req, cache=False)

    def can_swap_in(self, req: Request) -> bool:
        return len(self._swapped.get(req.request_id, ())) <= self.num_free_blocks

    def swap_in(self, req: Request) -> bool:
        """Bring ``req``'s KV back from the host pool into new device blocks."""
        host_blocks = self._swapped[req.request_id]
        if not self._make_room(len(host_blocks)):
            return False
        req.block_table = self.pool.allocate(len(host_blocks))
        self.copier.swap_in(self.host, self.device, host_blocks, req.block_table)
        self.host_pool.decref(self._swapped.pop(req.request_id))
        return True

    def num_swapped_blocks(self, req: Request) -> int:
        return len(self._swapped.get(req.request_id, ()))

    def is_swapped(self, req: Request) -> bool:
        return req.request_id in self._swapped

    def discard_swapped(self, req: Request) -> None:
        """Drop a swapped-out copy (abort while swapped)."""
        blocks = self._swapped.pop(req.request_id, None)
        if blocks:
            self.host_pool.decref(blocks)
