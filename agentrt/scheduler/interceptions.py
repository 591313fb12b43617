"""InterceptionManager: the engine side of interceptions — it moves paused requests' KV.

A request that pauses for a tool (``keep_kv``, or a hook answering ``Pause``) becomes
INTERCEPTED with its blocks preserved. After every step the handling policy of
:mod:`agentrt.intercept` re-decides, for each request still preserved on the device, whether
to keep it there, swap it to the host pool (within the step's swap budget) or discard it to
the prefix cache; the manager applies the decision through the :class:`KVCacheManager` and
keeps the counters. On resume the request goes back to the scheduler: a discarded one
re-matches what survived in the prefix cache and recomputes the rest in chunks; a swapped
one is swapped in at admission, within the budget.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from agentrt.core.request import Interception, Pause, Request, RequestStatus
from agentrt.intercept import (
    CostModel,
    DurationEstimator,
    StepContext,
    Strategy,
    SwapBudget,
    get_handling,
)
from agentrt.kvcache.manager import KVCacheManager

__all__ = ["InterceptionManager", "InterceptionStats"]


@dataclass
class InterceptionStats:
    """Engine-wide interception counters."""

    num_interceptions: int = 0
    """Every pause: for a tool, and a session's hold between two calls (the local backend
    keeps each call's KV for the next), released or aborted ones included."""
    num_recomputed_tokens: int = 0
    num_swapped_out_tokens: int = 0
    num_swapped_in_tokens: int = 0
    preserved_seconds: float = 0.0
    swap_seconds: float = 0.0
    waste_bytes_seconds: float = 0.0
    num_preserve: int = 0
    """Pauses resumed with their KV still on the device (one released or aborted while
    paused is not counted in any of ``num_preserve`` / ``num_discard`` / ``num_swap``)."""
    num_discard: int = 0
    """Pauses resumed after their KV was discarded (recomputed from what the prefix cache
    kept)."""
    num_swap: int = 0
    """Pauses resumed after their KV was swapped to the host pool (swapped back in)."""

    @property
    def waste_gb_seconds(self) -> float:
        return self.waste_bytes_seconds / 1e9


@dataclass
class _PausedView:
    """A preserved request as the handling policy sees it (plain numbers)."""

    job_id: str
    context_len: int
    elapsed: float
    kind: str
    expected_duration: float | None


def _view(req: Request, now: float, kv: KVCacheManager) -> _PausedView:
    # NOTE: KV moves and idles in whole pages, so C counts the page slots the request holds
    # (a windowed request holds only its window's pages)
    it = req.interception
    return _PausedView(req.request_id, len(kv.held_blocks(req)) * kv.block_size,
                       now - it.start_time,
                       it.kind, it.expected_duration)


class InterceptionManager:
    def __init__(self, kv: KVCacheManager, handling: str, cost: CostModel) -> None:
        self.kv = kv
        self.handling = get_handling(handling)
        self.cost = cost
        self.estimator = DurationEstimator()
        self.budget = SwapBudget()
        self.paused: dict[str, Request] = {}
        self.stats = InterceptionStats()
        self._running_tokens = 0

    # --- lifecycle -------------------------------------------------------------------------
    def intercept(self, req: Request, pause: Pause | None = None) -> None:
        """``req`` finished a segment with its KV kept: it is now INTERCEPTED, preserved."""
        pause = pause or req.pending_pause or Pause()
        now = time.monotonic()
        req.pending_pause = None
        req.status = RequestStatus.INTERCEPTED
        req.interception = Interception(pause.kind, pause.expected_duration, now,
                                        req.num_computed_tokens, changed_time=now)
        req.stats.num_interceptions += 1
        self.stats.num_interceptions += 1
        self.paused[req.request_id] = req

    def annotate(self, req: Request, kind: str, expected_duration: float | None) -> None:
        """Tell the manager what a paused request waits for (learned after it paused)."""
        if req.interception is not None:
            req.interception.kind = kind
            req.interception.expected_duration = expected_duration

    def resume(self, req: Request) -> None:
        """The tool returned: close the interception's books; the caller re-queues ``req``."""
        self.paused.pop(req.request_id, None)
        it = req.interception
        if it is None:
            return
        now = time.monotonic()
        self._end_preserved(req, now)
        req.stats.intercepted_seconds += now - it.start_time
        req.stats.strategies.append(it.strategy)
        self.estimator.observe(it.kind, now - it.start_time)
        setattr(self.stats, f"num_{it.strategy}", getattr(self.stats, f"num_{it.strategy}") + 1)

    def forget(self, req: Request) -> None:
        """``req`` is released or aborted while paused (its KV is freed by the engine)."""
        if self.paused.pop(req.request_id, None) is not None:
            self._end_preserved(req, time.monotonic())

    # --- every step ------------------------------------------------------------------------
    def begin_step(self, batch_tokens: int, running_tokens: int, largest_swap_in: int) -> None:
        """Open the step's swap budget (sized so the copies hide behind the forward pass)."""
        self._running_tokens = running_tokens
        host_free = self.kv.host_pool.num_free * self.kv.block_size if self.kv.host_pool else 0
        self.budget.start_step(self.cost.swap_budget_tokens(batch_tokens), host_free,
                               self.kv.num_free_blocks * self.kv.block_size,
                               largest_waiting_in=largest_swap_in)

    def end_step(self, running_tokens: int, batch_tokens: int, memory_pressure: bool) -> None:
        """Re-decide every preserved request (rent-or-buy) and apply swaps and discards."""
        now = time.monotonic()
        views = [_view(r, now, self.kv) for r in self.paused.values()
                 if r.interception.strategy == "preserve"]
        if views:
            ctx = StepContext(self.cost, self.estimator, self.budget, running_tokens, batch_tokens,
                              memory_pressure)
            for d in self.handling.decide(views, ctx):
                self.move(self.paused[d.job_id], d.strategy)
        self.budget.end_step()

    def move(self, req: Request, strategy: Strategy) -> None:
        """Take a preserved request's KV to ``strategy`` (swap out or discard) now."""
        if strategy is Strategy.SWAP and not self.kv.can_swap_out(req):
            return  # the host pool filled up meanwhile: it stays preserved
        self._end_preserved(req, time.monotonic())
        req.interception.strategy = strategy.value
        if strategy is Strategy.SWAP:
            t0 = time.perf_counter()
            tokens = len(self.kv.held_blocks(req)) * self.kv.block_size
            self.kv.swap_out(req)
            self._count_swap(req, tokens, time.perf_counter() - t0, into_device=False)
        elif strategy is Strategy.DISCARD:
            req.recompute_until = max(req.recompute_until, req.num_computed_tokens)
            self.kv.reset(req)

    def reclaim(self, num_blocks: int) -> bool:
        """Memory is short: discard preserved requests (oldest pause first) until
        ``num_blocks`` are free or nothing is left; pinned under the ``preserve`` policy."""
        if self.handling.name == "preserve":
            return False
        for req in sorted(self.paused.values(), key=lambda r: r.interception.start_time):
            if self.kv.num_free_blocks >= num_blocks:
                break
            if req.interception.strategy == "preserve":
                self.move(req, Strategy.DISCARD)
        return self.kv.num_free_blocks >= num_blocks

    def swap_in(self, req: Request) -> bool:
        """Bring a resumed swapped request's KV back if the budget and memory allow."""
        tokens = self.kv.num_swapped_blocks(req) * self.kv.block_size
        if not self.budget.grant_in(tokens):
            return False
        t0 = time.perf_counter()
        if not self.kv.swap_in(req):
            self.budget.num_in -= tokens
            return False
        self._count_swap(req, tokens, time.perf_counter() - t0, into_device=True)
        return True

    # --- helpers ---------------------------------------------------------------------------
    def _end_preserved(self, req: Request, now: float) -> None:
        """Book the preserved interval that ends now: idle KV memory × time."""
        it = req.interception
        if it is None or it.strategy != "preserve":
            return
        seconds = max(0.0, now - it.changed_time)
        it.changed_time = now
        waste = seconds * it.context_len * self.cost.kv_bytes_per_token
        req.stats.preserved_seconds += seconds
        req.stats.waste_bytes_seconds += waste
        self.stats.preserved_seconds += seconds
        self.stats.waste_bytes_seconds += waste

    def _count_swap(self, req: Request, tokens: int, seconds: float, into_device: bool) -> None:
        req.stats.num_swapped_tokens += tokens
        if into_device:
            self.stats.num_swapped_in_tokens += tokens
        else:
            self.stats.num_swapped_out_tokens += tokens
        self.stats.swap_seconds += seconds
        # NOTE: the copy is synchronous here, so the whole batch waits for it.
        held = self._running_tokens + tokens
        self.add_waste(req, seconds * held * self.cost.kv_bytes_per_token)

    def add_waste(self, req: Request | None, bytes_seconds: float) -> None:
        """Book waste (recompute stalls, synchronous swaps) to the engine and ``req``."""
        self.stats.waste_bytes_seconds += bytes_seconds
        if req is not None:
            req.stats.waste_bytes_seconds += bytes_seconds
