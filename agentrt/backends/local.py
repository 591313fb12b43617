"""The ``local`` backend: agentrt's own engine, in this process (the default).

It is the one backend that can pause a request in place: a session is one engine request
paused between calls with its KV held — preserved, swapped to host memory or recomputed,
whichever the interception policy finds least wasteful — and resumed with only the appended
tokens; a call that keeps less than the whole context rolls the request back first
(``truncate_to``). A request's ``hook`` (``RequestOptions.hook``) sees each sampled token and
may pause or abort it (see :meth:`agentrt.Engine.submit`).

Two ``LocalBackend`` objects on one engine are equal: an :class:`agentrt.Engine` passed where
a backend is expected is wrapped in a new one (:func:`local_backend`), and a session made
through one serves calls made through another.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from agentrt.backends.base import Backend, BackendCapabilities
from agentrt.core.options import RequestOptions

if TYPE_CHECKING:
    from agentrt.core.model_info import ModelInfo
    from agentrt.core.outputs import StreamDelta
    from agentrt.core.sampling_params import SamplingParams
    from agentrt.engine.engine import Engine

__all__ = ["LocalBackend", "local_backend"]

_CAPABILITIES = BackendCapabilities(can_pause_in_place=True, keeps_kv_across_calls=True,
                                    kv_held_between_calls=True, prefix_cache=True,
                                    in_process=True)


@dataclass
class _LocalSession:
    request_id: str | None = None
    """The engine request holding the context (paused between calls)."""
    context: list[int] = field(default_factory=list)
    """What that request holds: the committed calls' prompts and outputs."""
    busy: bool = False


class LocalBackend(Backend):
    """Calls on an :class:`agentrt.Engine` (one is created from ``model`` and
    ``engine_options`` when ``engine`` is not given, and closed with the backend)."""

    name = "local"

    def __init__(self, engine: Engine | None = None, *, model: str | None = None,
                 **engine_options: Any) -> None:
        self._owns_engine = engine is None
        if engine is None:
            from agentrt.engine.engine import Engine

            engine = Engine(model, **engine_options)
        self.engine = engine
        self._sessions: dict[str, _LocalSession] = {}
        self._calls: dict[str, str] = {}
        """Call request id → the engine request serving it (a session's, for its calls)."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LocalBackend) and other.engine is self.engine

    def __hash__(self) -> int:
        return hash(id(self.engine))

    @property
    def capabilities(self) -> BackendCapabilities:
        if self.engine.config.enable_prefix_cache:
            return _CAPABILITIES
        return replace(_CAPABILITIES, prefix_cache=False)

    @property
    def tokenizer(self) -> Any:
        return self.engine.tokenizer

    @property
    def model_info(self) -> ModelInfo:
        return self.engine.model_info

    @property
    def model_name(self) -> str:
        from agentrt import DEFAULT_MODEL

        return self.engine.config.model or DEFAULT_MODEL

    # --- generation -----------------------------------------------------------------------
    def stream(self, prompt_ids: Sequence[int], params: SamplingParams | None = None, *,
               session_id: str | None = None, keep: int | None = None,
               options: RequestOptions | None = None) -> Iterator[StreamDelta]:
        rid, s, source, prompt = self._start(prompt_ids, params, session_id, keep, options,
                                             is_async=False)
        outputs: list[int] = []
        reason = None
        try:
            for delta in source:
                outputs.extend(delta.token_ids)
                reason = delta.finish_reason if delta.finished else None
                yield delta
        finally:
            source.close()
            self._end(rid, s, prompt, outputs, reason)

    async def astream(self, prompt_ids: Sequence[int], params: SamplingParams | None = None,
                      *, session_id: str | None = None, keep: int | None = None,
                      options: RequestOptions | None = None) -> AsyncIterator[StreamDelta]:
        rid, s, source, prompt = self._start(prompt_ids, params, session_id, keep, options,
                                             is_async=True)
        outputs: list[int] = []
        reason = None
        try:
            async for delta in source:
                outputs.extend(delta.token_ids)
                reason = delta.finish_reason if delta.finished else None
                yield delta
        finally:
            await source.aclose()
            self._end(rid, s, prompt, outputs, reason)

    # --- sessions ------------------------------------------------------------------------
    def open_session(self) -> str:
        session_id = uuid.uuid4().hex
        self._sessions[session_id] = _LocalSession()
        return session_id

    async def aopen_session(self) -> str:
        return self.open_session()

    def close_session(self, session_id: str) -> None:
        s = self._sessions.pop(session_id, None)
        if s is not None:
            self._drop(s)

    async def aclose_session(self, session_id: str) -> None:
        self.close_session(session_id)

    def set_interception(self, session_id: str, kind: str,
                         expected_duration: float | None = None) -> None:
        s = self._sessions.get(session_id)
        if s is None or s.request_id is None or s.busy:
            return
        try:
            self.engine.set_interception(s.request_id, kind, expected_duration)
        except (KeyError, ValueError):
            pass  # the request is not paused (finished or aborted): nothing to tell

    # --- control -------------------------------------------------------------------------
    def abort(self, request_id: str) -> None:
        engine_rid = self._calls.get(request_id)
        if engine_rid is not None:
            self.engine.abort(engine_rid)

    async def aabort(self, request_id: str) -> None:
        self.abort(request_id)

    def close(self) -> None:
        for session_id in list(self._sessions):
            self.close_session(session_id)
        if self._owns_engine:
            self.engine.close()

    # --- internals -----------------------------------------------------------------------
    def _start(self, prompt_ids: Sequence[int], params: SamplingParams | None,
               session_id: str | None, keep: int | None, options: RequestOptions | None,
               is_async: bool) -> tuple[str, _LocalSession | None, Any, list[int]]:
        opts = options or RequestOptions()
        rid = opts.request_id or f"local-{uuid.uuid4().hex[:16]}"
        if rid in self._calls:
            raise ValueError(f"request id {rid!r} is already in use")
        e, sent = self.engine, list(prompt_ids)
        if session_id is None:
            start = e.astream if is_async else e.stream
            source = start(sent, params, opts.updated({"request_id": rid}))
            self._calls[rid] = rid
            return rid, None, source, sent
        s = self._session(session_id)
        keep = len(s.context) if keep is None else keep
        if not 0 <= keep <= len(s.context):
            raise ValueError(f"keep must be in [0, {len(s.context)}] (the session's context), "
                             f"got {keep}")
        prompt = s.context[:keep] + sent
        if s.request_id is not None and keep > 0:
            resume = e.aresume_stream if is_async else e.resume_stream
            truncate = keep if keep < len(s.context) else None
            source = resume(s.request_id, sent, params,
                            opts.updated({"request_id": None, "keep_kv": True}),
                            truncate_to=truncate)
        else:
            self._drop(s)
            s.request_id = f"session-{uuid.uuid4().hex[:16]}"
            start = e.astream if is_async else e.stream
            source = start(prompt, params,
                           opts.updated({"request_id": s.request_id, "keep_kv": True}))
        s.busy = True
        self._calls[rid] = s.request_id
        return rid, s, source, prompt

    def _end(self, rid: str, s: _LocalSession | None, prompt: list[int], outputs: list[int],
             reason: str | None) -> None:
        self._calls.pop(rid, None)
        if s is None:
            return
        s.busy = False
        if reason in ("stop", "length"):
            s.context = prompt + outputs  # NOTE: the request is paused, its KV kept
        else:
            s.request_id, s.context = None, []  # aborted or cut short: the engine freed it

    def _session(self, session_id: str) -> _LocalSession:
        s = self._sessions.get(session_id)
        if s is None:
            raise ValueError(f"unknown session {session_id!r} (open it with open_session)")
        if s.busy:
            raise ValueError(f"session {session_id!r} is serving another call")
        return s

    def _drop(self, s: _LocalSession) -> None:
        """Free the session's engine request (aborted if a call is running on it)."""
        rid, s.request_id, s.context = s.request_id, None, []
        if rid is None:
            return
        try:
            self.engine.abort(rid) if s.busy else self.engine.release(rid)
        except KeyError:
            pass  # already gone


def local_backend(engine: Engine) -> LocalBackend:
    """``engine`` as a backend (the engine stays the caller's: closing this does not close
    it)."""
    return LocalBackend(engine)
