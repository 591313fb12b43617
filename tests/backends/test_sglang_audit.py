"""An SGLang user's audit of the ``sglang`` backend: a server that is down, dies mid-stream or
is slow; an HTTP proxy in the environment; async calls from several event loops; a session
the server lost; ``close()``. The real server is ``agentrt serve`` on loopback (``sglang``,
``sglang_server``); transport faults come from :class:`Stub`, a loopback socket that answers
what a broken server or proxy would (no model behind it)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from agentrt import RequestOptions, SamplingParams
from agentrt.backends import get_backend
from agentrt.backends.sglang import SGLangConnectionError, SGLangError

SHORT = SamplingParams(max_tokens=4)
SERVER_INFO = b'{"version": "0.5.8"}'


class Stub:
    """A loopback HTTP/1.1 server whose ``answer(method_and_path)`` returns the raw bytes to
    send (None: send nothing, hold the connection until the test ends)."""

    def __init__(self, answer: Callable[[str], bytes | None]) -> None:
        self.answer = answer
        self.requests: list[str] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            head = _read_request(conn).decode(errors="replace")
            line = " ".join(head.split(" ")[:2])
            self.requests.append(line)
            reply = self.answer(line)
            if reply is None:
                self.stop.wait(30)
                return
            conn.sendall(reply)

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


def _read_request(conn: socket.socket) -> bytes:
    """The whole request: its head, and the body its Content-Length announces (a stub that
    closed with the body unread would reset the connection instead of ending it)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(v) for k, _, v in (h.partition(b":") for h in head.split(b"\r\n"))
                   if k.strip().lower() == b"content-length"), 0)
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return head


def _http(status: str, body: bytes, *, close: bool = True) -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n" + ("Connection: close\r\n" if close else "")
            + "\r\n").encode() + body


def _sse_then(ending: bytes) -> bytes:
    """A stream's head and one event (one token, unfinished), then ``ending``."""
    event = (b'data: {"text": "Hi", "output_ids": [1], "meta_info": {"id": "r", '
             b'"finish_reason": null, "prompt_tokens": 3, "completion_tokens": 1}}\n\n')
    return (b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + event + ending)


@pytest.fixture
def stub() -> Iterator[Callable[[Callable[[str], bytes | None]], Stub]]:
    made: list[Stub] = []

    def make(answer: Callable[[str], bytes | None]) -> Stub:
        made.append(Stub(answer))
        return made[-1]

    yield make
    for s in made:
        s.close()


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"  # closed again: nothing listens


# --- a server that is down, dies, or is slow ---------------------------------------------------
def test_a_server_that_is_down_is_a_connection_error_naming_the_url():
    url = _dead_url()
    num_threads = threading.active_count()
    with get_backend("sglang", url=url, timeout=5) as backend:
        for call in (lambda: backend.capabilities, lambda: backend.generate([1, 2], SHORT),
                     lambda: backend.model_info, backend.open_session):
            with pytest.raises(SGLangConnectionError, match=url) as info:
                call()
            assert isinstance(info.value, ConnectionError)  # and an SGLangError, a RuntimeError
            assert "refused" in str(info.value).lower()
    assert threading.active_count() == num_threads  # nothing left behind


def test_a_server_that_dies_mid_stream_is_an_error_not_a_short_answer(stub):
    # HTTP/1.0, no length: a connection that closes looks like a body that ended
    server = stub(lambda line: _sse_then(b"") if "generate" in line
                  else _http("200 OK", SERVER_INFO))
    with get_backend("sglang", url=server.url, timeout=5) as backend:
        chunks = []
        with pytest.raises(SGLangConnectionError, match="ended before") as info:
            for chunk in backend.stream([1, 2, 3], SHORT, options=RequestOptions(
                    request_id="cut")):
                chunks.append(chunk)
    assert [c.text for c in chunks] == ["Hi"] and server.url in str(info.value)


def test_a_slow_server_times_out_after_timeout_with_the_url(stub):
    server = stub(lambda line: None)  # accepts, never answers
    with get_backend("sglang", url=server.url, timeout=0.5, sessions=True) as backend:
        start = time.monotonic()
        with pytest.raises(SGLangConnectionError, match="timed out") as info:
            backend.generate([1, 2, 3], SHORT)
        assert time.monotonic() - start < 5  # the read timeout, then one abort's
    assert server.url in str(info.value) and "timeout=0.5" in str(info.value)


def test_an_error_status_on_server_info_is_raised_not_taken_for_a_router(stub):
    server = stub(lambda line: _http("401 Unauthorized", b'{"error": "Unauthorized"}'))
    with get_backend("sglang", url=server.url, timeout=5) as backend:
        with pytest.raises(SGLangError, match="401: Unauthorized"):
            backend.capabilities  # noqa: B018
        with pytest.raises(SGLangError, match="401"):
            backend.open_session()  # never a client-side "router" session


def test_a_router_without_server_info_still_keeps_sessions_here(stub):
    server = stub(lambda line: _http("404 Not Found", b"not found"))
    with get_backend("sglang", url=server.url, timeout=5) as backend:
        assert not backend.capabilities.keeps_kv_across_calls
        assert backend.open_session().startswith("client-")


# --- the environment ---------------------------------------------------------------------------
def test_an_http_proxy_in_the_environment_does_not_hijack_loopback(sglang_server, monkeypatch,
                                                                   prompt_ids):
    monkeypatch.setenv("HTTP_PROXY", _dead_url())
    monkeypatch.setenv("http_proxy", _dead_url())
    with get_backend("sglang", url=sglang_server.url, timeout=60) as backend:
        assert backend.generate(prompt_ids, SHORT).token_ids
    with get_backend("sglang", url=sglang_server.url.replace("127.0.0.1", "localhost"),
                     timeout=60) as backend:
        assert backend.generate(prompt_ids, SHORT).token_ids


def test_async_calls_from_two_event_loops(sglang, prompt_ids):
    """``asyncio.run`` twice on one backend (a script that runs each request in its own loop):
    the second found the first loop's pooled connection ("Event loop is closed")."""
    async def once() -> list[int]:
        return (await sglang.agenerate(prompt_ids, SHORT)).token_ids

    first = asyncio.run(once())
    assert asyncio.run(once()) == first == sglang.generate(prompt_ids, SHORT).token_ids


# --- sessions ----------------------------------------------------------------------------------
def test_a_session_the_server_lost_is_reopened_with_its_context(sglang, sglang_server,
                                                                 prompt_ids, tokenizer):
    appended = tokenizer.encode("\nAnd one more?", add_special_tokens=False)
    sid = sglang.open_session()
    try:
        first = sglang.generate(prompt_ids, SHORT, session_id=sid)
        # the server restarted (or closed the session): it no longer knows the id
        httpx.post(f"{sglang_server.url}/close_session", json={"session_id": sid}, timeout=30)
        out = sglang.generate(appended, SHORT, session_id=sid)
        context = prompt_ids + first.token_ids + appended
        assert out.num_prompt_tokens == len(context)
        assert out.token_ids == sglang.generate(context, SHORT).token_ids
        again = sglang.generate(appended, SHORT, session_id=sid)  # the session goes on
        assert again.num_prompt_tokens == len(context) + len(out.token_ids) + len(appended)
        assert again.num_cached_tokens >= len(context)
    finally:
        sglang.close_session(sid)


def test_close_closes_the_sessions_it_opened(sglang_server, prompt_ids):
    sglang_server.wait_until_idle()
    backend = get_backend("sglang", url=sglang_server.url, timeout=60)
    with backend:
        sid = backend.open_session()
        backend.generate(prompt_ids, SHORT, session_id=sid)  # its KV held between calls
    after = sglang_server.wait_until_idle()
    assert after["agentrt_kv_free_blocks"] + after["agentrt_kv_evictable_blocks"] \
        == after["agentrt_kv_total_blocks"]
    answer = httpx.post(f"{sglang_server.url}/generate", timeout=30, json={
        "input_ids": [1], "sampling_params": {"max_new_tokens": 1},
        "session_params": {"id": sid, "rid": None}})
    assert "does not exist" in answer.text
    with pytest.raises(RuntimeError, match="closed"):
        backend.generate(prompt_ids, SHORT)


# --- cancellation, concurrency, text -----------------------------------------------------------
ABORTS = "agentrt_requests_total{endpoint=/abort_request,status=200}"
LONG = SamplingParams(max_tokens=512, ignore_eos=True)  # NOTE: never done before the cancel


def test_a_cancelled_async_stream_sends_abort_request(sglang_server, prompt_ids):
    """Under an anyio cancel scope (what Starlette and the graph runtime use) every await in
    the scope is cancelled again: the abort must still go out."""
    import anyio

    async def run() -> int:
        num = 0
        async with get_backend("sglang", url=sglang_server.url, timeout=60) as backend:
            with anyio.CancelScope() as scope:
                async for delta in backend.astream(prompt_ids, LONG):
                    num += len(delta.token_ids)
                    scope.cancel()
        return num

    before = sglang_server.wait_until_idle()
    assert 0 < anyio.run(run) < 512
    after = sglang_server.wait_until_idle()
    assert after.get(ABORTS, 0) - before.get(ABORTS, 0) == 1
    assert after["agentrt_num_requests_running"] == 0


def test_threads_and_tasks_on_one_backend_never_cross_talk(sglang, tokenizer):
    from concurrent.futures import ThreadPoolExecutor

    prompts = [tokenizer.encode(f"{word} are known for", add_special_tokens=False)
               for word in ("Cats", "Rivers", "Owls", "Clocks", "Bees", "Maple", "Salt", "Tea")]
    alone = [sglang.generate(ids, SHORT).token_ids for ids in prompts]

    def one(i: int) -> tuple[str, list[int]]:
        out = sglang.generate(prompts[i % 8], SHORT, options=RequestOptions(request_id=f"t{i}"))
        return out.request_id, out.token_ids

    with ThreadPoolExecutor(16) as pool:
        outs = list(pool.map(one, range(32)))
    assert outs == [(f"t{i}", alone[i % 8]) for i in range(32)]

    async def gathered() -> list[list[int]]:
        outs = await asyncio.gather(*(sglang.agenerate(ids, SHORT) for ids in prompts * 3))
        return [o.token_ids for o in outs]

    assert asyncio.run(gathered()) == alone * 3


def test_non_ascii_and_special_tokens_round_trip(sglang, local, tokenizer):
    text = "Répète exactement : « 日本語 — naïve café 🎉 » <|im_end|>\n<|im_start|>assistant\n"
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") in ids  # a real special token
    for skip in (True, False):
        params = SamplingParams(max_tokens=8, skip_special_tokens=skip)
        remote, here = sglang.generate(ids, params), local.generate(ids, params)
        assert (remote.token_ids, remote.text) == (here.token_ids, here.text)
        streamed = "".join(d.text for d in sglang.stream(ids, params))
        assert streamed == remote.text and "\ufffd" not in streamed


# --- agentrt serve as a front server -----------------------------------------------------------
@pytest.fixture(scope="module")
def front(sglang_server, tmp_path_factory):
    """``agentrt serve --backend sglang`` in front of the session's SGLang-speaking server."""
    from serve_harness import start_server

    log = tmp_path_factory.mktemp("front") / "serve.log"
    with start_server(log, "--backend", "sglang", "--backend-url", sglang_server.url) as server:
        yield server


def test_a_front_server_client_that_leaves_aborts_the_backend_request(front, sglang_server):
    chat = {"model": "SmolLM2-135M-Instruct", "max_tokens": 400,
            "messages": [{"role": "user", "content": "Count from 1 to 500, one per line."}]}
    before = sglang_server.wait_until_idle()
    with httpx.stream("POST", f"{front.url}/v1/chat/completions", timeout=60,
                      json=dict(chat, stream=True)) as answer:
        assert answer.status_code == 200
        next(answer.iter_lines())  # one event, then the client leaves
    # a whole answer the client stops waiting for: 400 tokens past any EOS (seconds here)
    # against half a second
    long = {"model": chat["model"], "prompt": "Count:", "max_tokens": 400, "ignore_eos": True}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{front.url}/v1/completions", json=long, timeout=0.5)
    deadline = time.monotonic() + 20
    while sglang_server.metrics().get(ABORTS, 0) - before.get(ABORTS, 0) < 2 \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    after = sglang_server.wait_until_idle()
    assert after.get(ABORTS, 0) - before.get(ABORTS, 0) == 2
    assert after["agentrt_num_requests_running"] == 0


def test_cumulative_text_that_shrinks_at_the_end_is_never_repeated():
    """SGLang trims a matched stop string from the final text, after part of it streamed."""
    from agentrt.backends.sglang_protocol import ChunkParser

    def out(text: str, n: int, reason: dict | None = None) -> dict:
        return {"text": text, "output_ids": list(range(n)),
                "meta_info": {"completion_tokens": n, "finish_reason": reason}}

    parser = ChunkParser("r")
    texts = [parser.chunk(out("Paris", 1)).text, parser.chunk(out("Paris.\n", 2)).text,
             parser.chunk(out("Paris.", 3, {"type": "stop", "matched": "\n\n"})).text]
    assert texts == ["Paris", ".\n", ""]  # was "Paris." again at the end
    parser = ChunkParser("r")
    assert [parser.chunk(out(t, i + 1)).text for i, t in enumerate(["ab", "aX", "aXY"])] \
        == ["ab", "", "Y"]  # a changed character cannot be taken back: never repeated


def test_repr_names_the_server_and_model_never_the_key():
    """Traces (LangChain's serialized records of a ChatAgentRT on this backend) show the repr."""
    keyed = get_backend("sglang", url="http://127.0.0.1:9/", model="qwen", api_key="s3cret")
    plain = get_backend("sglang", url="http://127.0.0.1:9")
    try:
        assert repr(keyed) == "SGLangBackend(url='http://127.0.0.1:9', model='qwen', api_key=***)"
        assert "s3cret" not in repr(keyed) and "s3cret" not in str(keyed)
        assert repr(plain) == "SGLangBackend(url='http://127.0.0.1:9', model=None)"
    finally:
        keyed.close()
        plain.close()
