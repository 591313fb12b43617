"""The interception simulator: LAMPS's toy example (golden) and bookkeeping on Table 1.

Everything here drives the production policy code (agentrt.scheduler.policies,
agentrt.intercept); nothing needs torch.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from agentrt.intercept import CostModel, Strategy
from agentrt.scheduler.policies import get_policy, lamps_score
from agentrt.sim.lamps_toy import TOY_COST, run_toy
from agentrt.sim.simulator import SimConfig, Simulator
from agentrt.sim.workload import TABLE1, table1_requests

# --- LAMPS's toy example ------------------------------------------------------------------------


def test_toy_fcfs_golden():
    res = run_toy("fcfs")
    assert res.completion == {"R1": 8, "R3": 12, "R2": 15}
    assert res.mean_completion == pytest.approx(35 / 3)  # 11.67 (the paper prints 11.66)
    # NOTE: pins preemption and tie-breaks: R1 runs first (arrival ties go to the lower id),
    # R3 cannot fit beside R1's preserved 5 units and idles at t=6.
    assert "".join(r[-1] for r in res.schedule) == "111112-133-3-22"


def test_toy_lamps_golden():
    res = run_toy("lamps")
    assert res.completion == {"R3": 4, "R1": 12, "R2": 14}
    assert res.mean_completion == 10.0
    # R3 and R2 start before R1 (memory-over-time order R3 < R2 < R1); at t=11 R2 ranks
    # first but does not fit beside R1's preserved KV, so R1 runs.
    assert "".join(r[-1] for r in res.schedule) == "332311111--122"


def test_toy_arrival_equals_fcfs():
    assert run_toy("arrival").completion == run_toy("fcfs").completion


@dataclass
class _Job:
    job_id: str
    context_len: int
    predicted_output: int
    predicted_after: int
    predicted_interception: float | None
    strategy: Strategy | None
    arrival_time: float = 0.0
    enqueue_time: float = 0.0


R1 = _Job("R1", 0, 5, 1, 2.0, Strategy.PRESERVE)
R2 = _Job("R2", 0, 1, 1, 7.0, Strategy.DISCARD)
R3 = _Job("R3", 0, 2, 1, 1.0, Strategy.SWAP)


def test_toy_scores_at_t0():
    # C_other = the other waiting jobs' c0 + a: R1 sees 3, R2 sees 7, R3 sees 6.
    assert lamps_score(R1, TOY_COST, 3) == pytest.approx(12.5 + 10 + 5.5)  # 28
    assert lamps_score(R3, TOY_COST, 6) == pytest.approx(2 + 0 + 2.5)  # 4.5
    # Chunked discard (Eq. 4, one chunk): T_fwd(1)·1/2 + T_fwd(1)·7 = 7.5, plus 0.5 + 1.5.
    # (Eq. 1's unchunked T_fwd(C)·C would give 10; the order is the same.)
    assert lamps_score(R2, TOY_COST, 7) == pytest.approx(9.5)
    assert get_policy("lamps", TOY_COST).order([R1, R2, R3]) == [R3, R2, R1]


def test_c_other_term_matters():
    """Without C_other, Discard looks cheap and R2 would wrongly rank before R3."""
    assert lamps_score(R2, TOY_COST, 0) < lamps_score(R3, TOY_COST, 0)
    assert lamps_score(R3, TOY_COST, 6) < lamps_score(R2, TOY_COST, 7)


# --- Table 1 workload ---------------------------------------------------------------------------


def test_table1_workload_is_seeded_and_scaled():
    a = table1_requests(1.0, 60, seed=3)
    assert a == table1_requests(1.0, 60, seed=3)
    assert a != table1_requests(1.0, 60, seed=4)
    kinds = {s.kind for r in a for s in r.segments if s.kind}
    assert kinds <= {aug.kind for aug in TABLE1} and len(kinds) >= 4
    half = table1_requests(1.0, 60, seed=3, duration_scale=0.5)
    for r, h in zip(a, half, strict=True):
        assert r.segments[-1].kind is None and len(r.segments) >= 2
        for s, t in zip(r.segments, h.segments, strict=True):
            assert t.duration == pytest.approx(s.duration * 0.5)


# A GPT-J-like cost model on a deliberately small pool, so that memory binds.
COST = CostModel(kv_bytes_per_token=458_752, fwd_a=24.1e-3, fwd_b=0.328e-3, fwd_c=1.3e-8,
                 swap_seconds_per_token=40e-6, saturation_tokens=384)
COMBOS = [("discard", "fcfs"), ("discard", "arrival"), ("preserve", "arrival"),
          ("swap", "arrival"), ("least-waste", "arrival"), ("least-waste", "lamps")]


def _run_audited(config: SimConfig, requests) -> Simulator:
    sim = Simulator(config, requests)
    while not sim.finished:
        sim.step()
        sim.audit()  # pools add up and stay within capacity after every iteration
    return sim


@pytest.fixture(scope="module")
def small_workload():
    return table1_requests(0.5, 40, seed=1, duration_scale=0.1)


@pytest.mark.parametrize(("handling", "policy"), COMBOS)
def test_every_policy_completes_within_memory(small_workload, handling, policy):
    config = SimConfig(COST, kv_capacity_tokens=12_000, host_capacity_tokens=30_000,
                       policy=policy, handling=handling, max_time=3_000)
    sim = _run_audited(config, small_workload)
    res = sim.result()
    assert res.num_completed == res.num_requests == len(small_workload)
    assert 0 < res.peak_kv_tokens <= 12_000
    assert sim.used == sim.host_used == 0  # everything released at the end
    num_interceptions = sum(len(r.segments) - 1 for r in small_workload)
    assert sum(res.strategy_counts.values()) == num_interceptions
    assert res.num_recomputed_tokens == 0 or res.recompute_share > 0
    if handling == "discard":
        assert set(res.strategy_counts) == {"discard"}


def test_discard_recomputes_what_swap_moves(small_workload):
    """With ample memory nothing is preempted: discard recomputes exactly the context each
    interception held, swap copies exactly that, preserve neither."""
    results = {h: Simulator(SimConfig(COST, 10**7, 10**7, policy="arrival", handling=h),
                            small_workload).run() for h in ("discard", "swap", "preserve")}
    assert results["discard"].num_recomputed_tokens == results["swap"].num_swapped_tokens > 0
    assert results["preserve"].num_recomputed_tokens == 0
    assert results["preserve"].num_swapped_tokens == 0
    assert results["swap"].num_recomputed_tokens == 0
    assert all(r.num_preemptions == 0 for r in results.values())
    assert results["discard"].recompute_share > results["preserve"].recompute_share == 0


def test_lamps_rescores_a_new_segment_between_refreshes():
    """A resumed segment (new context length) is scored afresh even when scores are only
    refreshed every few orders."""
    policy = get_policy("lamps", TOY_COST, refresh_interval=100)
    short = _Job("S", 0, 2, 0, None, None)
    long = _Job("L", 0, 3, 0, None, None)
    assert policy.order([long, short]) == [short, long]
    short.context_len, short.predicted_output = 50, 1  # resumed with a long context
    assert policy.order([long, short]) == [long, short]
