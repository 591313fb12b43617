"""Interceptions: what happens to a request's KV while its tool runs, and who runs next.

Pure policy code — numbers in, decisions out, no tensors — shared by the engine
(:mod:`agentrt.scheduler.interceptions`) and the discrete-event simulator
(:mod:`agentrt.sim`). Based on InferCept (waste equations, budgeted swap, chunked
recompute); the scheduling policies that order admission (LAMPS's memory-over-time among
them) are :mod:`agentrt.scheduler.policies`.
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
from agentrt.intercept.swap_budget import SwapBudget
from agentrt.intercept.waste import Strategy, WasteEstimate, crossover_duration, estimate

__all__ = [
    "HANDLINGS", "CostModel", "Decision", "DurationEstimator", "ForwardTimeFit",
    "HandlingPolicy", "StepContext", "Strategy", "SwapBudget", "WasteEstimate",
    "crossover_duration", "estimate", "get_handling",
]
