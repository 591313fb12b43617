"""The thread governor of CPU decode steps (``agentrt.engine.cpu_threads``).

The policy is tested on the observations it is fed (a contended machine cannot be made on
demand in a test); what the C++ step reports as those observations, and that every team size
gives the same output, is tested on real steps in ``tests/models/test_cpu_step.py``.
"""

from __future__ import annotations

import pytest

from agentrt import EngineConfig
from agentrt.engine.cpu_threads import MAX_PROBE_EVERY, PROBE_EVERY, STRIKES, ThreadGovernor

WALL = 0.01


def _idle(team: int) -> tuple[float, list[float], list[float]]:
    return WALL, [WALL * 0.99] * team, [0.0] * team


def _contended(team: int, starved: int = 1) -> tuple[float, list[float], list[float]]:
    """``starved`` threads were preempted and ran 40% of the step."""
    cpu = [WALL * 0.4] * starved + [WALL] * (team - starved)
    return WALL, cpu, [3.0] * starved + [0.0] * (team - starved)


def _step(gov: ThreadGovernor, limit: int, observe) -> int:
    team = gov.team(limit)
    gov.observe(*observe(team))
    return team


def test_an_idle_machine_keeps_the_whole_team():
    gov = ThreadGovernor()
    assert [_step(gov, 4, _idle) for _ in range(200)] == [4] * 200
    assert gov.shrinks == 0 and gov.size is None


def test_one_contended_step_is_forgiven_two_in_a_row_shrink_by_the_starved_threads():
    gov = ThreadGovernor()
    for _ in range(10):  # contended steps apart from each other
        _step(gov, 4, _contended)
        _step(gov, 4, _idle)
    assert gov.size is None
    for _ in range(STRIKES):
        _step(gov, 4, lambda team: _contended(team, starved=2))
    assert gov.size == 2 and gov.shrinks == 1
    assert gov.team(4) == 2


def test_threads_that_sleep_without_being_preempted_are_not_starved():
    """A wait policy that sleeps (OMP_WAIT_POLICY=passive) leaves CPU time below the wall time
    with no involuntary switch: not contention."""
    gov = ThreadGovernor()
    for _ in range(20):
        _step(gov, 2, lambda team: (WALL, [WALL * 0.3] * team, [0.0] * team))
    assert gov.size is None


def test_steps_too_short_to_tell_are_not_judged():
    gov = ThreadGovernor()
    for _ in range(20):
        _step(gov, 2, lambda team: (1e-5, [0.0] * team, [1.0] * team))
    assert gov.size is None


def test_probes_grow_the_team_back_once_the_cores_are_free():
    gov = ThreadGovernor()
    for _ in range(STRIKES):
        _step(gov, 2, _contended)
    assert gov.team(2) == 1
    gov.observe(*_contended(1))  # alone, the one thread may still be disturbed
    teams = [_step(gov, 2, _idle) for _ in range(PROBE_EVERY + 2)]
    assert teams.count(1) == PROBE_EVERY - 1 and teams[PROBE_EVERY - 1] == 2
    assert gov.size is None and teams[-1] == 2


def test_failed_probes_back_off_up_to_the_longest_interval():
    gov = ThreadGovernor()
    for _ in range(STRIKES):
        _step(gov, 2, _contended)
    teams = [_step(gov, 2, _contended) for _ in range(1000)]
    probes = [i for i, t in enumerate(teams) if t == 2]
    gaps = [b - a for a, b in zip(probes, probes[1:], strict=False)]
    assert probes[0] == PROBE_EVERY
    assert gaps[:3] == [2 * PROBE_EVERY + 1, 4 * PROBE_EVERY + 1, min(8 * PROBE_EVERY,
                                                                    MAX_PROBE_EVERY) + 1]
    assert max(gaps) == MAX_PROBE_EVERY + 1 and gov.size == 1


def test_the_team_follows_the_limit():
    gov = ThreadGovernor()
    for _ in range(STRIKES):
        _step(gov, 8, lambda team: _contended(team, starved=3))
    assert gov.size == 5
    assert gov.team(3) == 3  # the engine's threads were lowered below the governed size
    gov.observe(*_idle(3))
    assert gov.team(8) == 5
    with pytest.raises(ValueError, match="limit must be >= 1"):
        gov.team(0)


def test_fixed_threads_turn_the_governor_off_and_bad_values_are_refused():
    with pytest.raises(ValueError, match="unknown cpu_decode_threads"):
        EngineConfig(cpu_decode_threads="some")
    with pytest.raises(ValueError, match="num_threads must be >= 1"):
        EngineConfig(num_threads=0)
