"""``agentrt serve`` as an SGLang or vLLM user starts it: ``--port 0``, request ids in the log,
and a front server for an SGLang server started with ``--api-key``.

The keyed backend is the session engine's app, in process, on a loopback port (it checks the
key as SGLang's ``--api-key`` does, and records each call's ``Authorization``); the front
servers are real ``agentrt serve --backend sglang`` processes (no model of their own: they
load the tokenizer only)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import openai
import pytest
from serve_harness import Server, stop, wait_healthy

KEY = "sk-backend"
MODEL = "SmolLM2-135M-Instruct"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
_BANNER = re.compile(r"agentrt serve: .* on http://127\.0\.0\.1:(\d+)/v1")


class _Recorder:
    """ASGI wrapper: the path and ``Authorization`` header of every HTTP request."""

    def __init__(self, app) -> None:
        self.app = app
        self.seen: list[tuple[str, bytes | None]] = []

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            self.seen.append((scope["path"], dict(scope["headers"]).get(b"authorization")))
        await self.app(scope, receive, send)


@pytest.fixture(scope="module")
def keyed_backend(engine) -> Iterator[tuple[str, _Recorder]]:
    """The session engine served with ``api_key=KEY`` on a free loopback port."""
    import uvicorn

    from agentrt.server import create_app

    recorder = _Recorder(create_app(engine, api_key=KEY))
    sock = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(recorder, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "the keyed backend did not start"
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", recorder
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


@contextmanager
def _serve_on_port_0(log: Path, *args: str, env: dict[str, str] | None = None
                     ) -> Iterator[Server]:
    """``agentrt serve --port 0 ARGS``, its port read from the startup line."""
    cmd = [sys.executable, "-m", "agentrt", "serve", "--port", "0", "--log-level", "info", *args]
    with log.open("wb") as out:
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                   env={**os.environ, **(env or {})})
    try:
        deadline = time.monotonic() + 180
        while not (found := _BANNER.search(log.read_text(errors="replace"))):
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        server = Server(f"http://127.0.0.1:{found[1]}", process, log)
        wait_healthy(server)
        yield server
    finally:
        stop(process)


def _log_has(server: Server, text: str) -> bool:
    deadline = time.monotonic() + 30
    while text not in server.log.read_text(errors="replace"):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_a_front_server_sends_the_backend_api_key_on_every_call(keyed_backend, tmp_path):
    """An SGLang server started with ``--api-key`` refused the front server's every call (401):
    it could not start. With ``--backend-api-key`` each call carries the key — generation,
    and the front's own ``/health`` probe, ``/metrics`` load scrape and ``/get_load``."""
    url, recorder = keyed_backend
    with _serve_on_port_0(tmp_path / "front.log", "--backend", "sglang", "--backend-url", url,
                          "--backend-api-key", KEY) as front:
        client = openai.OpenAI(base_url=front.base_url, api_key="x", max_retries=0,
                               timeout=120)
        answer = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=4)
        assert answer.usage.completion_tokens == 4
        streamed = client.completions.create(model=MODEL, prompt="Hi", max_tokens=3,
                                             stream=True)
        assert "".join(c.choices[0].text for c in streamed if c.choices)
        assert httpx.get(f"{front.url}/health").status_code == 200
        assert "agentrt_num_requests_running" in httpx.get(f"{front.url}/metrics").text
        assert httpx.get(f"{front.url}/get_load").status_code == 200
    paths = {path for path, _ in recorder.seen}
    assert {"/model_info", "/generate", "/health", "/get_load"} <= paths
    assert all(auth == f"Bearer {KEY}".encode() for _, auth in recorder.seen), recorder.seen


def test_port_0_names_the_bound_port_and_the_log_names_request_ids(keyed_backend, tmp_path):
    """``--port 0`` printed ``on http://127.0.0.1:0/v1``: no client could find the server.
    The backend key comes from ``$AGENTRT_BACKEND_API_KEY`` without the flag; a client's
    ``X-Request-Id`` is in the server's access line, so its request can be found in the log."""
    url, _ = keyed_backend
    with _serve_on_port_0(tmp_path / "front.log", "--backend", "sglang", "--backend-url", url,
                          env={"AGENTRT_BACKEND_API_KEY": KEY}) as front:
        port = int(front.url.rsplit(":", 1)[1])
        assert port != 0
        answer = httpx.post(f"{front.base_url}/chat/completions",
                            json={"messages": QUESTION, "max_tokens": 2},
                            headers={"X-Request-Id": "trace-4711"}, timeout=120)
        assert answer.status_code == 200 and answer.headers["x-request-id"] == "trace-4711"
        assert _log_has(front, "request_id=trace-4711")
        line = next(x for x in front.log.read_text().splitlines() if "trace-4711" in x)
        assert "POST /v1/chat/completions" in line and " 200 " in line


def test_the_backend_api_key_flag_wins_over_the_environment(monkeypatch):
    import agentrt.server
    from agentrt.cli import main

    got: dict = {}
    monkeypatch.setattr(agentrt.server, "serve", lambda *a, **kw: got.update(kw))
    monkeypatch.setattr("agentrt.cli._check_address", lambda host, port: None)
    monkeypatch.setenv("AGENTRT_BACKEND_API_KEY", "from-env")
    sglang = ["serve", "--backend", "sglang", "--backend-url", "http://127.0.0.1:1"]
    assert main(sglang) == 0 and got["backend_api_key"] == "from-env"
    assert main([*sglang, "--backend-api-key", "from-flag"]) == 0
    assert got["backend_api_key"] == "from-flag"
    assert main(["serve"]) == 0 and got["backend_api_key"] is None  # local: no backend
    assert main(["serve", "--backend-api-key", "k"]) == 2
