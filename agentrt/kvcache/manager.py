"""KVCacheManager: the one boundary between the scheduler and KV memory.

It owns the device block pool, the radix prefix cache and the host pool, and keeps each
request's block table consistent with them. The scheduler calls, in this order:
``match_prefix`` once when a request is first admitted, ``allocate`` before every step that
computes tokens for it, and ``free`` when it finishes, is preempted or is aborted; the
engine calls ``truncate`` when a paused request resumes from an earlier point (a seam).
``swap_out``/``swap_in`` move a paused request's KV to the host pool and back, through a
:class:`~agentrt.kvcache.transfer.PageCopier` (on CUDA: a side stream; the device pages of a
swap-out stay allocated until its copy has completed, see :meth:`reap`).

Sliding window (``window``: every layer attends within W tokens, Mistral-style): before each
step of a request, the pages wholly before its window (the keys its next query can no longer
see) are released and their table entries point at one reserved *null page* (never written,
never read: the attention plans start each row at its window), so the table stays aligned
with positions and a long sequence holds at most ceil(W / page) + 1 pages. A prefix-cache hit
is always usable: the radix cache holds whole paths from the root, so the pages of the
window before a hit are held by the cache itself; the request then drops its references to
the pages behind its window (the cache keeps them while it keeps the prefix). At free, the
cache is given the request's leading pages that it still held (none once the first page was
released), so a long windowed sequence leaves only its early prefix cached. Swap and the
interception costs count held pages only. (Hybrid models, Gemma 3's global layers among
sliding ones, share one page table across layers and keep every page: see docs.)
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
                 enable_prefix_cache: bool = True, copier: PageCopier | None = None,
                 window: int | None = None) -> None:
        """``window``: the sliding window of every layer (None: some layer is global)."""
        self.device = device
        self.block_size = device.page_size
        self.pool = BlockPool(device.num_pages, self.block_size)
        self.cache = RadixCache(self.pool)
        self.enable_prefix_cache = enable_prefix_cache
        self.host = host
        self.host_pool = BlockPool(host.num_pages, self.block_size) if host is not None else None
        self._swapped: dict[str, list[int]] = {}
        self._released: dict[str, int] = {}
        """Released leading table entries of a swapped-out windowed request."""
        self.copier = copier or make_copier(device, host)
        self._copying: list[tuple[object, list[int]]] = []
        """(event, device blocks) of swap-outs still copying; the blocks are held till done."""
        self.window = window
        self.null_block = self.pool.allocate(1)[0] if window is not None else None
        """The page released table entries point at (windowed models; never freed)."""

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

    def held_blocks(self, req: Request) -> list[int]:
        """The pages ``req`` holds (its table less the released entries)."""
        if self.null_block is None:
            return list(req.block_table)
        return [b for b in req.block_table if b != self.null_block]

    def release_out_of_window(self, req: Request) -> int:
        """Release the pages before the window of ``req``'s next query; returns how many."""
        if self.window is None:
            return 0
        first_seen = req.num_computed_tokens - self.window + 1
        table, null, released = req.block_table, self.null_block, []
        for i in range(min(max(0, first_seen) // self.block_size, len(table))):
            if table[i] != null:
                released.append(table[i])
                table[i] = null
        if released:
            self.pool.decref(released)
        return len(released)

    def allocate(self, req: Request, num_new_tokens: int) -> bool:
        """Give ``req`` blocks for ``num_new_tokens`` more tokens (first releasing the pages
        behind its window); False if memory is short."""
        self.release_out_of_window(req)
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
            if self.null_block in req.block_table[:n]:  # only the leading pages still held
                n = req.block_table.index(self.null_block)
            if n:
                pages = n * self.block_size
                self.cache.insert(req.token_ids[:pages], req.block_table[:n], req.namespace)
        if req.prefix_handle is not None:
            self.cache.unlock(req.prefix_handle)
            req.prefix_handle = None
        self.pool.decref(self.held_blocks(req))
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
        if self.window is not None:  # NOTE: the window before ``keep`` may be released
            lo = max(0, keep - self.window + 1) // bs
            if self.null_block in req.block_table[lo : -(-keep // bs)]:
                keep = 0  # recompute it all
        num_pages = -(-keep // bs)
        if len(req.block_table) > num_pages:
            self.pool.decref([b for b in req.block_table[num_pages:] if b != self.null_block])
            del req.block_table[num_pages:]
        del req.token_ids[num_tokens:]
        req.num_computed_tokens = keep
        req.recompute_until = min(req.recompute_until, num_tokens)
        return True

    # --- host tier -------------------------------------------------------------------------
    def can_swap_out(self, req: Request) -> bool:
        return (self.host_pool is not None
                and self.host_pool.can_allocate(len(self.held_blocks(req))))

    def swap_out(self, req: Request) -> None:
        """Copy ``req``'s blocks to the host pool and release them on the device."""
        if self.host_pool is None:
            raise RuntimeError("no host pool configured")
        if self.is_swapped(req):
            raise RuntimeError(f"request {req.request_id!r} is already swapped out")
        held = self.held_blocks(req)
        host_blocks = self.host_pool.allocate(len(held))
        done = self.copier.swap_out(self.device, self.host, held, host_blocks)
        if done is not None:  # NOTE: hold the device blocks until the copy has read them
            self.pool.incref(held)
            self._copying.append((done, held))
        self._swapped[req.request_id] = host_blocks
        self._released[req.request_id] = len(req.block_table) - len(held)  # leading entries
        self.free(req, cache=False)

    def can_swap_in(self, req: Request) -> bool:
        return len(self._swapped.get(req.request_id, ())) <= self.num_free_blocks

    def swap_in(self, req: Request) -> bool:
        """Bring ``req``'s KV back from the host pool into new device blocks."""
        host_blocks = self._swapped[req.request_id]
        if not self._make_room(len(host_blocks)):
            return False
        blocks = self.pool.allocate(len(host_blocks))
        req.block_table = [self.null_block] * self._released.pop(req.request_id, 0) + blocks
        self.copier.swap_in(self.host, self.device, host_blocks, blocks)
        self.host_pool.decref(self._swapped.pop(req.request_id))
        return True

    def num_swapped_blocks(self, req: Request) -> int:
        return len(self._swapped.get(req.request_id, ()))

    def is_swapped(self, req: Request) -> bool:
        return req.request_id in self._swapped

    def discard_swapped(self, req: Request) -> None:
        """Drop a swapped-out copy (abort while swapped)."""
        blocks = self._swapped.pop(req.request_id, None)
        self._released.pop(req.request_id, None)
        if blocks:
            self.host_pool.decref(blocks)
