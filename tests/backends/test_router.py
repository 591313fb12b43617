"""Scale-out: two ``agentrt serve`` workers behind sglang-router 0.3.2 (cache-aware policy)
on loopback. 50 requests go through the router — half share a ~300-token prefix — and every
answer equals a direct call to a worker; the shared-prefix requests all landed on one worker,
as its prefix-cache counter shows, while the others went to the other worker."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import sglang_router  # noqa: F401 - the router binary ships in this package ([dev] extra)
from serve_harness import Server, free_port, launch, stop, wait_healthy

from agentrt import SamplingParams
from agentrt.backends import get_backend
from agentrt.core.outputs import RequestOutput

PAGE = 16  # the engine's default block size: the prefix cache shares whole pages
PREFIX_LEN = 300
CONCURRENCY = 8
PARAMS = SamplingParams(max_tokens=8)
CACHED = "agentrt_prefix_cached_tokens_total"
GENERATE_OK = "agentrt_requests_total{endpoint=/generate,status=200}"
WORDS = ["Paris", "Water", "Music", "Bread", "Winter", "Gold", "Chess", "Lightning",
         "Coffee", "Mountains", "Bees", "Glass", "Rivers", "Silk", "Volcanoes", "Owls",
         "Copper", "Deserts", "Tea", "Whales", "Clocks", "Maple", "Thunder", "Salt", "Zebras"]


@dataclass
class Cluster:
    url: str
    workers: list[Server]


def _wait_ready(url: str, process: subprocess.Popen, log: Path, num_workers: int) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"sglang-router exited:\n{log.read_text(errors='replace')}")
        try:
            ready = httpx.get(f"{url}/readiness", timeout=2).json()
            if ready.get("healthy_workers") == num_workers:
                return
        except (httpx.TransportError, ValueError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"sglang-router not ready:\n{log.read_text(errors='replace')}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Two workers (started together), then the router in front of them."""
    logs = tmp_path_factory.mktemp("router")
    workers = [launch(logs / f"worker{i}.log") for i in range(2)]
    router = None
    try:
        for w in workers:
            wait_healthy(w)
        url, log = f"http://127.0.0.1:{free_port()}", logs / "router.log"
        cmd = [sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1",
               "--port", url.rsplit(":", 1)[1], "--worker-urls", *(w.url for w in workers),
               "--policy", "cache_aware", "--prometheus-host", "127.0.0.1",
               "--prometheus-port", str(free_port()), "--worker-startup-check-interval", "1",
               "--log-level", "warn"]
        with log.open("wb") as out:
            router = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        _wait_ready(url, router, log, len(workers))
        yield Cluster(url, workers)
    finally:
        if router is not None:
            stop(router)
        for w in workers:
            stop(w.process)


@pytest.fixture(scope="module")
def prompts(cluster, long_text) -> tuple[list[list[int]], list[list[int]]]:
    """(shared-prefix prompts, unrelated prompts), as token ids."""
    import transformers

    path = httpx.get(f"{cluster.url}/get_model_info", timeout=10).json()["tokenizer_path"]
    tok = transformers.AutoTokenizer.from_pretrained(path)
    encode = lambda text: tok.encode(text, add_special_tokens=False)  # noqa: E731
    prefix = encode(long_text)[:PREFIX_LEN]
    shared = [prefix + encode(f"\nQuestion {i}: which word above matters most?")
              for i in range(len(WORDS))]
    return shared, [encode(f"{word} are known for") for word in WORDS]


async def _run_all(url: str, prompts: list[list[int]]) -> list[RequestOutput]:
    """``prompts`` through the sglang backend at ``url``, ``CONCURRENCY`` at a time."""
    limit = asyncio.Semaphore(CONCURRENCY)
    async with get_backend("sglang", url=url, timeout=300) as backend:
        async def one(ids: list[int]) -> RequestOutput:
            async with limit:
                return await backend.agenerate(ids, PARAMS)

        return list(await asyncio.gather(*(one(ids) for ids in prompts)))


def _delta(after: dict[str, float], before: dict[str, float], name: str) -> float:
    return after.get(name, 0.0) - before.get(name, 0.0)


def test_fifty_requests_through_the_router(cluster, prompts):
    shared, other = prompts
    before = [w.wait_until_idle() for w in cluster.workers]
    # the first shared-prefix request alone (its KV cached), then the 49 others interleaved
    order = [shared[0]]
    for i in range(len(other)):
        order += [other[i], *shared[i + 1 : i + 2]]
    assert len(order) == 50
    routed = asyncio.run(_run_all(cluster.url, order[:1]))
    routed += asyncio.run(_run_all(cluster.url, order[1:]))
    after = [w.wait_until_idle() for w in cluster.workers]

    served = [_delta(after[i], before[i], GENERATE_OK) for i in range(2)]
    hits = [_delta(after[i], before[i], CACHED) for i in range(2)]
    seen = f"requests served {served}, prefix-cache hits {hits}"  # e.g. [19, 31], [0, 7152]
    assert sum(served) == 50 and min(served) > 0, seen  # both workers took requests
    prefix_hit = PREFIX_LEN // PAGE * PAGE
    home = max(range(2), key=lambda i: hits[i])
    assert hits[home] >= (len(shared) - 1) * prefix_hit, seen  # each later one hit the prefix
    assert hits[1 - home] < prefix_hit, seen  # ... and none went to the other worker

    direct = asyncio.run(_run_all(cluster.workers[1 - home].url, order))
    for i, via_router in enumerate(routed):
        assert via_router.token_ids == direct[i].token_ids
        assert (via_router.text, via_router.finish_reason) \
            == (direct[i].text, direct[i].finish_reason)
    for w in cluster.workers:
        m = w.wait_until_idle()
        assert m["agentrt_kv_free_blocks"] + m["agentrt_kv_evictable_blocks"] \
            == m["agentrt_kv_total_blocks"], w.tail()


def test_sessions_behind_the_router_are_kept_by_the_client(cluster, prompts):
    """sglang-router 0.3.2 does not route /open_session: the backend says so and sends each
    call's whole context, which cache-aware routing brings back to its prefix's worker."""
    shared, _ = prompts
    with get_backend("sglang", url=cluster.url, timeout=300) as backend:
        assert not backend.capabilities.keeps_kv_across_calls
        sid = backend.open_session()
        first = backend.generate(shared[0], PARAMS, session_id=sid)
        second = backend.generate([198], PARAMS, session_id=sid)
        backend.close_session(sid)
    context = shared[0] + first.token_ids + [198]
    assert second.num_prompt_tokens == len(context)
    assert second.num_cached_tokens >= PREFIX_LEN // PAGE * PAGE
    with get_backend("sglang", url=cluster.workers[0].url, timeout=300) as direct:
        assert second.token_ids == direct.generate(context, PARAMS).token_ids
