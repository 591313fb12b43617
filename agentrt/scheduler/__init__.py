"""Scheduling: which requests compute how many tokens in each step."""

from agentrt.scheduler.output import ScheduledChunk, SchedulerOutput
from agentrt.scheduler.scheduler import Scheduler

__all__ = ["ScheduledChunk", "Scheduler", "SchedulerOutput"]
