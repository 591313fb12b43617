"""Scheduling: which requests compute how many tokens in each step, admitted in the order of a
scheduling policy (:mod:`agentrt.scheduler.policies`: fcfs, arrival, lamps)."""

from agentrt.scheduler.output import ScheduledChunk, SchedulerOutput
from agentrt.scheduler.policies import POLICIES, SchedulingPolicy, get_policy
from agentrt.scheduler.scheduler import Scheduler

__all__ = ["POLICIES", "ScheduledChunk", "Scheduler", "SchedulerOutput", "SchedulingPolicy",
           "get_policy"]
