"""``session_id`` on chat requests, with the real ``openai`` client on an in-process app over
the session engine: a session's second request prefills only what it adds; sessions end on
DELETE, on their time-to-live and under the table's bound; 100 agents come and go and none
outlives its agent."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")

from fastapi.testclient import TestClient  # noqa: E402

from agentrt import SessionTable  # noqa: E402
from agentrt.server import create_app  # noqa: E402

MODEL = "SmolLM2-135M-Instruct"


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def served(engine):
    """(HTTP client, OpenAI client, the app's session table, its clock)."""
    clock = Clock()
    table = SessionTable(ttl_s=100, max_sessions=4, clock=clock, sweep_interval_s=None)
    with TestClient(create_app(engine, sessions=table)) as http:
        client = openai.OpenAI(base_url="http://testserver/v1", api_key="x", max_retries=0,
                               http_client=http)
        yield http, client, table, clock
    table.close_all()


def _ask(client, messages, session_id=None, max_tokens=2):
    extra = {} if session_id is None else {"session_id": session_id}
    return client.chat.completions.create(model=MODEL, messages=messages, max_tokens=max_tokens,
                                          extra_body=extra)


def test_a_sessions_second_request_prefills_only_what_it_adds(served, engine):
    http, client, table, _ = served
    paused = engine.load().num_paused
    messages = [{"role": "user", "content": "Name a color."}]
    first = _ask(client, messages, "agent-1", max_tokens=4)
    messages += [{"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "user", "content": "Another one."}]
    second = _ask(client, messages, "agent-1")
    p1, p2 = first.usage.prompt_tokens, second.usage.prompt_tokens
    computed = p2 - second.usage.prompt_tokens_details.cached_tokens
    assert p2 > p1 and computed <= p2 - p1  # the first prompt (and more) was held
    assert engine.load().num_paused == paused + 1  # the agent's context, held between calls
    closed = http.delete("/v1/sessions/agent-1").json()
    assert closed["deleted"] and closed["usage"]["num_calls"] == 2
    assert closed["usage"]["reused_tokens"] >= p1
    assert http.delete("/v1/sessions/agent-1").json()["deleted"] is False
    assert engine.load().num_paused == paused


def test_a_session_id_with_n_above_one_is_a_400(served):
    _, client, _, _ = served
    with pytest.raises(openai.BadRequestError, match="n must be 1"):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}],
                                       max_tokens=1, n=2, extra_body={"session_id": "s"})


def test_sessions_expire_and_a_full_table_evicts_the_oldest(served, engine):
    http, client, table, clock = served
    paused = engine.load().num_paused
    hi = [{"role": "user", "content": "Hi"}]
    for key in ("a", "b", "c", "d", "e"):  # max_sessions=4: a is evicted for e
        _ask(client, hi, key, max_tokens=1)
    listed = http.get("/v1/sessions").json()
    assert listed["data"] == ["b", "c", "d", "e"] and table.num_evicted >= 1
    assert engine.load().num_paused == paused + 4
    clock.now += 101  # past the time-to-live
    assert http.get("/v1/sessions").json()["data"] == []
    assert engine.load().num_paused == paused


NUM_AGENTS = 100
"""The churn test's agents (one-token requests; 777 s on a machine at load 20-38, 2 cores)."""


@pytest.mark.slow
def test_a_hundred_agents_come_and_go_and_none_outlives_its_agent(served, engine):
    """NUM_AGENTS agents, 4 at a time (batched; the table holds 4): each makes a one-token
    request and finishes (DELETE); the table and the engine hold nothing of them after."""
    http, client, table, _ = served
    paused = engine.load().num_paused
    hi = [{"role": "user", "content": "Go"}]

    def agent(i: int) -> bool:
        _ask(client, hi, f"agent-{i}", max_tokens=1)
        assert len(table) <= table.max_sessions
        return http.delete(f"/v1/sessions/agent-{i}").json()["deleted"]

    with ThreadPoolExecutor(table.max_sessions) as pool:
        assert all(pool.map(agent, range(NUM_AGENTS)))
    assert len(table) == 0 and engine.load().num_paused == paused
