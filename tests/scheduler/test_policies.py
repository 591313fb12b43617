"""Scheduling policies (fcfs, arrival, lamps) on hand-computed jobs (no model, no tensors)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from agentrt.intercept import CostModel, Strategy
from agentrt.scheduler.policies import POLICIES, get_policy

# t_fwd(x) = 0.01 + 0.001·x; M = 2 bytes; swap 0.1 ms/token; S = 100
COST = CostModel(kv_bytes_per_token=2, fwd_a=0.01, fwd_b=0.001, swap_seconds_per_token=1e-4,
                 saturation_tokens=100)


@dataclass
class J:
    job_id: str
    arrival_time: float
    enqueue_time: float
    context_len: int = 10
    predicted_output: int = 10
    predicted_after: int = 0
    predicted_interception: float | None = None
    strategy: Strategy | None = None


def test_fcfs_sends_resumed_requests_to_the_tail_and_arrival_does_not():
    old_resumed = J("old", arrival_time=0.0, enqueue_time=5.0)
    new = J("new", arrival_time=1.0, enqueue_time=1.0)
    assert [j.job_id for j in get_policy("fcfs").order([old_resumed, new])] == ["new", "old"]
    assert [j.job_id for j in get_policy("arrival").order([new, old_resumed])] == ["old", "new"]


def test_lamps_ranks_by_memory_over_time_and_starvation_keeps_priority():
    policy = get_policy("lamps", COST, starvation_threshold=3)
    long_job = J("long", 0.0, 0.0, context_len=500, predicted_output=200)
    shorts = [J(f"s{i}", 1.0, 1.0, predicted_output=5) for i in range(2)]
    assert policy.order([long_job, *shorts])[-1] is long_job  # SJF without interceptions
    for _ in range(3):
        policy.on_step(admitted=shorts, passed_over=[long_job])
    assert policy.order([*shorts, long_job])[0] is long_job
    policy.on_step(admitted=[long_job], passed_over=shorts)
    assert policy.order([*shorts, long_job])[0] is long_job  # until it completes
    policy.forget("long")
    assert policy.order([*shorts, long_job])[-1] is long_job


def test_unknown_policy_names_are_clear_errors():
    assert POLICIES.names() == ["arrival", "fcfs", "lamps"]
    with pytest.raises(ValueError, match="unknown scheduling policy 'sjf'; choose from"):
        get_policy("sjf")
    with pytest.raises(ValueError, match="the lamps policy needs a CostModel"):
        get_policy("lamps")
