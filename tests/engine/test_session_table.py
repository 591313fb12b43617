"""SessionTable on the real engine: a session's KV is freed when its agent finishes, when its
time-to-live runs out (longer for a paused agent whose tool takes long), and when the table is
full (the least recently used idle session); no session outlives its agent."""

from __future__ import annotations

import pytest

from agentrt import SessionTable


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def table():
    clock = Clock()
    t = SessionTable(ttl_s=10, max_sessions=3, clock=clock, sweep_interval_s=None)
    t.clock_ = clock
    yield t
    t.close_all()


def _open(table: SessionTable, engine, key: str, prompt: list[int]) -> None:
    table.get(key, engine).prefill(prompt)  # a one-token call: the engine holds the prompt


def test_ttl_expiry_frees_the_kv_and_a_paused_tool_extends_it(engine, tokenizer, table):
    paused = engine.load().num_paused
    ids = tokenizer.encode("Hello there")
    _open(table, engine, "a", ids)
    _open(table, engine, "b", ids)
    assert engine.load().num_paused == paused + 2
    table.pause("b", "search", expected_duration=30)  # b waits for a long tool
    table.clock_.now = 11
    assert table.sweep() == ["a"] and table.num_expired == 1
    assert engine.load().num_paused == paused + 1 and "b" in table
    table.clock_.now = 41
    assert table.sweep() == ["b"] and len(table) == 0
    assert engine.load().num_paused == paused
    assert table.closed_stats.num_calls == 2


def test_a_full_table_evicts_the_least_recently_used_session(engine, tokenizer, table):
    paused = engine.load().num_paused
    ids = tokenizer.encode("Hi")
    for key in ("a", "b", "c"):
        _open(table, engine, key, ids)
    table.get("a", engine)  # a used again: b is now the least recently used
    _open(table, engine, "d", ids)
    assert table.keys() == ["c", "a", "d"] and table.num_evicted == 1
    assert engine.load().num_paused == paused + 3
    assert table.close("a").num_calls == 1 and table.close("a") is None
    assert engine.load().num_paused == paused + 2


def test_churn_of_agents_leaves_no_session(engine, tokenizer):
    """(The server's 100-agent churn is tests/server/test_server_sessions.py.)"""
    paused = engine.load().num_paused
    table = SessionTable(ttl_s=60, max_sessions=4, sweep_interval_s=None)
    ids = tokenizer.encode("Go")
    for i in range(20):
        _open(table, engine, f"agent-{i}", ids)
        if i % 2:
            table.close(f"agent-{i}")  # half finish; the others are evicted under the bound
        assert len(table) <= 4 and engine.load().num_paused <= paused + 4
    table.close_all()
    assert len(table) == 0 and engine.load().num_paused == paused


def test_bad_limits_name_the_field():
    with pytest.raises(ValueError, match="ttl_s"):
        SessionTable(ttl_s=0)
    with pytest.raises(ValueError, match="max_sessions"):
        SessionTable(max_sessions=0)
