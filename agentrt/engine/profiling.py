"""Profiling: the engine's cost model, measured on this machine and refined while it runs.

At start (``EngineConfig.profile_on_start``) :func:`profile` runs a warm-up request, then
prefill chunks of two sizes and a few decode steps, and fits T_fwd(tokens); :func:`measure_swap`
times a copy to the host pool. Every step then feeds :func:`record_step`, which refits the
model every 64 steps and books the waste of recomputed tokens. The fitted cost reaches the
interception manager and the scheduling policy through :func:`refit_cost`.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING

from agentrt.core.sampling_params import SamplingParams
from agentrt.engine.outputs import EngineStats
from agentrt.scheduler.interceptions import InterceptionStats

if TYPE_CHECKING:
    from agentrt.engine.llm_engine import LLMEngine
    from agentrt.kvcache.manager import KVCacheManager

__all__ = ["REFIT_INTERVAL", "measure_swap", "profile", "record_step", "refit_cost"]

REFIT_INTERVAL = 64
"""Steps between two refits of T_fwd from the online samples."""


def measure_swap(kv: KVCacheManager) -> float:
    """Seconds per token to copy KV to the host pool (inf without one)."""
    if kv.host is None:
        return float("inf")
    n = min(4, kv.host.num_pages, kv.device.num_pages)
    t0 = time.perf_counter()
    kv.copier.swap_out(kv.device, kv.host, list(range(n)), list(range(n)))
    kv.copier.synchronize()
    return (time.perf_counter() - t0) / (n * kv.block_size)


def profile(engine: LLMEngine) -> None:
    """Fit T_fwd(tokens) on this machine: a warm-up request, then prefill chunks of two
    sizes and a few decode steps; the counters start from zero afterwards."""
    vocab, limit = engine.model_config.vocab_size, engine.max_model_len - 8
    sizes = [(min(32, limit), 2), (min(128, limit), 3), (min(48, limit), 1)]
    for k, (n, out) in enumerate(sizes):
        if k == 1:
            engine.fwd_fit.samples.clear()  # drop the warm-up's one-time costs
        ids = [(i * 7919 + k * 104729) % vocab for i in range(max(n, 2))]
        engine.add_request(ids, SamplingParams(max_tokens=out, ignore_eos=True),
                           request_id=f"agentrt-profile-{k}", namespace="agentrt/profile")
        while engine.has_unfinished():
            engine.step()
    engine.clear_prefix_cache()
    refit_cost(engine)
    engine.interceptions.stats = InterceptionStats()
    engine.stats = EngineStats(interceptions=engine.interceptions.stats)


def refit_cost(engine: LLMEngine) -> None:
    """Refit T_fwd from the samples so far; the interception manager and the scheduling
    policy use the new cost from the next step on."""
    a, b, c = engine.fwd_fit.coefficients()
    engine.cost = replace(engine.cost, fwd_a=a, fwd_b=b, fwd_c=c)
    engine.interceptions.cost = engine.cost
    if hasattr(engine.scheduler.policy, "cost"):
        engine.scheduler.policy.cost = engine.cost


def record_step(engine: LLMEngine, num_tokens: int, seconds: float, recomputed: int) -> None:
    """Step counters, the online T_fwd fit, and the waste of recomputing: everyone's KV
    idles while the step spends time on tokens it had computed once already."""
    stats = engine.stats
    stats.num_steps += 1
    stats.forward_seconds += seconds
    engine.fwd_fit.add(num_tokens, seconds)
    if stats.num_steps % REFIT_INTERVAL == 0:
        refit_cost(engine)
    if recomputed:
        stall = seconds * recomputed / num_tokens
        stats.recompute_seconds += stall
        held = engine.scheduler.num_running_tokens
        engine.interceptions.add_waste(None, stall * held * engine.cost.kv_bytes_per_token)
