"""Interceptions: what happens to a request's KV while its tool runs, and who runs next.

Pure policy code — numbers in, decisions out, no tensors — shared by the engine
(:mod:`agentrt.scheduler.interceptions`) and the discrete-event simulator
(:mod:`agentrt.intercept.simulator`). Based on InferCept (waste equations, budgeted swap,
chunked recompute) and LAMPS (memory-over-time scheduling).
"""

from agentrt.intercept.cost import CostModel, ForwardTimeFit
from agentrt.intercept.estimator import DurationEstimator
from agentrt.intercept.handling import (
    HANDLINGS,
    Decision,
    HandlingPolicy,
    StepContext,
    get_handling,
)
from agentrt.intercept.policies import POLICIES, Job, SchedulingPolicy, get_policy, lamps_score
from agentrt.intercept.swap_budget import SwapBudget
from agentrt.intercept.waste import Strategy, WasteEstimate, crossover_duration, estimate

__all__ = [
    "HANDLINGS", "POLICIES", "CostModel", "Decision", "DurationEstimator", "ForwardTimeFit",
    "HandlingPolicy", "Job", "SchedulingPolicy", "StepContext", "Strategy", "SwapBudget",
    "WasteEstimate", "crossover_duration", "estimate", "get_handling", "get_policy",
    "lamps_score",
]
