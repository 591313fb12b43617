"""Continuous batching with chunked prefill under a per-step token budget.

Every step, running requests are served first, in admission order: each gets all its pending
tokens (one, for a decoding request) up to the remaining token budget, so prefill chunks and
decodes share one forward pass. When blocks run out, paused requests' KV is reclaimed first
(discarded to the prefix cache, unless the handling policy pins it); then the most recently
admitted running request is preempted by recompute: its computed pages go to the prefix
cache and it rejoins the waiting queue. Waiting requests are then admitted in the order the
scheduling policy gives (fcfs, arrival or lamps) while the budget, ``max_num_seqs`` and free
blocks allow (one short of blocks preempts, by recompute, waiting requests after it in that
order that hold KV); a swapped-out request is swapped in first, within the step's swap budget.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from agentrt.core.request import Request, RequestStatus
from agentrt.kvcache.manager import KVCacheManager
from agentrt.scheduler.jobs import JobView, SegmentPredictor
from agentrt.scheduler.output import ScheduledChunk, SchedulerOutput
from agentrt.scheduler.policies import SchedulingPolicy, topology_order

__all__ = ["Scheduler"]


class Scheduler:
    def __init__(self, kv: KVCacheManager, max_num_seqs: int, max_num_batched_tokens: int,
                 policy: SchedulingPolicy,
                 predictor: SegmentPredictor) -> None:
        self.kv = kv
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.policy = policy
        self.predictor = predictor
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self.reclaim: Callable[[int], bool] = lambda num_blocks: False
        """Frees ``num_blocks`` of paused requests' KV if it can (set by the engine)."""
        self.swap_in: Callable[[Request], bool] = lambda req: False
        """Brings a swapped request's KV back within the swap budget (set by the engine)."""

    def add(self, req: Request) -> None:
        req.status = RequestStatus.WAITING
        req.enqueue_time = time.monotonic()
        self.waiting.append(req)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    @property
    def num_running_tokens(self) -> int:
        return sum(r.num_computed_tokens for r in self.running)

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
            while not self._allocate(req, n):
                victim = self.running[-1]
                self._preempt(victim, out)
                if victim is req:
                    break
            else:
                out.chunks.append(ScheduledChunk(req, n))
                budget -= n
                i += 1
        self._admit(out, budget)
        return out

    def _admit(self, out: SchedulerOutput, budget: int) -> None:
        """Admit waiting requests in policy order until budget, seats or memory run out."""
        admitted: list[JobView] = []
        jobs = self._ordered_jobs()
        for job in jobs:
            req = job.request
            if budget <= 0 or len(self.running) >= self.max_num_seqs:
                break
            if self.kv.is_swapped(req) and not self.swap_in(req):
                continue  # its swap-in waits for budget; others may still fit
            if not req.block_table:
                hit = self.kv.match_prefix(req)
                req.stats.num_cached_tokens += hit
                out.num_cached_tokens += hit
            n = min(req.num_pending_tokens, budget)
            if not self._allocate(req, n) and not self._preempt_waiting(req, n, jobs, out):
                break
            self.waiting.remove(req)
            req.status = RequestStatus.RUNNING
            self.running.append(req)
            out.chunks.append(ScheduledChunk(req, n))
            budget -= n
            admitted.append(job)
        passed = [j for j in jobs if j.request in self.waiting]
        self.policy.on_step(admitted, passed)

    def _ordered_jobs(self) -> list[JobView]:
        views = [self.predictor.view(r) for r in self.waiting]
        return topology_order(self.policy.order(views, self.num_running_tokens))

    def _allocate(self, req: Request, n: int) -> bool:
        if self.kv.allocate(req, n):
            return True
        return self.reclaim(self.kv.blocks_needed(req, n)) and self.kv.allocate(req, n)

    def _preempt_waiting(self, req: Request, n: int, jobs: list[JobView],
                         out: SchedulerOutput) -> bool:
        """Make room for ``req`` by preempting (recompute) waiting requests after it in policy
        order that hold device blocks, lowest priority first. Resumed requests keep their
        preserved KV while they wait; without this, they can fill the pool while nothing runs,
        and no one is ever admitted again."""
        for job in reversed(jobs):
            other = job.request
            if other is req:
                break
            if other in self.waiting and other.block_table:
                self.kv.reset(other)
                other.stats.num_preemptions += 1
                out.preempted.append(other)
                if self._allocate(req, n):
                    return True
        return False

    def _preempt(self, req: Request, out: SchedulerOutput) -> None:
        self.running.remove(req)
        self.kv.reset(req)
        req.stats.num_preemptions += 1
        req.status = RequestStatus.WAITING
        self.waiting.insert(0, req)  # NOTE: keeps its enqueue time, so fcfs puts it first
        out.preempted.append(req)

    def remove(self, req: Request) -> None:
        """Take ``req`` out of the queues (finish, pause or abort); the caller frees its KV."""
        if req in self.running:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)

    @property
    def largest_swap_in(self) -> int:
        """Tokens of the largest swapped-out request waiting to come back."""
        blocks = max((self.kv.num_swapped_blocks(r) for r in self.waiting), default=0)
        return blocks * self.kv.block_size
