"""SimStats: what the interception simulator counts; SimResult: the metrics of one run.

The metrics are InferCept's, defined here once:

* throughput — completed requests per simulated second; a run lasts until its last request
  completes (or the time limit), so a slowly draining queue lowers it;
* normalised latency — median over completed requests of (E2E − intercepted time) / output
  tokens, seconds per token;
* TTFT — first output token minus arrival, mean;
* recompute share — the time recomputed tokens add to their iterations,
  T_fwd(all) − T_fwd(all − recomputed), over the total forward time;
* waste (GB·s) — preserved paused KV × time, plus all KV held × the time recompute adds to
  iterations, plus all KV held × synchronous swap stalls (InferCept's memory × time).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from agentrt.intercept.cost import CostModel
from agentrt.sim.workload import SimRequest

__all__ = ["SimResult", "SimStats"]


@dataclass(frozen=True)
class SimResult:
    policy: str
    handling: str
    num_requests: int
    num_completed: int
    sim_seconds: float
    throughput: float
    """Completed requests per simulated second."""
    median_normalized_latency: float
    """Seconds per output token, intercepted time excluded."""
    mean_ttft: float
    recompute_share: float
    waste_gb_s: float
    num_recomputed_tokens: int
    num_swapped_tokens: int
    """Tokens swapped out (each comes back in once)."""
    num_preemptions: int
    strategy_counts: dict[str, int] = field(default_factory=dict)
    """Interceptions by where their KV was when they ended (preserve, discard, swap)."""
    peak_kv_tokens: int = 0


@dataclass
class SimStats:
    kv_bytes_per_token: float
    forward_seconds: float = 0.0
    recompute_seconds: float = 0.0
    waste_bytes_seconds: float = 0.0
    num_recomputed_tokens: int = 0
    num_swapped_tokens: int = 0
    num_preemptions: int = 0
    peak_kv_tokens: int = 0
    strategies: Counter[str] = field(default_factory=Counter)

    def book_forward(self, cost: CostModel, num_tokens: int,
                     num_recomputed: int) -> tuple[float, float]:
        """An iteration of ``num_tokens`` tokens, ``num_recomputed`` of them recomputed;
        returns its time and the part the recompute adds."""
        t_fwd = cost.t_fwd(num_tokens)
        t_rec = t_fwd - cost.t_fwd(num_tokens - num_recomputed)
        self.forward_seconds += t_fwd
        self.recompute_seconds += t_rec
        self.num_recomputed_tokens += num_recomputed
        return t_fwd, t_rec

    def book_waste(self, dt: float, preserved_tokens: int, held_tokens: int,
                   held_idle: float) -> None:
        """``dt`` seconds pass with ``preserved_tokens`` of paused KV idle, and all
        ``held_tokens`` idle for ``held_idle`` of them (recompute, synchronous swaps)."""
        m = self.kv_bytes_per_token
        self.waste_bytes_seconds += m * (preserved_tokens * dt + held_tokens * held_idle)

    def result(self, policy: str, handling: str, requests: Sequence[SimRequest],
               seconds: float) -> SimResult:
        done = [r for r in requests if r.finish_time is not None]
        norm = [(r.finish_time - r.arrival_time - r.intercepted) / max(r.num_output, 1)
                for r in done]
        ttft = [r.first_token_time - r.arrival_time for r in done]
        fwd = self.forward_seconds
        return SimResult(
            policy=policy, handling=handling, num_requests=len(requests),
            num_completed=len(done), sim_seconds=seconds,
            throughput=len(done) / seconds if seconds else 0.0,
            median_normalized_latency=statistics.median(norm) if norm else math.nan,
            mean_ttft=statistics.fmean(ttft) if ttft else math.nan,
            recompute_share=self.recompute_seconds / fwd if fwd else 0.0,
            waste_gb_s=self.waste_bytes_seconds / 1e9,
            num_recomputed_tokens=self.num_recomputed_tokens,
            num_swapped_tokens=self.num_swapped_tokens, num_preemptions=self.num_preemptions,
            strategy_counts=dict(self.strategies), peak_kv_tokens=self.peak_kv_tokens)
