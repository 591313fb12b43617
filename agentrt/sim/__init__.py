"""The discrete-event simulator of interceptions: the engine's policy code on simulated time.

Not part of the runtime (nothing in the engine or the scheduler imports it): it replays a
workload (:mod:`.workload`: InferCept's Table 1 mixture) through the production scheduling
policies (:mod:`agentrt.scheduler.policies`) and interception handling
(:mod:`agentrt.intercept`), counting only where each request's KV is (:mod:`.simulator`,
metrics in :mod:`.sim_stats`). :mod:`.lamps_toy` runs LAMPS's toy example exactly.
``benchmarks/sim_interception.py`` is its command line.
"""

from agentrt.sim.simulator import SimConfig, SimResult, Simulator, simulate
from agentrt.sim.workload import TABLE1, RequestSpec, table1_requests

__all__ = ["TABLE1", "RequestSpec", "SimConfig", "SimResult", "Simulator", "simulate",
           "table1_requests"]
