"""Agents on an engine whose KV cannot hold them all (audit H50).

Three ``run_with_tools`` agents run at once on a real-model engine of 14 KV pages (one agent's
context takes about ten), their tools taking different times: while one waits for its tool,
the others need its pages, so the interception policy must move paused KV (swap or discard)
and the scheduler preempt. Each agent must still get exactly the greedy tokens it gets alone
on the session engine (plenty of KV), every pause's strategy must be counted in
``engine.stats.interceptions``, and no page may be left held afterwards.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from agentrt.agent import ArgumentInvocation, Invocation, Tool, ToolRuntime, run_with_tools
from agentrt.core.sampling_params import SamplingParams

PARAMS = SamplingParams(max_tokens=10)
QUERIES = ["fast", "slow", "slowest"]  # what each agent's call starts with: its tool's time
DELAYS = {"fast": 0.0, "slow": 0.3, "slowest": 1.0}


@dataclass(frozen=True)
class LookupTool(Tool):
    """Answers after a delay set by how its query starts (imported by name in its worker)."""

    name: ClassVar[str] = "lookup"
    description: ClassVar[str] = "look a word up"
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object", "properties": {"query": {"type": "string"}}}

    def start(self) -> Invocation:
        return _Lookup(self)


class _Lookup(ArgumentInvocation):
    def run(self, arguments: dict[str, Any]) -> str:
        query = str(arguments.get("query", ""))
        time.sleep(max((d for q, d in DELAYS.items() if query.startswith(q)), default=0.0))
        return f"{query} means forty-two."


@pytest.fixture(scope="module")
def small(engine):
    """The one extra real-model engine of this file: 14 pages of 16 tokens, a small host
    pool, the default least-waste handling (on the cost model's defaults: not profiled)."""
    from agentrt import Engine

    with Engine(dtype="float32", num_blocks=14, block_size=16, host_kv_cache_gb=0.005,
                max_num_batched_tokens=64, profile_on_start=False) as eng:
        yield eng


@pytest.fixture(scope="module")
def runtime():
    with ToolRuntime([LookupTool()]) as rt:
        yield rt


def _prompt(engine) -> str:
    system = ("Call a tool by writing <tool_call>{\"name\": ..., \"arguments\": {...}}"
              "</tool_call>. Tools: " + json.dumps([{"name": "lookup",
                                                     "parameters": {"query": "string"}}]))
    messages = [{"role": "system", "content": system},
                {"role": "user", "content": "Look up a word, then tell me what it means."}]
    return engine.tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                tokenize=False)


def _run(engine, runtime, query: str):
    prefix = '<tool_call>{"name": "lookup", "arguments": {"query": "' + query
    return run_with_tools(engine, _prompt(engine), PARAMS, tools=runtime, reply_prefix=prefix,
                          max_calls=1)


def test_concurrent_agents_under_kv_pressure_decode_as_alone(engine, small, runtime):
    alone = {q: _run(engine, runtime, q) for q in QUERIES}
    num_paused = sum(s.is_paused for run in alone.values() for s in run.segments)
    assert num_paused >= 2, [run.text for run in alone.values()]  # calls paused in place
    before = small.stats
    runs: dict[str, Any] = {}
    failures: list[BaseException] = []

    def agent(query: str) -> None:
        try:
            runs[query] = _run(small, runtime, query)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=agent, args=(q,)) for q in QUERIES]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not failures, failures
    assert not any(t.is_alive() for t in threads), "an agent hung"
    for q in QUERIES:
        got = [s.output.token_ids for s in runs[q].segments]
        assert got == [s.output.token_ids for s in alone[q].segments], q
        assert [o.text for o in runs[q].observations] == \
            [o.text for o in alone[q].observations]
    after = small.stats
    done = after.interceptions
    num_pauses = done.num_interceptions - before.interceptions.num_interceptions
    resumed = sum(len(run.segments) - 1 for run in runs.values())
    assert num_pauses >= resumed >= num_paused
    strategies = (done.num_preserve + done.num_swap + done.num_discard
                  - before.interceptions.num_preserve - before.interceptions.num_swap
                  - before.interceptions.num_discard)
    assert strategies == resumed  # each resumed pause's strategy is counted
    moved = after.num_preemptions - before.num_preemptions + strategies \
        - (done.num_preserve - before.interceptions.num_preserve)
    assert moved > 0, "the pool never ran short: no preemption, swap or discard"
    assert not small.core.requests
    small.clear_prefix_cache()
    load = small.load()
    assert load.num_free_blocks == load.num_total_blocks
    host = small.core.kv.host_pool
    assert host.num_free == host.num_blocks


def test_more_requests_than_the_kv_holds_all_finish_as_alone(engine, small):
    prompts = [_prompt(engine) + w for w in ("Sure", "Okay", "Well", "Hello")]
    params = SamplingParams(max_tokens=24, ignore_eos=True)
    alone = [engine.generate(p, params).token_ids for p in prompts]
    preempted = small.stats.num_preemptions
    outs = small.generate(prompts, params)
    assert [o.token_ids for o in outs] == alone
    assert small.stats.num_preemptions > preempted
    assert not small.core.requests
    small.clear_prefix_cache()
    load = small.load()
    assert load.num_free_blocks == load.num_total_blocks
