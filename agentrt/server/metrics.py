"""Prometheus metrics of one server: traffic counters, latency histograms, engine gauges.

Counters and histograms are updated by the endpoints (:meth:`ServerMetrics.observe` wraps a
request's delta stream: time to first token, tokens, end-to-end latency, finish reason —
``abort`` when the client went away). Gauges are read from the engine at scrape time, in one
consistent snapshot between two engine steps: running and waiting requests, and the KV
pool as free, evictable (held only by the prefix cache, given up on demand) and total
blocks — free + evictable == total exactly when no request holds KV, which is what the
server's leak tests assert after clients disconnect — and the engine's own token counters,
among them prefix-cache hits (which worker of several served a shared prefix shows there).
Each app has its own registry, so two apps in one process do not collide.

A server fronting a remote backend (``agentrt serve --backend sglang``) has no engine: its
request and KV gauges are proxied from the backend server's ``GET /get_load`` (SGLang's
load report: requests, waiting requests, KV tokens held and in all; the page size from
``/server_info``), with no evictable blocks and none of the engine's token counters.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing
from typing import TYPE_CHECKING

import httpx
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from agentrt.engine.engine import Engine
    from agentrt.engine.outputs import StreamDelta

__all__ = ["ServerMetrics"]

_TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class _EngineCollector:
    """Gauges from :meth:`Engine.load` and counters from ``Engine.stats``, at every scrape."""

    _GAUGES = (
        ("agentrt_num_requests_running", "num_running", "Requests in the running batch."),
        ("agentrt_num_requests_waiting", "num_waiting", "Requests queued for admission."),
        ("agentrt_kv_free_blocks", "num_free_blocks", "KV blocks on the free list."),
        ("agentrt_kv_evictable_blocks", "num_evictable_blocks",
         "KV blocks held only by the prefix cache (freed on demand)."),
        ("agentrt_kv_total_blocks", "num_total_blocks", "KV blocks in the device pool."),
        ("agentrt_num_requests_paused", "num_paused",
         "Requests paused with their KV (a tool running, a session between calls)."),
        ("agentrt_kv_host_free_blocks", "num_free_host_blocks",
         "Free blocks of the host pool paused requests are swapped to (0 without one)."),
        ("agentrt_kv_host_total_blocks", "num_total_host_blocks",
         "Blocks in the host pool paused requests are swapped to (0 without one)."),
    )
    _COUNTERS = (
        ("agentrt_prefix_cached_tokens", "num_cached_tokens",
         "Prompt tokens served from the prefix cache instead of being computed."),
        ("agentrt_prefill_computed_tokens", "num_prefill_tokens",
         "Tokens computed in prefill (prompts, appended tokens, recomputation)."),
        ("agentrt_preemptions", "num_preemptions",
         "Running requests preempted to make room in the KV cache."),
    )
    _INTERCEPTION_COUNTERS = (
        ("agentrt_interceptions", "num_interceptions",
         "Pauses: for a tool, and a session's hold between two calls."),
        ("agentrt_recomputed_tokens", "num_recomputed_tokens",
         "Tokens computed again after a paused request's KV was discarded."),
        ("agentrt_swapped_out_tokens", "num_swapped_out_tokens",
         "Tokens of paused requests' KV moved to the host pool."),
        ("agentrt_swapped_in_tokens", "num_swapped_in_tokens",
         "Tokens of paused requests' KV moved back from the host pool."),
    )
    _STRATEGIES = (("preserve", "num_preserve"), ("swap", "num_swap"),
                   ("discard", "num_discard"))

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def collect(self) -> Iterator[Metric]:
        snap = self.engine.load()
        for name, field, doc in self._GAUGES:
            yield GaugeMetricFamily(name, doc, value=getattr(snap, field))
        stats = self.engine.stats
        for name, field, doc in self._COUNTERS:
            yield CounterMetricFamily(name, doc, value=getattr(stats, field))
        paused = stats.interceptions
        for name, field, doc in self._INTERCEPTION_COUNTERS:
            yield CounterMetricFamily(name, doc, value=getattr(paused, field))
        resumes = CounterMetricFamily(
            "agentrt_interception_resumes", "Paused requests resumed, by what the "
            "interception policy had done with their KV.", labels=["strategy"])
        for strategy, field in self._STRATEGIES:
            resumes.add_metric([strategy], getattr(paused, field))
        yield resumes


class _RemoteLoadCollector:
    """The gauges of :class:`_EngineCollector`, from a remote server's ``/get_load``."""

    def __init__(self, url: str, timeout: float = 10.0,
                 headers: dict[str, str] | None = None) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.headers = headers or {}
        self._page_size: int | None = None

    def collect(self) -> Iterator[Metric]:
        try:
            load = self._get("/get_load")
            page = self._page_size or int(self._get("/server_info").get("page_size") or 1)
        except (httpx.HTTPError, ValueError, TypeError):
            return  # NOTE: the backend is down or says nothing: no gauges rather than lies
        self._page_size = page
        ranks = load if isinstance(load, list) else [load]
        values = {
            "num_running": sum(r["num_reqs"] - r.get("num_waiting_reqs", 0) for r in ranks),
            "num_waiting": sum(r.get("num_waiting_reqs", 0) for r in ranks),
            "num_free_blocks": sum(r["max_total_num_tokens"] - r["num_tokens"]
                                   for r in ranks) // page,
            "num_evictable_blocks": 0,
            "num_total_blocks": sum(r["max_total_num_tokens"] for r in ranks) // page,
        }
        for name, field, doc in _EngineCollector._GAUGES:
            if field in values:  # NOTE: /get_load says nothing of paused requests
                yield GaugeMetricFamily(name, f"{doc} (the backend's /get_load)",
                                        value=values[field])

    def _get(self, path: str):
        response = httpx.get(self.url + path, timeout=self.timeout, headers=self.headers)
        response.raise_for_status()
        return response.json()


class ServerMetrics:
    """The metrics of one app, in a registry of its own: the engine's gauges when it has
    one, else those a remote backend at ``backend_url`` reports, asked with
    ``backend_headers`` (its API key), else none."""

    def __init__(self, engine: Engine | None, backend_url: str | None = None,
                 backend_headers: dict[str, str] | None = None) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("agentrt_requests", "HTTP requests by endpoint and status.",
                                ["endpoint", "status"], registry=r)
        self.prompt_tokens = Counter("agentrt_prompt_tokens", "Prompt tokens processed.",
                                     registry=r)
        self.generation_tokens = Counter("agentrt_generation_tokens", "Tokens generated.",
                                         registry=r)
        self.finished = Counter("agentrt_requests_finished",
                                "Requests by finish reason (abort: the client left; error).",
                                ["finish_reason"], registry=r)
        self.ttft = Histogram("agentrt_time_to_first_token_seconds",
                              "From request arrival to the first generated token.",
                              buckets=_TTFT_BUCKETS, registry=r)
        self.latency = Histogram("agentrt_e2e_request_latency_seconds",
                                 "From request arrival to the last generated token.",
                                 buckets=_LATENCY_BUCKETS, registry=r)
        if engine is not None:
            r.register(_EngineCollector(engine))
        elif backend_url is not None:
            r.register(_RemoteLoadCollector(backend_url, headers=backend_headers))

    def count(self, endpoint: str, status: int) -> None:
        self.requests.labels(endpoint, str(status)).inc()

    async def observe(self, deltas: AsyncIterator[StreamDelta], num_prompt_tokens: int,
                      started: float) -> AsyncIterator[StreamDelta]:
        """Pass ``deltas`` through, timing them (``started``: ``time.monotonic()`` at arrival).

        Closing this iterator closes ``deltas`` (which aborts the engine request).
        """
        num_tokens, reason = 0, "abort"
        try:
            async with aclosing(deltas):  # type: ignore[type-var]
                async for delta in deltas:
                    if delta.token_ids and num_tokens == 0:
                        self.ttft.observe(time.monotonic() - started)
                    num_tokens += len(delta.token_ids)
                    if delta.finished:
                        reason = delta.finish_reason or "stop"
                    yield delta
        except Exception:
            reason = "error"  # rejected when queued (a 400), or the engine failed
            raise
        finally:
            self.finished.labels(reason).inc()
            self.prompt_tokens.inc(num_prompt_tokens)
            self.generation_tokens.inc(num_tokens)
            self.latency.observe(time.monotonic() - started)

    def render(self) -> bytes:
        """The Prometheus text exposition (blocks up to one engine step: run it in a thread)."""
        return generate_latest(self.registry)
