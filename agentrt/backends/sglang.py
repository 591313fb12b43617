"""The ``sglang`` backend: an SGLang server — or sglang-router in front of several — over
SGLang's native HTTP API (SGLang 0.5.8, sglang-router 0.3.2; see :mod:`.sglang_protocol`).

Calls are ``POST /generate`` with token ids, streamed as server-sent events; each call has
a ``rid``, which ``POST /abort_request`` aborts (closing a stream early aborts it too).
Sessions use SGLang's own: ``POST /open_session`` gives an id, each call names it and the
request it continues in ``session_params`` (with ``offset`` where the call keeps only part
of that request's context: a seam rolled back), so only the appended tokens travel and the
server finds the earlier KV in its radix tree. SGLang cannot pause a request in place, and
the tree may evict that KV under memory pressure: the capabilities say so. (``agentrt
serve`` answers the same API and holds a session's KV in a paused request.) Grammars travel
as SGLang's sampling fields; a hook, forced tokens or a logits processor cannot (a
:class:`~agentrt.backends.call.Call` runs a hook on the streamed tokens instead).

Front ends render prompts with the served model's tokenizer, loaded here, offline: from
``tokenizer=`` or ``model=`` (anything :func:`agentrt.models.files.resolve_model` finds),
else from the path ``/model_info`` reports, if that resolves on this machine.

sglang-router 0.3.2 routes ``/generate`` (cache-aware: a request goes to the worker whose
tree holds the longest prefix of it) but not ``/open_session`` or ``/abort_request``. Behind
a router, detected from ``/server_info``, a session is kept here: each call sends the
whole context, and cache-aware routing brings it to the worker that has its prefix cached.

Where this client differs from SGLang's own (``requests`` / ``aiohttp``) on purpose:

- A server that cannot be reached or stops answering — refused, reset, ``timeout`` seconds
  without a byte (per connect and per read, not for the whole call), a stream that ends
  before its request finished — raises :class:`SGLangConnectionError` naming the URL (a
  ``ConnectionError``), never a short answer; an error status raises :class:`SGLangError`
  with the server's message. A call the server took that did not finish (failed,
  cancelled — under an anyio cancel scope too — or closed early, even before its first
  byte) is aborted with ``/abort_request``, not only by its closed connection.
- A loopback URL (``127.0.0.1``, ``::1``, ``localhost``) ignores ``HTTP_PROXY`` and the other
  proxy variables; any other host honours them.
- A session the server no longer knows (it restarted, or the session was closed elsewhere) is
  opened again under the same id with the whole context this client holds, once per call:
  the call goes on, prefilling that context.
- :meth:`SGLangBackend.close` also closes the sessions still open (their KV on the server).
- Async calls keep one connection pool per event loop (so ``asyncio.run`` twice works).
"""

from __future__ import annotations

import asyncio
import ipaddress
import uuid
import weakref
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import aclosing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx

from agentrt.backends.base import Backend, BackendCapabilities
from agentrt.backends.sglang_protocol import (
    SGLANG_API_VERSION,
    ChunkParser,
    SGLangConnectionError,
    SGLangError,
    error_message,
    generate_body,
    is_router_info,
    parse_payload,
)
from agentrt.core.model_info import ModelInfo
from agentrt.core.options import RequestOptions
from agentrt.core.outputs import StreamDelta
from agentrt.core.sampling_params import SamplingParams

__all__ = ["SGLANG_API_VERSION", "SGLangBackend", "SGLangConnectionError", "SGLangError"]


@dataclass
class _Session:
    last_rid: str | None = None
    """The server-side session's last request that ended normally (what a call continues)."""
    context: list[int] = field(default_factory=list)
    """Behind a router: the prompts and outputs so far, sent again with every call."""


@dataclass
class _Call:
    """One ``/generate`` in flight."""

    rid: str
    body: dict[str, Any]
    prompt_ids: list[int]
    session: _Session | None
    parser: ChunkParser

    def commit(self, delta: StreamDelta) -> None:
        """A session call that ended normally becomes what the next one continues."""
        if self.session is None or delta.finish_reason not in ("stop", "length"):
            return
        self.session.last_rid = self.rid
        self.session.context = self.prompt_ids + self.parser.token_ids
        self.committed = True

    committed = False

    def end(self) -> None:
        """A session call that did not commit (aborted, cut short) leaves the session empty:
        its next call starts afresh (the server's prefix cache serves what it still has)."""
        if self.session is not None and not self.committed:
            self.session.last_rid, self.session.context = None, []

    def afresh(self) -> _Call:
        """This session call again, its whole context sent to a session opened anew."""
        body = dict(self.body, input_ids=self.prompt_ids,
                    session_params={"id": self.body["session_params"]["id"], "rid": None})
        return _Call(self.rid, body, self.prompt_ids, self.session, ChunkParser(self.rid))


class SGLangBackend(Backend):
    """A client of the SGLang server or router at ``url`` (e.g. ``http://127.0.0.1:30000``).

    ``sessions``: whether the server keeps sessions (None = ask it once: a router does not).
    ``session_capacity`` is SGLang's ``capacity_of_str_len`` for the sessions opened.
    ``tokenizer`` (a tokenizer or where one is) or ``model`` name the served model's
    tokenizer when the server's own path is not on this machine. ``timeout`` (seconds) bounds
    connecting and each read, not a whole call. Thread-safe; see the module docs for where it
    differs from SGLang's own client.
    """

    name = "sglang"

    def __init__(self, url: str = "http://127.0.0.1:30000", *, timeout: float = 600.0,
                 sessions: bool | None = None, session_capacity: int = 1 << 16,
                 api_key: str | None = None, model: str | None = None,
                 tokenizer: Any = None) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._model, self._tokenizer = model, tokenizer
        self._model_info: ModelInfo | None = None
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._options = {"base_url": self.url, "timeout": timeout, "headers": headers,
                         "trust_env": not _is_loopback(self.url)}
        self._client = httpx.Client(**self._options)
        self._aclients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop,
                                                  httpx.AsyncClient] = weakref.WeakKeyDictionary()
        self._is_closed = False
        self._server_sessions = sessions
        self._server_info: dict[str, Any] | None = None
        self.session_capacity = session_capacity
        self._sessions: dict[str, _Session] = {}

    def __repr__(self) -> str:
        """The server and model, never the key (traces and LangChain's serialized records
        show it)."""
        keyed = ", api_key=***" if self._options["headers"] else ""
        return f"SGLangBackend(url={self.url!r}, model={self._model!r}{keyed})"

    @property
    def headers(self) -> dict[str, str]:
        """The headers every call sends: ``Authorization: Bearer <api_key>`` with a key (for a
        server started with ``--api-key``), else none. Others that call the same server (a
        front server's health probe and load scrape) send them too."""
        return dict(self._options["headers"])

    # --- capabilities --------------------------------------------------------------------
    @property
    def capabilities(self) -> BackendCapabilities:
        sessions = self._has_sessions()
        held = sessions and bool((self._server_info or {}).get("session_kv_held"))
        return BackendCapabilities(can_pause_in_place=False, keeps_kv_across_calls=sessions,
                                   kv_held_between_calls=held, prefix_cache=True)

    def _has_sessions(self) -> bool:
        if self._server_sessions is None:
            response = self._request("GET", "/server_info")
            if response.status_code == 404:  # a router, or SGLang before /server_info
                response = self._request("GET", "/get_server_info")
            self._learn(response)
        return bool(self._server_sessions)

    async def _ahas_sessions(self) -> bool:
        if self._server_sessions is None:
            response = await self._arequest("GET", "/server_info")
            if response.status_code == 404:
                response = await self._arequest("GET", "/get_server_info")
            self._learn(response)
        return bool(self._server_sessions)

    def _learn(self, response: httpx.Response) -> None:
        """Server or router? (``session_kv_held``: agentrt's server says its sessions pin KV.)
        Only a 404 (sglang-router 0.3.2 has neither endpoint) means a router; another error
        status (a wrong API key, a server starting up) is raised, never taken for one."""
        if response.status_code != 404:
            _check_response(response)
        info = _json_or_none(response)
        self._server_sessions = not is_router_info(info)
        self._server_info = info if self._server_sessions else None

    # --- the model ------------------------------------------------------------------------
    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None or isinstance(self._tokenizer, str | Path):
            self._tokenizer = _load_tokenizer(self._tokenizer or self._model, self._info_path)
        return self._tokenizer

    @property
    def model_info(self) -> ModelInfo:
        if self._model_info is None:
            info = _checked_json(self._request("GET", "/model_info"))
            server = _json_or_none(self._request("GET", "/server_info")) or {}
            tok = self.tokenizer
            self._model_info = ModelInfo(
                name=str(server.get("served_model_name") or info["model_path"]),
                path=str(info["model_path"]),
                architecture=str((info.get("architectures") or ["unknown"])[0]),
                max_model_len=int(server.get("context_length") or tok.model_max_length),
                vocab_size=len(tok), eos_token_ids=_eos_ids(tok))
        return self._model_info

    @property
    def model_name(self) -> str:
        return self.model_info.name

    def _info_path(self) -> str:
        info = _checked_json(self._request("GET", "/model_info"))
        return str(info.get("tokenizer_path") or info["model_path"])

    # --- generation ----------------------------------------------------------------------
    def stream(self, prompt_ids: Sequence[int], params: SamplingParams | None = None, *,
               session_id: str | None = None, keep: int | None = None,
               options: RequestOptions | None = None) -> Iterator[StreamDelta]:
        if session_id is not None:
            self._has_sessions()
        call = self._call(prompt_ids, params, session_id, keep, options)
        try:
            yield from self._stream(call)
        except SGLangError as exc:
            if not _is_lost_session(call, exc):
                raise
            _check_response(self._request("POST", "/open_session",
                                          json=self._open_body(session_id)))
            yield from self._stream(call.afresh())

    async def astream(self, prompt_ids: Sequence[int], params: SamplingParams | None = None,
                      *, session_id: str | None = None, keep: int | None = None,
                      options: RequestOptions | None = None) -> AsyncIterator[StreamDelta]:
        if session_id is not None:
            await self._ahas_sessions()
        call = self._call(prompt_ids, params, session_id, keep, options)
        try:
            async with aclosing(self._astream(call)) as deltas:
                async for delta in deltas:
                    yield delta
        except SGLangError as exc:
            if not _is_lost_session(call, exc):
                raise
            _check_response(await self._arequest("POST", "/open_session",
                                                 json=self._open_body(session_id)))
            async with aclosing(self._astream(call.afresh())) as deltas:
                async for delta in deltas:
                    yield delta

    def _stream(self, call: _Call) -> Iterator[StreamDelta]:
        """One ``/generate`` streamed; aborted unless it finished or was refused — also when
        it ends before the answer's first byte."""
        is_over = False
        try:
            with self._reaching("POST /generate"), \
                    self._client.stream("POST", "/generate", json=call.body) as response:
                if response.is_error:
                    is_over = True
                    response.read()
                    _raise(response)
                for line in response.iter_lines():
                    delta = _parse_line(call, line)
                    if delta is not None:
                        is_over = delta.finished
                        yield delta
                if not is_over:
                    raise self._cut_short(call)
        finally:
            call.end()
            if not is_over:
                self._abort_quietly(call.rid)

    async def _astream(self, call: _Call) -> AsyncIterator[StreamDelta]:
        is_over = False
        try:
            with self._reaching("POST /generate"):
                async with self._async_client().stream("POST", "/generate",
                                                       json=call.body) as response:
                    if response.is_error:
                        is_over = True
                        await response.aread()
                        _raise(response)
                    async for line in response.aiter_lines():
                        delta = _parse_line(call, line)
                        if delta is not None:
                            is_over = delta.finished
                            yield delta
                    if not is_over:
                        raise self._cut_short(call)
        finally:
            call.end()
            if not is_over:
                with anyio.CancelScope(shield=True):  # NOTE: sent when cancelled too
                    await self._aabort_quietly(call.rid)

    def _cut_short(self, call: _Call) -> SGLangConnectionError:
        return SGLangConnectionError(f"POST /generate to the SGLang server at {self.url} "
                                     f"ended before request {call.rid} finished")

    # --- sessions ------------------------------------------------------------------------
    def open_session(self) -> str:
        if not self._has_sessions():
            return self._add_session(f"client-{uuid.uuid4().hex}")
        response = self._request("POST", "/open_session", json=self._open_body())
        return self._add_session(_session_id(response))

    async def aopen_session(self) -> str:
        if not await self._ahas_sessions():
            return self._add_session(f"client-{uuid.uuid4().hex}")
        response = await self._arequest("POST", "/open_session", json=self._open_body())
        return self._add_session(_session_id(response))

    def close_session(self, session_id: str) -> None:
        if self._sessions.pop(session_id, None) is not None and self._server_sessions:
            _check_response(self._request("POST", "/close_session",
                                          json={"session_id": session_id}))

    async def aclose_session(self, session_id: str) -> None:
        if self._sessions.pop(session_id, None) is not None and self._server_sessions:
            response = await self._arequest("POST", "/close_session",
                                            json={"session_id": session_id})
            _check_response(response)

    # --- control -------------------------------------------------------------------------
    def abort(self, request_id: str) -> None:
        _check_abort(self._request("POST", "/abort_request", json={"rid": request_id}))

    async def aabort(self, request_id: str) -> None:
        _check_abort(await self._arequest("POST", "/abort_request", json={"rid": request_id}))

    def close(self) -> None:
        """Close the server sessions still open (quietly: the server may be gone), then the
        connections; later calls raise."""
        if self._is_closed:
            return
        for session_id in list(self._sessions):
            try:
                self.close_session(session_id)
            except (httpx.HTTPError, SGLangError):
                pass
        self._is_closed = True
        self._client.close()
        self._aclients.clear()  # NOTE: each belongs to its event loop; dropped, not awaited

    async def aclose(self) -> None:
        if self._is_closed:
            return
        for session_id in list(self._sessions):
            try:
                await self.aclose_session(session_id)
            except (httpx.HTTPError, SGLangError):
                pass
        client = self._aclients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()
        self.close()

    # --- internals -----------------------------------------------------------------------
    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        with self._reaching(f"{method} {path}"):
            return self._client.request(method, path, **kwargs)

    async def _arequest(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        with self._reaching(f"{method} {path}"):
            return await self._async_client().request(method, path, **kwargs)

    @contextmanager
    def _reaching(self, what: str) -> Iterator[None]:
        """Transport failures of ``what`` as :class:`SGLangConnectionError` naming the URL."""
        if self._is_closed:
            raise RuntimeError(f"the sglang backend at {self.url} is closed")
        try:
            yield
        except httpx.TimeoutException as exc:
            raise SGLangConnectionError(
                f"{what} to the SGLang server at {self.url} timed out (timeout={self.timeout} "
                "s, for connecting and for each read)") from exc
        except httpx.TransportError as exc:
            raise SGLangConnectionError(f"{what} to the SGLang server at {self.url} failed: "
                                        f"{exc or type(exc).__name__}") from exc

    def _async_client(self) -> httpx.AsyncClient:
        """This event loop's client (a pool's connections belong to the loop that made them)."""
        loop = asyncio.get_running_loop()
        client = self._aclients.get(loop)
        if client is None:
            client = self._aclients[loop] = httpx.AsyncClient(**self._options)
        return client

    def _call(self, prompt_ids: Sequence[int], params: SamplingParams | None,
              session_id: str | None, keep: int | None, options: RequestOptions | None
              ) -> _Call:
        opts = options or RequestOptions()
        _check_options(opts)
        rid = opts.request_id or uuid.uuid4().hex
        sent = list(prompt_ids)
        context, session, session_params = sent, None, None
        if session_id is not None:
            session = self._sessions.get(session_id)
            if session is None:
                raise ValueError(f"unknown session {session_id!r} (open it with open_session)")
            keep = len(session.context) if keep is None else keep
            if not 0 <= keep <= len(session.context):
                raise ValueError(f"keep must be in [0, {len(session.context)}] (the session's "
                                 f"context), got {keep}")
            context = session.context[:keep] + sent
            if not self._server_sessions:
                sent = context
            elif keep == 0 or session.last_rid is None:
                session_params = {"id": session_id, "rid": None}
            else:
                session_params = {"id": session_id, "rid": session.last_rid}
                if keep < len(session.context):
                    session_params["offset"] = keep  # NOTE: a seam rolled back
        body = generate_body(sent, params or SamplingParams(), rid=rid, stream=True,
                             session_params=session_params, namespace=opts.namespace)
        return _Call(rid, body, context, session, ChunkParser(rid))

    def _open_body(self, session_id: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"capacity_of_str_len": self.session_capacity}
        if session_id is not None:
            body["session_id"] = session_id
        return body

    def _add_session(self, session_id: str) -> str:
        self._sessions[session_id] = _Session()
        return session_id

    def _abort_quietly(self, rid: str) -> None:
        try:
            self.abort(rid)
        except (httpx.HTTPError, RuntimeError):  # SGLangError, or closed meanwhile
            pass  # the connection closes anyway, which aborts the request too

    async def _aabort_quietly(self, rid: str) -> None:
        try:
            await self.aabort(rid)
        except (httpx.HTTPError, RuntimeError):
            pass


def _parse_line(call: _Call, line: str) -> StreamDelta | None:
    """The delta a ``data:`` line carries (None for other lines and ``[DONE]``)."""
    if not line.startswith("data:") or line[5:].strip() == "[DONE]":
        return None
    delta = call.parser.chunk(parse_payload(line[5:].strip()))
    if delta.finished:
        call.commit(delta)
    return delta


def _is_lost_session(call: _Call, error: SGLangError) -> bool:
    """The server does not know the call's session (SGLang's words), said before any token."""
    params = call.body.get("session_params")
    return params is not None and not call.parser.token_ids and \
        f"session id {params['id']} does not exist" in error.message


def _is_loopback(url: str) -> bool:
    host = httpx.URL(url).host
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_options(opts: RequestOptions) -> None:
    """What cannot travel to an SGLang server is refused. ``namespace`` travels as
    ``extra_key``; ``group`` and ``depth`` (agentrt's topology-aware batching) are ignored —
    the server schedules by its own policy — and so is ``keep_kv`` (sessions keep the
    context)."""
    if opts.hook is not None:
        raise ValueError("a hook runs in process; the sglang backend cannot send it (run the "
                         "call through agentrt.backends.Call, which runs it on the stream)")
    if opts.forced_token_ids:
        raise ValueError("forced_token_ids are not supported by the sglang backend")


def _load_tokenizer(where: Any, info_path: Any) -> Any:
    """The tokenizer at ``where`` (a folder, a file or a model name), else at the path the
    server reports — found on this machine, never downloaded."""
    from agentrt.models import load_tokenizer
    from agentrt.models.files import resolve_model
    from agentrt.models.sources import ModelNotFoundError

    spec = where if where is not None else info_path()
    try:
        folder = Path(spec) if Path(spec).is_dir() else resolve_model(spec)
    except ModelNotFoundError as exc:
        raise ValueError(f"the served model's tokenizer ({spec}) is not on this machine and "
                         "nothing is downloaded: pass tokenizer= (a tokenizer or its folder) "
                         f"or model= to the sglang backend\n{exc}") from exc
    return load_tokenizer(folder)


def _eos_ids(tokenizer: Any) -> tuple[int, ...]:
    eos = getattr(tokenizer, "eos_token_id", None)
    return () if eos is None else (int(eos),)


def _checked_json(response: httpx.Response) -> Any:
    _check_response(response)
    return response.json()


def _json_or_none(response: httpx.Response) -> Any:
    try:
        return response.json() if response.status_code == 200 else None
    except ValueError:
        return None


def _raise(response: httpx.Response) -> None:
    """An error answer as :class:`SGLangError` (its body read already)."""
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    raise SGLangError(response.status_code, error_message(body))


def _check_response(response: httpx.Response) -> None:
    if response.is_error:
        _raise(response)


def _check_abort(response: httpx.Response) -> None:
    if response.status_code == 404:  # sglang-router 0.3.2 does not route /abort_request
        raise SGLangError(404, "this endpoint (a router?) does not abort by rid; "
                               "close the stream instead")
    _check_response(response)


def _session_id(response: httpx.Response) -> str:
    _check_response(response)
    session_id = response.json()
    if not isinstance(session_id, str):
        raise SGLangError(response.status_code, f"unexpected /open_session answer {session_id!r}")
    return session_id
