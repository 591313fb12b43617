"""Real ``agentrt serve`` processes on loopback for tests, and what tests read from them.

:func:`start_server` runs the default model in a subprocess on a free port, waits for
``/health`` and stops the process on exit; :class:`Server` reads its Prometheus metrics and
waits until it is idle. Used by ``tests/server`` and ``tests/backends`` (which puts this
folder on ``sys.path``).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

START_TIMEOUT = 300.0


@dataclass
class Server:
    url: str
    """``http://127.0.0.1:PORT``"""
    process: subprocess.Popen
    log: Path

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def metrics(self) -> dict[str, float]:
        """Every unlabelled sample of ``/metrics`` (labelled ones keyed ``name{a=b,...}``)."""
        from prometheus_client.parser import text_string_to_metric_families

        text = httpx.get(f"{self.url}/metrics", timeout=30).text
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
                out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
        return out

    def wait_until_idle(self, timeout: float = 20.0,
                        until: Callable[[dict[str, float]], bool] | None = None
                        ) -> dict[str, float]:
        """Poll ``/metrics`` until no request runs or waits, no KV block is held and
        ``until(metrics)`` holds (the server counts a request in its stream's cleanup, a
        moment after the engine lets it go); the last metrics read at ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            m = self.metrics()
            idle = m["agentrt_num_requests_running"] == 0 == m["agentrt_num_requests_waiting"]
            done = idle and held_blocks(m) == 0 and (until is None or until(m))
            if done or time.monotonic() > deadline:
                return m
            time.sleep(0.1)

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])

    def openai_client(self):
        """The official OpenAI client for this server (no retries, 120 s per request)."""
        import openai

        return openai.OpenAI(base_url=self.base_url, api_key="x", max_retries=0, timeout=120)


def held_blocks(metrics: dict[str, float]) -> float:
    """KV blocks held by requests (neither free nor only cached)."""
    return metrics["agentrt_kv_total_blocks"] - metrics["agentrt_kv_free_blocks"] \
        - metrics["agentrt_kv_evictable_blocks"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(server: Server, timeout: float = START_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"agentrt serve exited with {server.process.returncode}:\n"
                               f"{server.tail()}")
        try:
            if httpx.get(f"{server.url}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"agentrt serve did not become healthy:\n{server.tail()}")


def launch(log: Path, *args: str) -> Server:
    """Start ``agentrt serve`` on a free port (small KV pool, batch 16); not yet healthy."""
    port = free_port()
    cmd = [sys.executable, "-m", "agentrt", "serve", "--host", "127.0.0.1", "--port", str(port),
           "--max-batch", "16", "--kv-cache-gb", "0.25", "--log-level", "warning", *args]
    with log.open("wb") as out:
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    return Server(f"http://127.0.0.1:{port}", process, log)


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextmanager
def start_server(log: Path, *args: str) -> Iterator[Server]:
    """A healthy ``agentrt serve`` for the duration of the block."""
    server = launch(log, *args)
    try:
        wait_healthy(server)
        yield server
    finally:
        stop(server.process)


@contextmanager
def stream_events(url: str, body: dict[str, Any]) -> Iterator[Iterator[dict[str, Any]]]:
    """The JSON events of a streamed answer from ``url``, read one at a time (closing drops
    the client)."""
    with httpx.Client(timeout=120) as http, http.stream("POST", url, json=body) as response:
        assert response.status_code == 200, response.read()
        yield (json.loads(line[6:]) for line in response.iter_lines()
               if line.startswith("data: ") and line != "data: [DONE]")


def chat_text(events: Iterator[dict[str, Any]]) -> tuple[str, str]:
    """The text and finish reason of a streamed chat answer's events (none an error)."""
    text, finish = "", ""
    for event in events:
        assert "error" not in event, event
        choice = event["choices"][0]
        text += choice["delta"].get("content") or ""
        finish = choice["finish_reason"] or finish
    return text, finish
