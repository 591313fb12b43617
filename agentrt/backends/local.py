"""The ``local`` backend: agentrt's own engine, in this process (the default).

It is the one backend that can pause a request in place: a session is one engine request
(:class:`agentrt.session.Session`) paused between calls with its KV held — preserved,
swapped to host memory or recomputed, whichever the interception policy finds least
wasteful — and resumed with only the appended tokens. A ``hook`` passed to a call sees
each sampled token and may pause or abort it (see :meth:`agentrt.Engine.submit`).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentrt.backends.base import Backend, BackendCapabilities, GenerationChunk
from agentrt.backends.engine_call import EngineCall, Hook
from agentrt.session import Session

if TYPE_CHECKING:
    from agentrt.core.sampling_params import SamplingParams
    from agentrt.engine.engine import Engine
    from agentrt.engine.outputs import StreamDelta

__all__ = ["LocalBackend"]

_CAPABILITIES = BackendCapabilities(can_pause_in_place=True, keeps_kv_across_calls=True,
                                    kv_held_between_calls=True, prefix_cache=True,
                                    in_process=True)


@dataclass
class _LocalSession:
    session: Session
    context: list[int] = field(default_factory=list)
    """The prompts and outputs of the calls that ended normally (what a call appends to)."""


class LocalBackend(Backend):
    """Calls on an :class:`agentrt.Engine` (one is created from ``model`` and
    ``engine_options`` when ``engine`` is not given, and closed with the backend)."""

    name = "local"

    def __init__(self, engine: Engine | None = None, *, model: str | None = None,
                 **engine_options: Any) -> None:
        if engine is None:
            from agentrt.engine.engine import Engine

            engine = Engine(model, **engine_options)
            self._owns_engine = True
        else:
            self._owns_engine = False
        self.engine = engine
        self._sessions: dict[str, _LocalSession] = {}
        self._calls: dict[str, EngineCall] = {}

    @property
    def capabilities(self) -> BackendCapabilities:
        return _CAPABILITIES

    # --- generation -----------------------------------------------------------------------
    def stream(self, prompt_ids: Sequence[int], params: SamplingParams | None = None, *,
               session_id: str | None = None, request_id: str | None = None,
               hook: Hook | None = None) -> Iterator[GenerationChunk]:
        call = self._call(prompt_ids, params, session_id, request_id, hook)
        outputs: list[int] = []
        try:
            for delta in call.stream():
                outputs.extend(delta.token_ids)
                yield _chunk(call, delta)
                if delta.finished:
                    self._commit(session_id, call, outputs, delta.finish_reason)
        finally:
            self._calls.pop(call.request_id, None)

    async def astream(self, prompt_ids: Sequence[int], params: SamplingParams | None = None,
                      *, session_id: str | None = None, request_id: str | None = None,
                      hook: Hook | None = None) -> AsyncIterator[GenerationChunk]:
        call = self._call(prompt_ids, params, session_id, request_id, hook)
        outputs: list[int] = []
        deltas = call.astream()
        try:
            async for delta in deltas:
                outputs.extend(delta.token_ids)
                yield _chunk(call, delta)
                if delta.finished:
                    self._commit(session_id, call, outputs, delta.finish_reason)
        finally:
            await deltas.aclose()
            self._calls.pop(call.request_id, None)

    # --- sessions ------------------------------------------------------------------------
    def open_session(self) -> str:
        session_id = uuid.uuid4().hex
        self._sessions[session_id] = _LocalSession(Session(self.engine))
        return session_id

    async def aopen_session(self) -> str:
        return self.open_session()

    def close_session(self, session_id: str) -> None:
        s = self._sessions.pop(session_id, None)
        if s is not None:
            s.session.close()

    async def aclose_session(self, session_id: str) -> None:
        self.close_session(session_id)

    # --- control -------------------------------------------------------------------------
    def abort(self, request_id: str) -> None:
        call = self._calls.get(request_id)
        if call is not None:
            call.abort()

    async def aabort(self, request_id: str) -> None:
        self.abort(request_id)

    def close(self) -> None:
        for session_id in list(self._sessions):
            self.close_session(session_id)
        if self._owns_engine:
            self.engine.close()

    # --- internals -----------------------------------------------------------------------
    def _call(self, prompt_ids: Sequence[int], params: SamplingParams | None,
              session_id: str | None, request_id: str | None, hook: Hook | None
              ) -> EngineCall:
        request_id = request_id or f"local-{uuid.uuid4().hex[:16]}"
        if request_id in self._calls:
            raise ValueError(f"request id {request_id!r} is already in use")
        session = None
        prompt = list(prompt_ids)
        if session_id is not None:
            s = self._session(session_id)
            session, prompt = s.session, s.context + prompt
        call = EngineCall(self.engine, prompt, params, request_id=request_id,
                          session=session, hook=hook)
        self._calls[request_id] = call
        return call

    def _session(self, session_id: str) -> _LocalSession:
        s = self._sessions.get(session_id)
        if s is None:
            raise ValueError(f"unknown session {session_id!r} (open it with open_session)")
        if s.session.busy:
            raise ValueError(f"session {session_id!r} is serving another call")
        return s

    def _commit(self, session_id: str | None, call: EngineCall, outputs: list[int],
                reason: str | None) -> None:
        """A session call that ended normally extends the session's context."""
        s = self._sessions.get(session_id or "")
        if s is not None and reason in ("stop", "length"):
            s.context = call.prompt_ids + outputs


def _chunk(call: EngineCall, delta: StreamDelta) -> GenerationChunk:
    return GenerationChunk(
        request_id=call.request_id, text=delta.text, token_ids=list(delta.token_ids),
        finished=delta.finished, finish_reason=delta.finish_reason,
        num_prompt_tokens=len(call.prompt_ids), num_cached_tokens=call.num_cached_tokens,
        matched_stop=call.stop_reason if delta.finish_reason == "stop" else None)
