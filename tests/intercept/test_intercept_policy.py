"""The interception policy code on hand-computed inputs (no model, no tensors)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentrt.intercept import (
    CostModel,
    DurationEstimator,
    ForwardTimeFit,
    StepContext,
    Strategy,
    SwapBudget,
    crossover_duration,
    estimate,
    get_handling,
)
from agentrt.intercept.waste import (
    chunked_discard_waste,
    discard_waste,
    num_recompute_chunks,
    preserve_waste,
    swap_waste,
)

# t_fwd(x) = 0.01 + 0.001·x; M = 2 bytes; swap 0.1 ms/token; S = 100
COST = CostModel(kv_bytes_per_token=2, fwd_a=0.01, fwd_b=0.001, swap_seconds_per_token=1e-4,
                 saturation_tokens=100)
C, C_OTHER, RUNNING = 200, 300, 40


def test_waste_equations_by_hand():
    assert COST.t_fwd(200) == pytest.approx(0.21)
    assert discard_waste(C, C_OTHER, COST) == pytest.approx(0.21 * 200 * 2 + 0.21 * 300 * 2)
    assert preserve_waste(3.0, C, COST) == pytest.approx(1200)
    assert swap_waste(C, C_OTHER, COST) == pytest.approx(2 * 0.02 * 500 * 2)
    # chunks of S - running = 60 tokens -> n = 4; a 50-token chunk adds 0.05 s to a 40-token step
    assert num_recompute_chunks(C, RUNNING, COST) == 4
    assert chunked_discard_waste(C, C_OTHER, COST, RUNNING) == pytest.approx(42 + 4 * 0.05 * 600)


def test_crossover_duration_separates_preserve_from_discard():
    t_star = crossover_duration(C, C_OTHER, COST, RUNNING)
    assert t_star == pytest.approx(162 / (200 * 2))
    below = estimate(C, C_OTHER, t_star * 0.99, COST, RUNNING)
    above = estimate(C, C_OTHER, t_star * 1.01, COST, RUNNING)
    assert below.best_on_device is Strategy.PRESERVE
    assert above.best_on_device is Strategy.DISCARD
    assert estimate(C, C_OTHER, t_star, COST, RUNNING).preserve == pytest.approx(above.discard)


def test_calculator_preserves_and_chatbot_does_not():
    calculator = estimate(C, C_OTHER, 9e-5, COST, RUNNING)  # InferCept Table 1 means
    chatbot = estimate(C, C_OTHER, 28.6, COST, RUNNING)
    assert calculator.best() is Strategy.PRESERVE
    assert chatbot.best(can_swap=False) is Strategy.DISCARD
    assert chatbot.best() is Strategy.SWAP


@dataclass
class P:
    job_id: str
    context_len: int
    elapsed: float
    kind: str = "tool"
    expected_duration: float | None = None


def ctx(budget_tokens: int = 0, host_free: int = 10_000, **kw) -> StepContext:
    budget = SwapBudget()
    budget.start_step(budget_tokens, host_free=host_free, device_free=0)
    return StepContext(COST, DurationEstimator(), budget, running_tokens=C_OTHER,
                       batch_tokens=RUNNING, **kw)


def test_least_waste_swaps_largest_waste_first_within_budget():
    paused = [P("small", 100, 30.0), P("big", 400, 30.0), P("mid", 200, 30.0)]
    c = ctx(budget_tokens=450)
    decisions = {d.job_id: d.strategy for d in get_handling("least-waste").decide(paused, c)}
    # "big" (most waste) takes 400 of the 450 tokens; the others no longer fit, and after 30 s
    # their preserve waste exceeds the chunked-discard cost
    assert decisions == {"big": Strategy.SWAP, "mid": Strategy.DISCARD,
                         "small": Strategy.DISCARD}
    assert c.budget.holds() and c.budget.num_out == 400


def test_rent_or_buy_preserves_until_elapsed_exceeds_discard_cost():
    handling = get_handling("least-waste")
    t_star = crossover_duration(C, C_OTHER, COST, RUNNING)
    assert handling.decide([P("r", C, t_star * 0.5)], ctx()) == []
    [d] = handling.decide([P("r", C, t_star * 1.5)], ctx())
    assert d.strategy is Strategy.DISCARD
    # a known long kind is discarded at once; no pressure means nothing is wasted at all
    assert handling.decide([P("r", C, 0.0, expected_duration=28.6)], ctx())[0].strategy \
        is Strategy.DISCARD
    assert handling.decide([P("r", C, 100.0)], ctx(memory_pressure=False)) == []


def test_duration_estimator_learns_per_kind_and_never_undercuts_elapsed():
    est = DurationEstimator()
    assert est.estimate("search", elapsed=0.2) == 0.2  # no history: rent-or-buy
    for d in (1.0, 2.0, 3.0):
        est.observe("search", d)
    assert est.estimate("search") == pytest.approx(2.0)
    assert est.estimate("search", elapsed=5.0) == 5.0
    assert est.estimate("search", hint=0.5) == 0.5
    assert est.estimate("calculator") == 0.0


@given(st.lists(st.tuples(st.sampled_from(["step", "in", "out"]),
                          st.integers(0, 500), st.integers(0, 500)), max_size=60))
def test_swap_budget_constraints_always_hold(ops):
    b = SwapBudget()
    b.start_step(100, host_free=300, device_free=200)
    for op, n, m in ops:
        if op == "step":
            b.end_step()
            b.start_step(n, host_free=m, device_free=n + m, new_tokens=n // 3,
                         largest_waiting_in=m)
            continue
        before = (b.num_in, b.num_out)
        granted = b.grant_in(n) if op == "in" else b.grant_out(n)
        assert b.holds()
        assert b.num_in + b.num_out <= b.credit
        if not granted:
            assert (b.num_in, b.num_out) == before


def test_forward_time_fit_recovers_a_profile():
    fit = ForwardTimeFit()
    for x in (1, 1, 8, 32, 128, 256, 384):
        fit.add(x, 0.0241 + 3.28e-4 * x + 1.3e-8 * x * x)
    a, b, c = fit.coefficients()
    assert (a, b, c) == pytest.approx((0.0241, 3.28e-4, 1.3e-8), rel=1e-3)


def test_unknown_handling_names_are_clear_errors():
    with pytest.raises(ValueError, match="unknown interception handling 'keep'; choose from"):
        get_handling("keep")
    assert math.isinf(CostModel(1, 0, 1).t_swap(1))
