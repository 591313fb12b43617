"""Discrete-event simulator of interceptions, driven by the production policy code.

It runs iteration by iteration: each iteration lasts ``cost.t_fwd(scheduled tokens)`` (plus
any synchronous swap stall), the only thing simulated is bookkeeping — which request holds how
many KV tokens where. The decisions come from the same objects the engine uses: the
scheduling policy (:func:`get_policy`) orders the waiting queue, the handling policy
(:func:`get_handling`) decides after every iteration what happens to each preserved paused
request, within a :class:`SwapBudget`, with durations from a :class:`DurationEstimator`.

One iteration, mirroring :mod:`agentrt.scheduler` (continuous batching, chunked prefill):

1. Arrivals and finished interceptions join the waiting queue (a resumed request with its
   ``enqueue_time`` set to when its tool returned; its observation tokens are appended).
2. Running requests get their pending tokens (one, when decoding) within the token budget S;
   when KV runs out, preserved paused requests are discarded (oldest pause first, unless the
   handling is ``preserve``), then the most recently admitted running request is preempted by
   recompute.
3. Waiting requests are admitted in policy order while the budget, seats and memory allow
   (the first that does not fit stops admission); a swapped-out one is swapped in first —
   within the swap budget, or synchronously (a stall) if it was swapped out synchronously.
4. The forward pass runs; a request that completes its segment pauses (or finishes).
5. The handling policy re-decides every preserved paused request (rent-or-buy).

Simplifications: discarded KV is lost (no prefix cache), swapped-out KV frees device memory
at once (the copy hides behind the next iteration), the iteration time depends on scheduled
tokens only. LAMPS's toy example has its own exact semantics: :mod:`.lamps_toy`.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from agentrt.intercept.cost import CostModel
from agentrt.intercept.estimator import DurationEstimator
from agentrt.intercept.handling import StepContext, get_handling
from agentrt.intercept.swap_budget import SwapBudget
from agentrt.intercept.waste import Strategy
from agentrt.scheduler.policies import get_policy
from agentrt.sim.sim_stats import SimResult, SimStats
from agentrt.sim.workload import RequestSpec, SimRequest

__all__ = ["SimConfig", "SimResult", "Simulator", "simulate"]

_FIXED = {"preserve": Strategy.PRESERVE, "discard": Strategy.DISCARD, "swap": Strategy.SWAP}


@dataclass(frozen=True)
class SimConfig:
    """What is simulated: the cost model, the pools and the two policies by name."""

    cost: CostModel
    kv_capacity_tokens: int
    """Device KV pool, in tokens."""
    host_capacity_tokens: int = 0
    """Host swap pool, in tokens."""
    policy: Literal["fcfs", "arrival", "lamps"] = "fcfs"
    handling: Literal["preserve", "discard", "swap", "least-waste"] = "discard"
    max_num_seqs: int = 256
    starvation_threshold: int = 100
    score_refresh_interval: int = 1
    max_time: float = math.inf
    """Stop here even if requests are left."""

    def __post_init__(self) -> None:
        if self.kv_capacity_tokens <= 0 or self.host_capacity_tokens < 0:
            raise ValueError("kv_capacity_tokens must be positive, host_capacity_tokens >= 0")

    @property
    def token_budget(self) -> int:
        """Tokens per iteration: InferCept's saturation point S."""
        return self.cost.saturation_tokens


class Simulator:
    """One run over a fixed list of requests: :meth:`step` until :attr:`finished`."""

    def __init__(self, config: SimConfig, requests: Sequence[RequestSpec]) -> None:
        self.config, self.cost = config, config.cost
        self.policy = get_policy(config.policy, config.cost,
                                 starvation_threshold=config.starvation_threshold,
                                 refresh_interval=config.score_refresh_interval)
        self.handling = get_handling(config.handling)
        self.estimator, self.budget = DurationEstimator(), SwapBudget()
        fixed = _FIXED.get(config.handling)
        self.requests = [SimRequest(s, fixed) for s in requests]
        self.pending = sorted(self.requests, key=lambda r: r.arrival_time, reverse=True)
        """Not yet arrived; popped from the end, earliest first."""
        self.resumes: list[tuple[float, int, SimRequest]] = []
        """Heap of (time the tool returns, tie-break, request)."""
        self._seq = itertools.count()
        self.waiting: list[SimRequest] = []
        self.running: list[SimRequest] = []
        self.preserved: dict[str, SimRequest] = {}
        """Paused requests whose KV is still on the device, in pause order."""
        self.num_done = 0
        self.now = 0.0
        self.used = self.host_used = self.last_batch = 0
        """Device and host KV tokens in use; tokens scheduled in the last iteration."""
        self.stats = SimStats(config.cost.kv_bytes_per_token)

    # --- the loop --------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        return self.num_done == len(self.requests) or self.now >= self.config.max_time

    def run(self) -> SimResult:
        while not self.finished:
            self.step()
        return self.result()

    def step(self) -> None:
        """One iteration (or a jump to the next event when nothing can run)."""
        self._release_events()
        self.budget.start_step(self.cost.swap_budget_tokens(self.last_batch),
                               self.config.host_capacity_tokens - self.host_used,
                               self.config.kv_capacity_tokens - self.used,
                               largest_waiting_in=max((r.num_host for r in self.waiting),
                                                      default=0))
        scheduled, stall = self._schedule()
        num_tokens = sum(scheduled.values())
        self._check_memory()
        if num_tokens == 0 and stall == 0.0:
            self._idle()
        else:
            recomputed = sum(r.num_recompute(n) for r, n in scheduled.items())
            t_fwd, t_rec = self.stats.book_forward(self.cost, num_tokens, recomputed)
            self._pass_time(t_fwd + stall, held_idle=t_rec + stall)
            self.last_batch = num_tokens
            self._advance(scheduled)
        self._handle_paused()
        self.budget.end_step()

    def _release_events(self) -> None:
        while self.pending and self.pending[-1].arrival_time <= self.now:
            r = self.pending.pop()
            self._predict(r)
            self.waiting.append(r)
        while self.resumes and self.resumes[0][0] <= self.now:
            t_end, _, r = heapq.heappop(self.resumes)
            self._resume(r, t_end)

    def _schedule(self) -> tuple[dict[SimRequest, int], float]:
        """Serve running requests, then admit waiting ones in policy order; returns the
        tokens per request and the synchronous swap-in stall."""
        budget, scheduled, stall = self.config.token_budget, {}, 0.0
        i = 0
        while i < len(self.running) and budget > 0:
            r = self.running[i]
            n = min(r.num_pending, budget)
            while not self._allocate(n):
                victim = self.running.pop()
                self._preempt(victim)
                if victim is r:
                    break
            else:
                scheduled[r], budget = n, budget - n
            i += 1
        held = sum(r.num_computed for r in self.running)
        jobs = self.policy.order(self.waiting, held) if self.waiting else []
        admitted: dict[int, SimRequest] = {}
        for r in jobs:
            if budget <= 0 or len(self.running) >= self.config.max_num_seqs:
                break
            if r.num_host:
                num_host, sync = r.num_host, r.swap_sync
                if not self._swap_in(r):
                    continue  # its swap-in waits for budget or memory; others may still fit
                if sync:  # the Swap baseline: the whole batch waits for the copy
                    stall += self.cost.t_swap(num_host)
            n = min(r.num_pending, budget)
            if not self._allocate(n):
                break
            self.running.append(r)
            scheduled[r], budget = n, budget - n
            admitted[id(r)] = r
        if admitted:
            self.waiting = [r for r in self.waiting if id(r) not in admitted]
        self.policy.on_step(admitted.values(), [r for r in jobs if id(r) not in admitted])
        return scheduled, stall

    def _advance(self, scheduled: dict[SimRequest, int]) -> None:
        """The forward pass ran: KV computed; a finished prefill or decode samples a token."""
        for r, n in scheduled.items():
            r.num_computed += n
            r.max_computed = max(r.max_computed, r.num_computed)
            if r.num_pending > 0:
                continue  # a prefill chunk; more to come
            r.num_tokens += 1
            r.num_output += 1
            r.seg_generated += 1
            if r.first_token_time is None:
                r.first_token_time = self.now
            if r.seg_generated == r.segment.decode_len:
                self._end_segment(r)

    def _handle_paused(self) -> None:
        """Ask the handling policy about every paused request still preserved on the device."""
        preserved = list(self.preserved.values())
        if not preserved:
            return
        for p in preserved:
            p.elapsed = self.now - p.pause_time
        running = sum(r.num_computed for r in self.running)
        capacity = self.config.kv_capacity_tokens
        pressure = bool(self.waiting) or capacity - self.used < capacity / 10
        ctx = StepContext(self.cost, self.estimator, self.budget, running, self.last_batch,
                          memory_pressure=pressure)
        granted = -self.budget.num_out
        decisions = self.handling.decide(preserved, ctx)
        granted += self.budget.num_out
        for d in decisions:
            p = self.preserved[d.job_id]
            if d.strategy is Strategy.DISCARD:
                self._discard(p)
            elif d.strategy is Strategy.SWAP:
                in_budget = granted >= p.num_computed
                granted -= p.num_computed if in_budget else 0
                self._swap_out(p, sync=not in_budget)

    # --- state changes ---------------------------------------------------------------------
    def _end_segment(self, r: SimRequest) -> None:
        self.running.remove(r)
        seg = r.segment
        if seg.kind is None:
            self._free(r)
            r.finish_time = self.now
            self.num_done += 1
            self.policy.forget(r.job_id)
            return
        r.is_paused, r.pause_time, r.held_as = True, self.now, Strategy.PRESERVE
        self.preserved[r.job_id] = r
        heapq.heappush(self.resumes, (self.now + seg.duration, next(self._seq), r))

    def _resume(self, r: SimRequest, t_end: float) -> None:
        seg = r.segment
        self.preserved.pop(r.job_id, None)
        self.estimator.observe(seg.kind or "", seg.duration)
        self.stats.strategies[r.held_as.value] += 1
        r.intercepted += seg.duration
        r.is_paused = False
        r.seg_idx += 1
        r.seg_generated = 0
        r.num_tokens += seg.observation_len
        r.enqueue_time = t_end
        self._predict(r)
        self.waiting.append(r)

    def _predict(self, r: SimRequest) -> None:
        """LAMPS's prediction of the next interception: the kind's mean so far."""
        kind = r.segment.kind
        r.predicted_interception = self.estimator.estimate(kind) if kind else None

    def _discard(self, r: SimRequest) -> None:
        if self.preserved.pop(r.job_id, None) is not None:
            r.held_as = Strategy.DISCARD
        self._free(r)

    def _preempt(self, r: SimRequest) -> None:
        """``r`` (already out of the running list) loses its KV and waits again."""
        self._discard(r)
        self.stats.num_preemptions += 1
        self.waiting.insert(0, r)  # NOTE: keeps its enqueue time, so fcfs puts it first

    def _swap_out(self, r: SimRequest, sync: bool) -> None:
        n = r.num_computed
        if sync:  # the whole batch waits for the copy
            self._pass_time(self.cost.t_swap(n), held_idle=self.cost.t_swap(n))
        self.used -= n
        self.host_used += n
        r.num_computed, r.num_host, r.swap_sync = 0, n, sync
        r.held_as = Strategy.SWAP
        del self.preserved[r.job_id]
        self.stats.num_swapped_tokens += n

    def _swap_in(self, r: SimRequest) -> bool:
        """Bring ``r``'s KV back: within the budget, or unconditionally if it left
        synchronously (the caller books the stall)."""
        n = r.num_host
        if not (r.swap_sync or self.budget.can_swap_in(n)) or not self._can_allocate(n):
            return False
        if not r.swap_sync:
            self.budget.grant_in(n)
        self.host_used -= n
        self.used += n
        r.num_computed, r.num_host = n, 0
        return True

    def _free(self, r: SimRequest) -> None:
        self.used -= r.num_computed
        r.num_computed = 0

    def _can_allocate(self, n: int) -> bool:
        free = self.config.kv_capacity_tokens - self.used
        if n > free and self.config.handling != "preserve":  # reclaim preserved paused KV
            for p in list(self.preserved.values()):  # NOTE: oldest pause first
                if free >= n:
                    break
                free += p.num_computed
                self._discard(p)
        return n <= free

    def _allocate(self, n: int) -> bool:
        if not self._can_allocate(n):
            return False
        self.used += n
        return True

    # --- time and results ------------------------------------------------------------------
    def _idle(self) -> None:
        """Nothing could run. Free KV that waiting requests hold if it blocks the queue; else
        let copies progress for one empty iteration if a swapped request waits for budget;
        else wait for the next arrival or returning tool."""
        holder = next((r for r in reversed(self.waiting) if r.num_computed), None)
        if holder is not None:
            self._discard(holder)
            return
        events = [e for e in (self.pending[-1].arrival_time if self.pending else None,
                              self.resumes[0][0] if self.resumes else None) if e is not None]
        if any(r.num_host for r in self.waiting):
            self._pass_time(self.cost.t_fwd(1))
        elif events:
            self._pass_time(max(min(events) - self.now, 0.0))
        else:
            raise RuntimeError("simulation stuck: waiting requests can never fit")

    def _pass_time(self, dt: float, held_idle: float = 0.0) -> None:
        """Advance the clock, booking preserved KV idle for ``dt`` and all held KV idle for
        ``held_idle`` (recompute stretching an iteration, synchronous swaps) as waste."""
        preserved = sum(p.num_computed for p in self.preserved.values())
        self.stats.book_waste(dt, preserved, self.used, held_idle)
        self.now += dt

    def audit(self) -> None:
        """Check the books (tests call this after every step): the KV every request holds
        adds up to each pool's usage, and no request holds KV in both pools."""
        assert sum(r.num_computed for r in self.requests) == self.used
        assert sum(r.num_host for r in self.requests) == self.host_used
        assert not any(r.num_computed and r.num_host for r in self.requests)
        self._check_memory()

    def _check_memory(self) -> None:
        assert 0 <= self.used <= self.config.kv_capacity_tokens, self.used
        assert 0 <= self.host_used <= max(self.config.host_capacity_tokens, 0), self.host_used
        self.stats.peak_kv_tokens = max(self.stats.peak_kv_tokens, self.used)

    def result(self) -> SimResult:
        return self.stats.result(self.config.policy, self.config.handling, self.requests,
                                 self.now)


def simulate(config: SimConfig, requests: Sequence[RequestSpec]) -> SimResult:
    """Run ``requests`` to completion (or ``config.max_time``) and return the metrics."""
    return Simulator(config, requests).run()
