"""One client's hostile request must not harm another's: against a real ``agentrt serve``.

While a greedy stream runs, other clients send what an attacker or a broken client sends —
text that is not valid Unicode (a lone UTF-16 surrogate escape, invalid UTF-8 bytes), a body
without a JSON content type, thousands of stop strings, a body far over any sane size,
clients that leave in a storm or never read. Each gets a 4xx in OpenAI's shape carrying its
``X-Request-Id``, the server keeps the connection usable, and the stream beside it ends with
the tokens it gives alone. Before this audit a lone surrogate was a 500 that also reset the
client's next request on the same keep-alive connection, no 500 carried ``X-Request-Id``, a
200 MB ``Content-Length`` was read into memory, and 100,000 stop strings were scanned on every
token of every request in the batch (the engine thread's time).

The in-process tests serve the session engine with a small body limit and a route that
raises, for what no well-formed request reaches.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from serve_harness import chat_text, stream_events

MODEL = "SmolLM2-135M-Instruct"
HI = [{"role": "user", "content": "hi"}]
GOOD = {"model": MODEL, "max_tokens": 16, "stream": True,
        "messages": [{"role": "user", "content": "Write a long story about a lighthouse."}]}
LEAKS = ("/project/", ".cc:", ".py:", "Traceback", "TextEncodeInput")
JSON = {"Content-Type": "application/json"}
CHAT, COMPLETIONS, GENERATE = "/v1/chat/completions", "/v1/completions", "/generate"


def _raw(text: str) -> bytes:
    """A JSON body written by hand (``\\ud800`` stays an escape: json.dumps would refuse)."""
    return text.encode()


# (path, body bytes, extra headers, status, param, fragment of the message)
HOSTILE: list[Any] = [
    pytest.param(CHAT, _raw('{"messages": [{"role": "user", "content": "a\\ud800b"}]}'), JSON,
                 "messages", "surrogate", id="chat-content-lone-surrogate"),
    pytest.param(CHAT, _raw('{"messages": [{"role": "user", "content": [{"type": "text", '
                            '"text": "\\udfff"}]}], "stream": true}'), JSON,
                 "messages", "messages.0.content.0.text", id="chat-part-surrogate-streamed"),
    pytest.param(CHAT, _raw('{"messages": [{"role": "user", "content": "hi", "name": '
                            '"\\ud83d"}]}'), JSON, "messages", "messages.0.name",
                 id="chat-name-surrogate"),
    pytest.param(CHAT, _raw('{"messages": [{"role": "user", "content": "hi"}], "tools": [{'
                            '"type": "function", "function": {"name": "f", "description": '
                            '"\\ud800"}}]}'), JSON, "tools", "tools.0.function.description",
                 id="chat-tool-description-surrogate"),
    pytest.param(COMPLETIONS, _raw('{"prompt": ["ok", "\\ud800"], "max_tokens": 2}'), JSON,
                 "prompt", "prompt.1", id="completions-prompt-surrogate"),
    pytest.param(GENERATE, _raw('{"text": "\\ud800", "sampling_params": {"max_new_tokens": 2}}'),
                 JSON, "text", "surrogate", id="generate-text-surrogate"),
    pytest.param(CHAT, b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', JSON,
                 None, "UTF-8", id="chat-invalid-utf8"),
    pytest.param(CHAT, json.dumps({"messages": HI, "max_tokens": 2}).encode(),
                 {"Content-Type": "text/plain"}, None, "Content-Type: application/json",
                 id="chat-not-json-content-type"),
    pytest.param(CHAT, json.dumps({"messages": HI, "max_tokens": 2,
                                   "stop": [f"s{i}" for i in range(1000)]}).encode(), JSON,
                 "stop", "at most", id="chat-1000-stop-strings"),
    pytest.param(COMPLETIONS, json.dumps({"prompt": "Once", "max_tokens": 2,
                                          "stop": "x" * 100_000}).encode(), JSON,
                 "stop", "at most", id="completions-100k-char-stop"),
    pytest.param(GENERATE, json.dumps({"text": "Once", "sampling_params": {
        "max_new_tokens": 2, "stop": [f"s{i}" for i in range(100_000)]}}).encode(), JSON,
                 "sampling_params.stop", "at most", id="generate-100k-stop-strings"),
]


@pytest.fixture(scope="module")
def reference(server) -> tuple[str, str]:
    """The good stream's text and finish reason, alone on the server."""
    server.wait_until_idle()
    with stream_events(server.url + CHAT, GOOD) as events:
        return chat_text(events)


def _openai_error(response: httpx.Response, request_id: str) -> dict[str, Any]:
    """A 4xx with OpenAI's error body, the request's id, nothing internal."""
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    assert response.headers.get("x-request-id") == request_id
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["message"]
    assert not any(leak in error["message"] for leak in LEAKS), error["message"]
    return error


def test_hostile_bodies_are_400s_while_a_stream_runs_on(server, reference):
    """Every hostile body of :data:`HOSTILE`, on one keep-alive connection, while one greedy
    stream decodes; then the connection still serves a good request."""
    failures: dict[str, str] = {}
    with httpx.Client(timeout=120) as http, stream_events(server.url + CHAT, GOOD) as events:
        first = next(events)  # NOTE: the good request is decoding when the bad ones arrive
        for case in HOSTILE:
            path, body, headers, param, fragment = case.values
            rid = f"audit-{case.id}"
            try:
                response = http.post(server.url + path, content=body,
                                     headers={**headers, "X-Request-Id": rid})
                error = _openai_error(response, rid)
                assert response.status_code == 400, response.status_code
                assert fragment in error["message"], error["message"]
                assert param is None or error["param"] == param, error["param"]
            except (AssertionError, httpx.HTTPError) as exc:
                failures[case.id] = f"{type(exc).__name__}: {exc}"[:300]
        good = chat_text(iter([first, *events]))
        after = http.post(server.url + CHAT, json={"messages": HI, "max_tokens": 2})
    assert failures == {}
    assert after.status_code == 200, after.text
    assert good == reference and reference[0]


def test_a_body_declared_over_the_limit_is_a_413_before_it_is_sent(server):
    """200 MB announced: refused from the headers, the body never read (none is sent)."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nX-Request-Id: big-one\r\n"
                     b"Content-Length: 200000000\r\n\r\n{")
        head, body = _read_response(sock)
    assert head.startswith(b"HTTP/1.1 413 "), head
    assert b"x-request-id: big-one" in head.lower()
    error = json.loads(body)["error"]
    assert error["code"] == "request_too_large" and "bytes" in error["message"]


def _read_response(sock: socket.socket) -> tuple[bytes, bytes]:
    """The status line and headers, and the body (by Content-Length) of one response."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, body
        body += chunk
    return head, body


def _read_until(sock: socket.socket, marker: bytes) -> bytes:
    data = b""
    while marker not in data:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    return data


def _finished(metrics: dict[str, float], reason: str) -> float:
    return metrics.get(f"agentrt_requests_finished_total{{finish_reason={reason}}}", 0.0)


def test_a_storm_of_clients_that_leave_frees_every_request(server, reference):
    """Sixteen clients in a row leave: half before reading a byte, half after the first
    event. Each request is aborted and counted 499, no KV stays held, and a stream after
    them gives the tokens it gives alone."""
    before = server.wait_until_idle()
    body = json.dumps({**GOOD, "max_tokens": 400, "stop": ["NEVER-SEEN"]}).encode()
    host, port = server.url.removeprefix("http://").split(":")
    request = (f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    for i in range(16):
        with socket.create_connection((host, int(port)), timeout=60) as sock:
            sock.sendall(request)
            if i % 2:
                _read_until(sock, b"data: ")  # the first event
    key = f"agentrt_requests_total{{endpoint={CHAT},status=499}}"

    def counted(m: dict[str, float]) -> tuple[float, float]:
        return (_finished(m, "abort") - _finished(before, "abort"),
                m.get(key, 0) - before.get(key, 0))

    after = server.wait_until_idle(timeout=60, until=lambda m: counted(m) == (16, 16))
    assert after["agentrt_num_requests_running"] == 0 == after["agentrt_num_requests_waiting"]
    assert after["agentrt_kv_total_blocks"] - after["agentrt_kv_free_blocks"] \
        - after["agentrt_kv_evictable_blocks"] == 0
    assert counted(after) == (16, 16)
    with stream_events(server.url + CHAT, GOOD) as events:
        assert chat_text(events) == reference


def test_a_client_that_never_reads_stalls_no_one_and_loses_nothing(server, reference):
    """A stream whose client does not read (a tiny receive window) while another stream
    runs: the other ends with its tokens alone; the slow client, reading at last, gets its
    whole answer."""
    body = json.dumps({**GOOD, "max_tokens": 48}).encode()
    host, port = server.url.removeprefix("http://").split(":")
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    slow.settimeout(120)
    with slow:
        slow.connect((host, int(port)))
        slow.sendall((f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n").encode()
                     + body)
        with stream_events(server.url + CHAT, GOOD) as events:
            assert chat_text(events) == reference
        data = b""
        while chunk := slow.recv(65536):
            data += chunk
    events = [json.loads(line[6:]) for line in data.decode().splitlines()
              if line.startswith("data: {")]
    finishes = {e["choices"][0]["finish_reason"] for e in events}
    assert data.startswith(b"HTTP/1.1 200 ") and b"data: [DONE]" in data
    assert "length" in finishes or "stop" in finishes


# --- in process: the session engine, a small body limit, a route that raises ---------------
LIMIT = 64 * 1024


@pytest.fixture(scope="module")
def local_url(engine) -> Iterator[str]:
    """The session engine served in process with ``max_body_bytes=LIMIT`` and ``/boom``
    (raises), under uvicorn with Python's logging left as it is (``caplog`` sees it)."""
    import uvicorn

    from agentrt.server import create_app

    app = create_app(engine, max_body_bytes=LIMIT)

    async def boom() -> None:
        raise RuntimeError("kaboom")

    app.add_api_route("/boom", boom, methods=["GET"])
    sock = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


def test_an_internal_error_is_a_500_with_its_id_logged_and_the_connection_kept(
        local_url, caplog):
    caplog.set_level(logging.ERROR)
    with httpx.Client(timeout=60) as http:
        failed = http.get(local_url + "/boom", headers={"X-Request-Id": "boom-1"})
        assert failed.status_code == 500
        assert failed.headers.get("x-request-id") == "boom-1"
        error = failed.json()["error"]
        assert error["type"] == "server_error" and "kaboom" in error["message"]
        for _ in range(3):  # NOTE: the same pooled connection: it was not closed under them
            assert http.get(local_url + "/v1/models").status_code == 200
    logged = [r for r in caplog.records if r.exc_info and "kaboom" in str(r.exc_info[1])]
    assert logged and "boom-1" in logged[0].getMessage()


def test_a_chunked_body_over_the_limit_is_a_413_while_it_streams_in(local_url):
    """No ``Content-Length``: the body is counted as it arrives and refused past the limit
    (the client stops sending when the answer comes)."""
    host, port = local_url.removeprefix("http://").split(":")
    chunk = b"%x\r\n%s\r\n" % (8192, b" " * 8192)
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
                     b"X-Request-Id: chunky\r\n\r\n")
        sent = 0
        try:
            while sent < 4 * LIMIT:
                sock.sendall(chunk)
                sent += 8192
        except OSError:  # NOTE: the server answered and closed before all was sent
            pass
        head, body = _read_response(sock)
    assert head.startswith(b"HTTP/1.1 413 "), head
    assert b"x-request-id: chunky" in head.lower()
    assert json.loads(body)["error"]["code"] == "request_too_large"


def test_a_body_under_the_limit_is_served(local_url):
    padding = "x" * (LIMIT // 2)
    answer = httpx.post(local_url + CHAT, timeout=120, json={
        "messages": HI, "max_tokens": 1, "user": padding})
    assert answer.status_code == 200, answer.text


# --- a grammar's compile: seconds of xgrammar work (a long maxLength), no one else's wait -----
class _CompileSpy:
    """Stands in for the engine's xgrammar compiler: records, for each compile of a spec,
    whether it ran on an event loop and under the engine's lock."""

    def __init__(self, real: Any, engine: Any) -> None:
        self.real, self.engine = real, engine
        self.calls: list[tuple[str, bool, bool]] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.real, name)
        if not name.startswith("compile_"):
            return method

        def compile_(spec: Any = None, *args: Any, **kwargs: Any) -> Any:
            import asyncio

            try:
                on_loop = asyncio.get_running_loop() is not None
            except RuntimeError:
                on_loop = False
            self.calls.append((str(spec), on_loop, self.engine._lock._is_owned()))
            return method(spec, *args, **kwargs)

        return compile_


@contextmanager
def _spied_compiler(engine) -> Iterator[_CompileSpy]:
    from agentrt.constrained import get_grammar_backend

    backend = get_grammar_backend(engine.core)
    real = backend.compiler
    backend.compiler = spy = _CompileSpy(real, engine)
    try:
        yield spy
    finally:
        backend.compiler = real


def _first_compile(spy: _CompileSpy, marker: str) -> tuple[str, bool, bool]:
    """The first compile of the spec holding ``marker``: the one xgrammar's cache missed."""
    return next(call for call in spy.calls if marker in call[0])


@pytest.mark.parametrize("path", [CHAT, GENERATE])
def test_a_grammar_is_compiled_off_the_event_loop_and_outside_the_engine_lock(
        engine, local_url, path):
    """Compiled on the event loop under the engine's lock, a schema with a long
    ``maxLength`` (seconds of xgrammar work) stopped every other client's stream."""
    marker = f"h49-{path.strip('/').replace('/', '-')}"
    schema = {"type": "object", "properties": {marker: {"type": "string", "maxLength": 5}},
              "required": [marker]}
    body: dict[str, Any] = {
        "messages": HI, "max_tokens": 2, "response_format": {
            "type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}
    if path == GENERATE:
        body = {"text": "{", "sampling_params": {"max_new_tokens": 2,
                                                 "json_schema": json.dumps(schema)}}
    with _spied_compiler(engine) as spy:
        answer = httpx.post(local_url + path, json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    _, on_loop, locked = _first_compile(spy, marker)
    assert not on_loop and not locked


def test_the_engine_compiles_a_grammar_outside_its_lock(engine):
    """Engine.submit compiled a request's grammar under Engine._lock: the driver thread
    stepped no request while xgrammar worked (seconds for a json_schema maxLength of
    100000)."""
    from agentrt.core.sampling_params import Grammar, SamplingParams

    marker = "h49-engine-lock"
    schema = {"type": "object", "properties": {marker: {"type": "integer"}}}
    params = SamplingParams(max_tokens=1, grammar=Grammar("json_schema", json.dumps(schema)))
    with _spied_compiler(engine) as spy:
        engine.generate("{", params)
    assert not _first_compile(spy, marker)[2]


@pytest.mark.parametrize("call", ["astream", "agenerate"])
async def test_the_engine_s_async_calls_compile_a_grammar_off_the_event_loop(engine, call):
    """An async caller's loop runs on while xgrammar compiles (on a worker thread), and the
    compile holds no lock."""
    from agentrt.core.sampling_params import Grammar, SamplingParams

    marker = f"h49-engine-{call}"
    schema = {"type": "object", "properties": {marker: {"type": "integer"}}}
    params = SamplingParams(max_tokens=1, grammar=Grammar("json_schema", json.dumps(schema)))
    with _spied_compiler(engine) as spy:
        if call == "astream":
            async for _ in engine.astream("{", params):
                pass
        else:
            await engine.agenerate("{", params)
    _, on_loop, locked = _first_compile(spy, marker)
    assert not on_loop and not locked


def test_a_wrong_method_is_a_405_in_openai_shape_naming_the_allowed_one(server):
    answer = httpx.get(server.url + CHAT, headers={"X-Request-Id": "m-405"}, timeout=30)
    assert answer.status_code == 405
    assert answer.headers.get("allow") == "POST"
    assert "GET /v1/chat/completions" in _openai_error(answer, "m-405")["message"]
