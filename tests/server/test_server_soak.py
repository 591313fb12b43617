"""Soak: 1,000 mixed requests on a real ``agentrt serve``; nothing drifts, nothing leaks.

The mix, eight at a time over loopback: chat and legacy completions, streamed and whole,
chat requests with ``tools`` (grammar-constrained), about 10% clients that leave a stream
after its first event, and a bad request every 20th (a seed past 64 bits, an absurd
``max_tokens``, a malformed ``tool_calls`` entry, a schema xgrammar rejects). Every good
request must answer exactly what the same request answers alone; every bad one a 400 in
OpenAI's shape; afterwards no request holds a KV block, the server counted each leaver as
a 499, and its threads, child processes and open files are back where they were.

Generations are short (6 tokens) and prompts few, so it runs in a few minutes on two cores.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from typing import Any, NamedTuple

import httpx
import pytest
from serve_harness import held_blocks

pytestmark = pytest.mark.slow

NUM_REQUESTS = 1000
CONCURRENCY = 8
BAD_EVERY = 20
LEAVE_RATE = 0.1
MAX_TOKENS = 6
TOPICS = ["a lighthouse", "the moon", "a violin", "a desert"]
KINDS = ["chat", "tools", "completions"]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
BAD_BODIES: list[tuple[str, dict[str, Any]]] = [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                              "temperature": 1.0, "seed": 2**64, "stream": True}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                              "max_tokens": 10**9}),
    ("/v1/chat/completions", {"messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [{"id": "c", "function": {"arguments": 7}}]}]}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                              "tools": [{"type": "function", "function": {
                                  "name": "f", "parameters": {"type": "fancy"}}}],
                              "tool_choice": "required"}),
    ("/v1/completions", {"prompt": "Once", "temperature": 1.0, "seed": -(2**64),
                         "stream": True}),
    ("/generate", {"text": "Once", "sampling_params": {"sampling_seed": 2**70}}),
]


class Job(NamedTuple):
    """One request of the soak."""

    index: int
    kind: str
    """chat | tools | completions | bad"""
    topic: int
    stream: bool
    leaves: bool


def _plan(rng: random.Random) -> list[Job]:
    jobs = []
    for i in range(NUM_REQUESTS):
        if i % BAD_EVERY == BAD_EVERY - 1:
            jobs.append(Job(i, "bad", i // BAD_EVERY % len(BAD_BODIES), False, False))
            continue
        leaves = rng.random() < LEAVE_RATE
        jobs.append(Job(i, rng.choice(KINDS), rng.randrange(len(TOPICS)),
                        leaves or rng.random() < 0.5, leaves))
    return jobs


def _request(kind: str, topic: int, stream: bool, max_tokens: int = MAX_TOKENS
             ) -> tuple[str, dict[str, Any]]:
    about = TOPICS[topic]
    if kind == "completions":
        return "/v1/completions", {"prompt": f"A short story about {about}:", "stream": stream,
                                   "max_tokens": max_tokens}
    body: dict[str, Any] = {"messages": [{"role": "user", "content": f"Tell me about {about}."}],
                            "max_tokens": max_tokens, "stream": stream}
    if kind == "tools":
        body["tools"] = [WEATHER]
    return "/v1/chat/completions", body


async def _answer(http: httpx.AsyncClient, path: str, body: dict[str, Any]) -> str:
    """The request's answer as one comparable string (text, tool calls, finish reason)."""
    if not body["stream"]:
        response = await http.post(path, json=body)
        assert response.status_code == 200, response.text
        choice = response.json()["choices"][0]
        if "message" in choice:
            message = choice["message"]
            return json.dumps([message["content"], message["tool_calls"],
                               choice["finish_reason"]])
        return json.dumps([choice["text"], choice["finish_reason"]])
    parts: list[Any] = []
    async with http.stream("POST", path, json=body) as response:
        assert response.status_code == 200, await response.aread()
        async for line in response.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                event = json.loads(line[6:])
                assert "error" not in event, event
                parts.append(event["choices"][0] if event["choices"] else None)
    return json.dumps([{k: v for k, v in p.items() if k != "index"} for p in parts if p])


async def _leave(http: httpx.AsyncClient, job: Job) -> None:
    """Start a long stream and drop the connection after its first event."""
    path, body = _request(job.kind, job.topic, True, max_tokens=64)
    async with http.stream("POST", path, json=body) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                return


async def _bad(http: httpx.AsyncClient, job: Job) -> None:
    path, body = BAD_BODIES[job.topic]
    response = await http.post(path, json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"]
    assert ".cc:" not in error["message"]


async def _run(http: httpx.AsyncClient, jobs: list[Job], references: dict[tuple, str]
               ) -> list[str]:
    """Run ``jobs`` ``CONCURRENCY`` at a time; the mismatches against ``references``."""
    gate = asyncio.Semaphore(CONCURRENCY)
    mismatches: list[str] = []

    async def one(job: Job) -> None:
        async with gate:
            if job.kind == "bad":
                await _bad(http, job)
            elif job.leaves:
                await _leave(http, job)
            else:
                got = await _answer(http, *_request(job.kind, job.topic, job.stream))
                want = references[job.kind, job.topic, job.stream]
                if got != want:
                    mismatches.append(f"{job}: {got} != alone {want}")

    await asyncio.gather(*(one(job) for job in jobs))
    return mismatches


class Resources(NamedTuple):
    threads: int
    children: int
    fds: int


def _resources(pid: int) -> Resources:
    """Threads, child processes and open file descriptors of process ``pid`` (Linux /proc)."""
    children = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            children += int(stat.rsplit(")", 1)[1].split()[1]) == pid
    return Resources(len(os.listdir(f"/proc/{pid}/task")), children,
                     len(os.listdir(f"/proc/{pid}/fd")))


def _counted(metrics: dict[str, float], endpoint: str, status: int) -> float:
    return metrics.get(f"agentrt_requests_total{{endpoint={endpoint},status={status}}}", 0.0)


def _settled(server, before: Resources, timeout: float = 20.0) -> Resources:
    """The server's resources once its sockets to the finished clients are closed."""
    deadline = time.monotonic() + timeout
    while True:
        now = _resources(server.process.pid)
        if now.fds <= before.fds or time.monotonic() > deadline:
            return now
        time.sleep(0.2)


async def test_soak_1000_mixed_requests(server):
    started = time.monotonic()
    jobs = _plan(random.Random(19))
    limits = httpx.Limits(max_connections=CONCURRENCY * 2)
    async with httpx.AsyncClient(base_url=server.url, timeout=300, limits=limits) as http:
        references = {}
        for key in {(j.kind, j.topic, j.stream) for j in jobs if j.kind != "bad"}:
            references[key] = await _answer(http, *_request(*key))
        await _run(http, jobs[:2 * CONCURRENCY], references)  # warm the server's thread pool
    before = server.wait_until_idle()
    resources = _resources(server.process.pid)
    async with httpx.AsyncClient(base_url=server.url, timeout=300, limits=limits) as http:
        mismatches = await _run(http, jobs, references)
    after = server.wait_until_idle(timeout=60)
    elapsed = time.monotonic() - started
    print(f"\nsoak: {NUM_REQUESTS} requests in {elapsed:.1f} s "
          f"({sum(j.leaves for j in jobs)} left, {sum(j.kind == 'bad' for j in jobs)} bad)")

    assert not mismatches, f"{len(mismatches)} answers differ from alone:\n" + \
        "\n".join(mismatches[:5])
    assert held_blocks(after) == held_blocks(before) == 0
    assert after["agentrt_num_requests_running"] == 0 == after["agentrt_num_requests_waiting"]
    num_left = {p: sum(j.leaves and _request(j.kind, 0, True)[0] == p for j in jobs)
                for p in ("/v1/chat/completions", "/v1/completions")}
    for path, n in num_left.items():
        assert _counted(after, path, 499) - _counted(before, path, 499) == n, path
    num_bad = sum(j.kind == "bad" for j in jobs)
    assert sum(_counted(after, p, 400) - _counted(before, p, 400)
               for p in ("/v1/chat/completions", "/v1/completions", "/generate")) == num_bad
    left = _settled(server, resources)
    print(f"soak: server threads {resources.threads} -> {left.threads}, children "
          f"{resources.children} -> {left.children}, fds {resources.fds} -> {left.fds}")
    assert left.children == resources.children
    # NOTE: anyio's worker threads stay for reuse; at most one per concurrent client
    assert left.threads <= resources.threads + CONCURRENCY
    assert left.fds <= resources.fds
