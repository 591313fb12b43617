"""SGLang's native generation API on the server's backend (SGLang 0.5.8's shapes).

- ``POST /generate``: ``text`` or ``input_ids``, ``sampling_params``, ``rid``, ``stream``,
  ``session_params``; answers ``{"text", "output_ids", "meta_info"}`` where ``meta_info``
  has ``id`` (the rid), ``finish_reason`` (None until the end, then ``{"type": "stop",
  "matched": ...}``, ``{"type": "length", "length": ...}`` or ``{"type": "abort", ...}``),
  ``prompt_tokens``, ``completion_tokens`` and ``cached_tokens`` (prompt tokens whose KV was
  reused: prefix-cache hits, or a session's held context). Streamed, each ``data:`` event
  carries the cumulative ``text`` and ``output_ids`` (SGLang's default, without
  ``--stream-output``), then ``data: [DONE]``.
- ``POST /open_session`` (the id, as a JSON string), ``POST /close_session``, ``POST
  /abort_request`` — see :mod:`.native_sessions`.

As in SGLang, a ``max_new_tokens`` the request sets that does not fit the context with the
prompt is a 400 ("Requested token count exceeds the model's maximum context length ...").

So an SGLang client (agentrt's ``sglang`` backend among them) and sglang-router work
against ``agentrt serve`` unchanged.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterable
from functools import partial
from typing import Any

import anyio
from fastapi import APIRouter, Request
from starlette.responses import Response

from agentrt.backends.call import Call
from agentrt.core.options import RequestOptions
from agentrt.core.outputs import StreamDelta
from agentrt.core.sampling_params import SamplingParams
from agentrt.server.errors import APIError
from agentrt.server.native_protocol import (
    AbortRequest,
    CloseSessionRequest,
    GenerateRequest,
    NativeSamplingParams,
    OpenSessionRequest,
)
from agentrt.server.native_sessions import Native, NativeSession, NativeState
from agentrt.server.run import Event, Run
from agentrt.server.state import ServerState, State
from agentrt.server.streaming import cancel_on_disconnect, start_stream

__all__ = ["ENDPOINTS", "NativeRun", "router"]

ENDPOINTS = ("/generate", "/open_session", "/close_session", "/abort_request")
router = APIRouter()


@router.api_route("/generate", methods=["POST", "PUT"], response_model=None)
async def generate(body: GenerateRequest, request: Request, state: State,
                   native: Native) -> Any:
    """Generate for one prompt, whole or streamed, alone or as a session's next request."""
    started = time.monotonic()
    run = await _prepare(state, native, body, started)
    counted = partial(state.metrics.count, "/generate")
    if body.stream:
        return await start_stream(run.events(), on_end=counted)
    return await cancel_on_disconnect(request, run.complete(), on_end=counted)


@router.api_route("/open_session", methods=["GET", "POST"])
async def open_session(body: OpenSessionRequest, state: State, native: Native) -> str:
    """Open a session; its id (the one asked for, or a new one)."""
    session_id = native.open(body.capacity_of_str_len, body.session_id or uuid.uuid4().hex)
    state.metrics.count("/open_session", 200)
    return session_id


@router.api_route("/close_session", methods=["GET", "POST"])
async def close_session(body: CloseSessionRequest, state: State, native: Native) -> Response:
    """Close a session, freeing the KV its request holds."""
    native.close(body.session_id)
    state.metrics.count("/close_session", 200)
    return Response(status_code=200)


@router.post("/abort_request")
async def abort_request(body: AbortRequest, state: State, native: Native) -> Response:
    """Abort a native request by ``rid`` (or all with ``abort_all``); its answer ends with
    ``finish_reason.type == "abort"``."""
    native.abort(body.rid, body.abort_all)
    state.metrics.count("/abort_request", 200)
    return Response(status_code=200)


async def _prepare(state: ServerState, native: NativeState, body: GenerateRequest,
                   started: float) -> NativeRun:
    try:
        params = body.params.to_params()
        await anyio.to_thread.run_sync(state.compile_grammar, params)
    except ValueError as exc:
        raise APIError.bad_request(exc, param="sampling_params") from exc
    ids = body.input_ids
    if ids is None:
        text = body.text or ""
        ids = await anyio.to_thread.run_sync(lambda: state.encode(text))
    rid = body.rid or uuid.uuid4().hex
    if rid in native.running:
        raise APIError(400, f"rid {rid!r} is already in use", param="rid")
    session, parent = None, None
    if body.session_params is not None:
        session = native.get(body.session_params.id)
        ids, parent = session.prompt_for(body.session_params, list(ids)), body.session_params.rid
    _check_context(state, len(ids), body.params)
    return NativeRun(state, native, rid, list(ids), params, started, session=session,
                     parent=parent, no_stop_trim=body.params.no_stop_trim,
                     namespace=body.extra_key or "")


def _check_context(state: ServerState, num_prompt_tokens: int,
                   params: NativeSamplingParams) -> None:
    """SGLang's rule and words: a ``max_new_tokens`` the request sets that does not fit the
    context with the prompt is a 400 (the default one is not checked)."""
    if "max_new_tokens" not in params.model_fields_set:
        return
    total = num_prompt_tokens + params.max_new_tokens
    if total <= state.max_model_len:
        return
    raise APIError(400, f"Requested token count exceeds the model's maximum context length of "
                        f"{state.max_model_len} tokens. You requested a total of {total} "
                        f"tokens: {num_prompt_tokens} tokens from the input messages and "
                        f"{params.max_new_tokens} tokens for the completion. Please reduce the "
                        "number of tokens in the input messages or the completion to fit "
                        "within the limit.", param="sampling_params.max_new_tokens")


class NativeRun(Run):
    """One ``/generate`` in flight: backend deltas → SGLang's answers."""

    def __init__(self, state: ServerState, native: NativeState, rid: str,
                 prompt_ids: list[int], params: SamplingParams, started: float, *,
                 session: NativeSession | None = None, parent: str | None = None,
                 no_stop_trim: bool = False, namespace: str = "") -> None:
        super().__init__(state, started)
        self.native = native
        self.rid = rid
        self.params = params
        self.session = session
        self.parent = parent
        self.no_stop_trim = no_stop_trim
        self.call = Call(state.backend, prompt_ids, params,
                         session=None if session is None else session.session,
                         options=RequestOptions(request_id=rid, namespace=namespace))
        self.text = ""
        self.output_ids: list[int] = []
        self.finish_reason: str | None = None

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.call.prompt_ids)

    def source(self) -> AsyncIterator[StreamDelta]:
        self.native.running[self.rid] = self.call.abort
        return self.call.astream()

    def on_end(self) -> None:
        self.native.running.pop(self.rid, None)
        if self.session is not None:
            self.session.is_active = False

    def answer(self) -> dict[str, Any]:
        return self.output()

    def events_of(self, delta: StreamDelta) -> Iterable[Event]:
        """The answer so far after every delta (SGLang streams cumulative outputs)."""
        yield self.output()

    def output(self) -> dict[str, Any]:
        return {"text": self.text, "output_ids": list(self.output_ids),
                "meta_info": self.meta_info()}

    def meta_info(self) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "id": self.rid, "finish_reason": self._finish_json(),
            "prompt_tokens": len(self.call.prompt_ids),
            "completion_tokens": len(self.output_ids),
            "cached_tokens": self.call.num_cached_tokens,
            "weight_version": "default", "total_retractions": 0,
        }
        if self.finish_reason is not None:
            meta["e2e_latency"] = time.monotonic() - self.started
        return meta

    def add(self, delta: StreamDelta) -> None:
        self.text += delta.text
        self.output_ids.extend(delta.token_ids)
        if not delta.finished:
            return
        self.finish_reason = delta.finish_reason or "stop"
        matched = self.call.matched_stop
        if self.no_stop_trim and self.finish_reason == "stop" and isinstance(matched, str):
            self.text += matched
        if self.session is not None and self.finish_reason in ("stop", "length"):
            self.session.record(self.rid, self.call.prompt_ids, self.output_ids, self.parent)

    def _finish_json(self) -> dict[str, Any] | None:
        reason = self.finish_reason
        if reason == "stop":
            return {"type": "stop", "matched": self.call.matched_stop}
        if reason == "length":
            return {"type": "length", "length": self.params.max_tokens}
        if reason == "abort":
            return {"type": "abort", "message": "Aborted", "status_code": None,
                    "err_type": None}
        return None
