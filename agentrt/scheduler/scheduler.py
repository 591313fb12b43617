"""Continuous batching with chunked prefill under a per-step token budget.

Every step, running requests are served first, in admission order: each gets all its pending
tokens (one, for a decoding request) up to the remaining token budget, so prefill chunks and
decodes share one forward pass. When blocks run out, the most recently admitted running
request is preempted by recompute: its computed pages go to the prefix cache and it rejoins
the front of the waiting queue. Waiting requests are then admitted in queue order while the
budget, ``max_num_seqs`` and free blocks allow.
"""

from __future__ import annotations

from collections import deque

from agentrt.core.request import Request, RequestStatus
from agentrt.kvcache.manager import KVCacheManager
from agentrt.scheduler.output import ScheduledChunk, SchedulerOutput

__all__ = ["Scheduler"]


class Scheduler:
    def __init__(self, kv: KVCacheManager, max_num_seqs: int, max_num_batched_tokens: int) -> None:
        self.kv = kv
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []

    def add(self, req: Request) -> None:
        req.status = RequestStatus.WAITING
        self.waiting.append(req)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.max_num_batched_tokens
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            n = min(req.num_pending_tokens, budget)
            if n <= 0:
                i += 1
                continue
            while not self.kv.allocate(req, n):
                victim = self.running[-1]
                self._preempt(victim, out)
                if victim is req:
                    break
            else:
                out.chunks.append(ScheduledChunk(req, n))
                budget -= n
                i += 1
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            if not req.block_table:
                hit = self.kv.match_prefix(req)
                req.stats.num_cached_tokens += hit
                out.num_cached_tokens += hit
            n = min(req.num_pending_tokens, budget)
            if not self.kv.allocate(req, n):
                break
            self.waiting.popleft()
            req.status = RequestStatus.RUNNING
            self.running.append(req)
            out.chunks.append(ScheduledChunk(req, n))
            budget -= n
        return out

    def _preempt(self, req: Request, out: SchedulerOutput) -> None:
        self.running.remove(req)
        self.kv.reset(req)
        req.stats.num_preemptions += 1
        req.status = RequestStatus.WAITING
        self.waiting.appendleft(req)
        out.preempted.append(req)

    def remove(self, req: Request) -> None:
        """Take ``req`` out of the queues (finish, pause or abort); the caller frees its KV."""
        if req in self.running:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
