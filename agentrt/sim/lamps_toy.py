"""LAMPS's toy example (Fig. 3 / Table 1), run with the production scheduling policies.

Three requests arrive at t=0, each generating ``a`` tokens, calling an API for ``d`` time
units, then generating ``b`` tokens; each has a fixed handling strategy (``Job.strategy``).
The semantics are pinned so the example's completion times come out exactly:

* one iteration = one time unit, batch size 1, memory 1 unit per generated token (the prompt
  is free), a memory budget of 6;
* during the API call Preserve holds ``a``, Discard and Swap hold nothing; after it Discard
  first recomputes its ``a`` tokens one per iteration, Swap's swap-in is free;
* every iteration the ready requests (not in an API call, not done) are ordered by the policy
  — fully preemptive, ties to the lower id — and the first whose current segment's peak
  (``a`` before the API, ``a + b`` after) fits beside the memory all others hold runs.

The policy sees each segment as a :class:`~agentrt.scheduler.policies.Job`: before the API
``c0 = 0``, output ``a``, then ``b`` after an interception of ``d``; after it the context is
``a`` and the output ``b`` — except Discard, whose context is gone: ``c0 = 0`` and it "outputs"
``a + b`` (recompute grows its memory from nothing exactly like decoding). The cost model makes
τ = T_fwd(1) = 1, T_fwd(C) = C, M = 1 and swaps free.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from agentrt.intercept.cost import CostModel
from agentrt.intercept.waste import Strategy
from agentrt.scheduler.policies import get_policy

__all__ = ["LAMPS_TOY", "TOY_COST", "ToyRequest", "ToyResult", "run_toy"]

TOY_COST = CostModel(kv_bytes_per_token=1, fwd_a=0, fwd_b=1, swap_seconds_per_token=0)
TOY_MEMORY = 6


@dataclass(frozen=True)
class ToyRequest:
    request_id: str
    a: int
    """Tokens before the API call."""
    b: int
    """Tokens after it."""
    d: int
    """Duration of the API call."""
    strategy: Strategy


LAMPS_TOY: tuple[ToyRequest, ...] = (
    ToyRequest("R1", a=5, b=1, d=2, strategy=Strategy.PRESERVE),
    ToyRequest("R2", a=1, b=1, d=7, strategy=Strategy.DISCARD),
    ToyRequest("R3", a=2, b=1, d=1, strategy=Strategy.SWAP),
)


@dataclass(frozen=True)
class ToyResult:
    completion: dict[str, int]
    """Completion time per request id."""
    schedule: tuple[str, ...]
    """Which request ran in each iteration ("-" = idle)."""

    @property
    def mean_completion(self) -> float:
        return statistics.fmean(self.completion.values())


@dataclass
class _ToyJob:
    """One toy request in its current segment; the fields up to ``strategy`` are its Job."""

    job_id: str
    context_len: int
    predicted_output: int
    predicted_after: int
    predicted_interception: float | None
    strategy: Strategy
    spec: ToyRequest
    arrival_time: float = 0.0
    enqueue_time: float = 0.0
    done: int = 0
    """Iterations run in the current segment."""
    held: int = 0
    api_end: int | None = None
    finish: int | None = None

    @property
    def after_api(self) -> bool:
        return self.predicted_interception is None

    @property
    def peak(self) -> int:
        return self.spec.a + self.spec.b if self.after_api else self.spec.a

    def run_one(self, t: int) -> None:
        """Run one iteration ending at ``t``."""
        self.done += 1
        discarded = self.after_api and self.strategy is Strategy.DISCARD
        self.held = self.done + (self.spec.a if self.after_api and not discarded else 0)
        if self.done < self.predicted_output:
            return
        if self.after_api:
            self.finish, self.held = t, 0
        else:
            self.api_end = t + self.spec.d
            self.held = self.spec.a if self.strategy is Strategy.PRESERVE else 0

    def resume(self, t: int) -> None:
        """The API call returned at ``t``: the post-API segment becomes the job."""
        s = self.spec
        discarded = self.strategy is Strategy.DISCARD
        self.context_len = 0 if discarded else s.a
        self.predicted_output = s.a + s.b if discarded else s.b
        self.predicted_after, self.predicted_interception = 0, None
        self.api_end, self.done, self.enqueue_time = None, 0, float(t)


def _start(spec: ToyRequest) -> _ToyJob:
    return _ToyJob(spec.request_id, 0, spec.a, spec.b, float(spec.d), spec.strategy, spec)


def run_toy(policy: str, requests: tuple[ToyRequest, ...] = LAMPS_TOY,
            memory: int = TOY_MEMORY) -> ToyResult:
    """Run the toy example under the production scheduling ``policy`` (fcfs, arrival, lamps)."""
    sched = get_policy(policy, TOY_COST)
    jobs = [_start(s) for s in sorted(requests, key=lambda s: s.request_id)]
    t, trace = 0, []
    while any(j.finish is None for j in jobs):
        for j in jobs:
            if j.api_end is not None and j.api_end <= t:
                j.resume(t)
        ready = [j for j in jobs if j.finish is None and j.api_end is None]
        in_api = sum(j.held for j in jobs if j not in ready)
        order = sched.order(ready, held_tokens=in_api)
        total = sum(j.held for j in jobs)
        chosen = next((j for j in order if total - j.held + j.peak <= memory), None)
        sched.on_step([chosen] if chosen else [], [j for j in order if j is not chosen])
        t += 1
        trace.append(chosen.job_id if chosen else "-")
        if chosen:
            chosen.run_one(t)
            if chosen.finish is not None:
                sched.forget(chosen.job_id)
    return ToyResult({j.job_id: j.finish for j in jobs if j.finish is not None}, tuple(trace))
