"""A real ``agentrt serve`` process on loopback for the whole session, and clients for it.

The server runs the default model in a subprocess on a free port (a small KV pool, batch 16);
the fixture waits for ``/health`` and kills the process at the end. Tests talk to it only
over HTTP, with the clients a user would use.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

_START_TIMEOUT = 300.0


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

    def wait_until_idle(self, timeout: float = 20.0) -> dict[str, float]:
        """Poll ``/metrics`` until no request runs or waits and no KV block is held."""
        deadline = time.monotonic() + timeout
        while True:
            m = self.metrics()
            idle = m["agentrt_num_requests_running"] == 0 == m["agentrt_num_requests_waiting"]
            held = m["agentrt_kv_total_blocks"] - m["agentrt_kv_free_blocks"] \
                - m["agentrt_kv_evictable_blocks"]
            if (idle and held == 0) or time.monotonic() > deadline:
                return m
            time.sleep(0.1)

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(server: Server) -> None:
    deadline = time.monotonic() + _START_TIMEOUT
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


@pytest.fixture(scope="session")
def server(tmp_path_factory) -> Server:
    """``agentrt serve`` on a free loopback port (killed at the end of the session)."""
    port = _free_port()
    log = tmp_path_factory.mktemp("server") / "serve.log"
    cmd = [sys.executable, "-m", "agentrt", "serve", "--host", "127.0.0.1", "--port", str(port),
           "--max-batch", "16", "--kv-cache-gb", "0.25", "--log-level", "warning"]
    with log.open("wb") as out:
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    server = Server(f"http://127.0.0.1:{port}", process, log)
    try:
        _wait_healthy(server)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def client(server):
    """The official OpenAI client pointed at the server."""
    import openai

    with openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0,
                       timeout=120) as c:
        yield c


@pytest.fixture
def aclient(server):
    """The async OpenAI client (one per test: it belongs to that test's event loop)."""
    import openai

    return openai.AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0,
                              timeout=120)


@pytest.fixture(scope="session")
def calculator() -> dict:
    """A calculator-like tool in OpenAI's format."""
    return {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Compute a op b for two numbers.",
            "parameters": {
                "type": "object",
                "properties": {
                    "a": {"type": "number"},
                    "op": {"type": "string",
                           "enum": ["add", "subtract", "multiply", "divide"]},
                    "b": {"type": "number"},
                },
                "required": ["a", "op", "b"],
            },
        },
    }
