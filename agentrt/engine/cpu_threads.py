"""How many threads a CPU decode step runs: all of them while each gets its CPU, fewer while
other processes take cores.

A decode step (:mod:`.cpu_step`) splits each linear layer's rows across an OpenMP team, and the
team meets after each layer's kernels: about 150 times in a step of a 24-layer model. When
another process runs on one of the team's cores — a tool's subprocess while the model keeps
writing (partial execution), a second agent, the user's own programs — the kernel shares that
core between the two, and at every meeting the whole team waits for the thread it preempted.
On 2 cores beside one busy process (a Python loop), a 2-thread step of a 0.5B Q4_K_M model
took 20 ms at the median and up to 190 ms, where one thread took 13–17 ms; 60 steps took
3.1 s with two threads against 1.3 s with one (``benchmarks/contention.py``).

:class:`ThreadGovernor` reads what each thread of the team got of its CPU during each step
(``DecodeStep.run``'s ``usage``). A thread that the kernel preempted and that ran less than
:data:`STARVED` of the step's wall time marks the step as contended; after
:data:`STRIKES` contended steps in a row the team shrinks by the number of such threads. While
it is smaller than allowed, every ``interval`` steps one step probes a thread more: if no
thread of that step was starved the team grows back, otherwise the interval doubles (from
:data:`PROBE_EVERY` up to :data:`MAX_PROBE_EVERY` steps). On an idle machine no step is
contended and the team stays whole; the measurement costs two empty parallel regions a step.

``EngineConfig(cpu_decode_threads="fixed")`` always runs the whole team.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["MAX_PROBE_EVERY", "PROBE_EVERY", "STARVED", "STRIKES", "ThreadGovernor"]

STARVED = 0.75
"""A preempted thread that ran less than this fraction of a step's wall time was starved."""
STRIKES = 2
"""Contended steps in a row before the team shrinks (one can be a passing disturbance)."""
PROBE_EVERY = 8
"""Steps between probes of one thread more, after the team shrank or grew."""
MAX_PROBE_EVERY = 32
"""The longest interval between probes (each failed probe doubles it)."""
MIN_WALL = 2e-4
"""Steps shorter than this (seconds) are not judged: too short to tell."""


class ThreadGovernor:
    """Chooses each CPU decode step's team size from what the previous steps' threads got.

    Call :meth:`team` before a step and :meth:`observe` with its usage after it; see the module
    docs for the rule. Not thread-safe: one engine loop owns it.
    """

    def __init__(self) -> None:
        self.size: int | None = None
        """The team size contention allows (None: not yet known, the whole team)."""
        self.shrinks = 0
        """Times the team shrank (for stats and tests)."""
        self._limit = 1
        self._strikes = 0
        self._since = 0
        self._interval = PROBE_EVERY
        self._probing = False

    def team(self, limit: int) -> int:
        """The next step's team size, at most ``limit`` (the threads the engine may use), at
        least 1. Every ``interval`` steps below ``limit`` this is one more than :attr:`size`: a
        probe, judged by the following :meth:`observe`."""
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self._limit = limit
        size = limit if self.size is None else min(self.size, limit)
        self._probing = size < limit and self._since >= self._interval
        return size + 1 if self._probing else size

    def observe(self, wall: float, cpu: Sequence[float], preempted: Sequence[float]) -> None:
        """Judge the step just run with the team :meth:`team` gave: its wall seconds, and per
        team thread its CPU seconds and involuntary context switches (negative: unknown)."""
        self._since += 1
        probing, self._probing = self._probing, False
        if wall < MIN_WALL:
            return
        starved = sum(1 for c, p in zip(cpu, preempted, strict=True)
                      if c >= 0 and p > 0 and c < STARVED * wall)
        size = len(cpu) - 1 if probing else len(cpu)
        if probing:
            if starved == 0:
                self._resize(min(size + 1, self._limit))
                self._interval = PROBE_EVERY
            else:
                self._since, self._interval = 0, min(2 * self._interval, MAX_PROBE_EVERY)
            return
        self._strikes = self._strikes + 1 if starved else 0
        if self._strikes >= STRIKES and size > 1:
            self._resize(max(1, size - starved))
            self.shrinks += 1
            self._interval = PROBE_EVERY

    def _resize(self, size: int) -> None:
        self.size = None if size >= self._limit else size
        self._strikes = self._since = 0
