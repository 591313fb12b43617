"""Agent benchmark: N concurrent LangChain 1.x ``create_agent`` agents, several tool turns each.

Sides (the same agents, the same model — the default SmolLM2-135M-Instruct — greedy):

  (a) ``ChatAgentRT`` + ``AgentRTMiddleware``: each run is one session (KV kept across turns);
  (b) ``ChatAgentRT`` alone: each call a fresh request (the prefix cache may still hit);
  (c) ``ChatOpenAI`` → ``agentrt serve`` (in this process, on 127.0.0.1) + the middleware:
      the run's requests carry its ``session_id``;
  (d) ``ChatOpenAI`` → llama.cpp's ``llama-server`` on the same GGUF, ``-np N``, its prompt
      cache on (``--llama-server PATH``; skipped without it);
  (e) ``ChatOpenAI`` → ``agentrt serve`` without session ids.

Each agent calls ``lookup`` ``--turns`` times (forced per step by ``tool_choice``, as the 135M
model needs), the tool taking ``--tool-latency`` seconds, then answers. The engine's KV pool is
``--kv-gb`` (default: too small to hold every agent's context at once at N=8).
Reported per side: tokens prefilled per model call after the first of a run (from each
answer's usage: prompt tokens minus cached ones; and, on agentrt's engine, from its counters,
recomputation after a preemption included), wall time, peak KV use (agentrt sides).

    python benchmarks/agent_langgraph.py --agents 1 8 --turns 3
    python benchmarks/agent_langgraph.py --sides a b --agents 1 --turns 2     # a short run
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field

from langchain.agents import create_agent
from langchain.agents.middleware import wrap_model_call
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool

from agentrt import Engine
from langchain_agentrt import AgentRTMiddleware, ChatAgentRT

TOOL_LATENCY = [0.2]


@tool
async def lookup(city: str) -> str:
    """Look up facts about a city."""
    await asyncio.sleep(TOOL_LATENCY[0])
    return f"{city} has about 2 million people and a mild climate."


def plan(turns: int):
    @wrap_model_call
    async def forced(request, handler):
        done = sum(isinstance(m, ToolMessage) for m in request.messages)
        return await handler(request.override(tool_choice="lookup" if done < turns else "none"))
    return forced


@dataclass
class Result:
    side: str
    n: int
    wall_s: float
    first: list[int] = field(default_factory=list)
    later: list[int] = field(default_factory=list)
    peak_kv: float | None = None
    engine_prefill: int | None = None
    """Tokens the engine computed for prompts in this side (prefill + recomputed after a
    preemption): the usage's cached count misses recomputation."""


def _computed(message: AIMessage) -> int:
    u = message.usage_metadata or {}
    return u.get("input_tokens", 0) - (u.get("input_token_details") or {}).get("cache_read", 0)


async def run_side(side: str, model, n: int, turns: int, sessions: bool,
                   engine: Engine | None) -> Result:
    middleware = [AgentRTMiddleware(max_repeats=None)] if sessions else []
    agent = create_agent(model, [lookup], middleware=[*middleware, plan(turns)])
    peak = [0.0]
    stop = threading.Event()

    def watch() -> None:
        while engine is not None and not stop.wait(0.05):
            peak[0] = max(peak[0], engine.load().kv_usage)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    before = engine.stats if engine is not None else None
    started = time.perf_counter()
    outs = await asyncio.gather(*(agent.ainvoke(
        {"messages": [{"role": "user", "content": f"Tell me about city number {i}."}]},
        {"recursion_limit": 4 * turns + 8}) for i in range(n)))
    wall = time.perf_counter() - started
    stop.set()
    result = Result(side, n, wall, peak_kv=peak[0] if engine is not None else None)
    if engine is not None and before is not None:
        after = engine.stats
        result.engine_prefill = (after.num_prefill_tokens - before.num_prefill_tokens
                                 + after.num_recomputed_tokens - before.num_recomputed_tokens)
    for out in outs:
        calls = [m for m in out["messages"] if isinstance(m, AIMessage) and m.usage_metadata]
        result.first += [_computed(m) for m in calls[:1]]
        result.later += [_computed(m) for m in calls[1:]]
    return result


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_in_thread(engine: Engine) -> str:
    """``agentrt serve`` on ``engine``, in this process; its base URL."""
    import uvicorn

    from agentrt.server import create_app

    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(engine), port=port, log_level="error"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}/v1"


def start_llama_server(binary: str, n: int) -> tuple[subprocess.Popen, str]:
    from agentrt.models.sources import default_gguf

    port = _free_port()
    proc = subprocess.Popen([binary, "-m", str(default_gguf()), "--port", str(port),
                             "-np", str(n), "--jinja", "-c", str(4096 * n)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import httpx

    for _ in range(600):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    return proc, f"http://127.0.0.1:{port}/v1"


def _openai(base_url: str, max_tokens: int):
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(base_url=base_url, api_key="-", model="SmolLM2-135M-Instruct",
                      temperature=0, max_tokens=max_tokens)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--agents", type=int, nargs="+", default=[1, 8])
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--tool-latency", type=float, default=0.2)
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--kv-gb", type=float, default=0.02)
    p.add_argument("--sides", nargs="+", default=list("abcde"))
    p.add_argument("--llama-server", default=None, metavar="PATH")
    args = p.parse_args()
    TOOL_LATENCY[0] = args.tool_latency
    engine = Engine(dtype="float32", kv_cache_gb=args.kv_gb)
    base = serve_in_thread(engine) if {"c", "e"} & set(args.sides) else None
    rows: list[Result] = []
    for n in args.agents:
        for side in args.sides:
            engine.clear_prefix_cache()  # NOTE: no side reuses an earlier side's KV
            if side in "ab":
                model = ChatAgentRT(engine=engine, max_tokens=args.max_tokens)
                rows.append(asyncio.run(run_side(side, model, n, args.turns, side == "a",
                                                 engine)))
            elif side in "ce":
                model = _openai(base, args.max_tokens)
                rows.append(asyncio.run(run_side(side, model, n, args.turns, side == "c",
                                                 engine)))
            elif side == "d" and args.llama_server:
                proc, url = start_llama_server(args.llama_server, n)
                try:
                    rows.append(asyncio.run(run_side(side, _openai(url, args.max_tokens), n,
                                                     args.turns, False, None)))
                finally:
                    proc.terminate()
            print(_row(rows[-1]) if rows else "", flush=True)
    engine.close()


def _mean(xs: list[int]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _row(r: Result) -> str:
    kv = "-" if r.peak_kv is None else f"{r.peak_kv:.0%}"
    engine = "-" if r.engine_prefill is None or not r.later else \
        f"{(r.engine_prefill - sum(r.first)) / len(r.later):.1f}"
    return (f"side {r.side}  N={r.n}  wall {r.wall_s:7.2f} s  prefilled (usage): first call "
            f"{_mean(r.first):6.1f}, later calls {_mean(r.later):6.1f} tok/call; engine-counted"
            f" later calls {engine} tok/call  peak KV {kv}")


if __name__ == "__main__":
    main()
