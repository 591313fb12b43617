"""Call: one model call on a :class:`~agentrt.backends.base.Backend` — alone, or the next
call of an :class:`agentrt.session.Session`. Every front end reaches tokens through it.

- :meth:`Call.stream` / :meth:`Call.astream` yield the backend's
  :class:`~agentrt.core.outputs.StreamDelta`\\ s; :meth:`Call.generate` /
  :meth:`Call.agenerate` fold them into one :class:`~agentrt.core.outputs.RequestOutput`.
- As a session's call it sends only what the session does not hold: the session plans it
  (:meth:`agentrt.session.Session.plan`: keep the common prefix of the new prompt and the
  held context, roll back a seam that re-tokenized differently) and, once the backend has
  committed the call, holds its prompt and output.
- :meth:`Call.abort` stops it (closing a stream early does too).
- Its counters come from the deltas, whatever the backend: ``num_prompt_tokens`` (the
  context it generated from), ``num_cached_tokens`` (of those, not computed by this call),
  ``num_prefilled_tokens``, ``matched_stop``.

A hook (``RequestOptions.hook``) runs where the tokens are made when the backend can pause
in place (the engine calls it at each token). Elsewhere the call runs it here, on the
streamed tokens: ``"pause"`` ends the call at that token (finish ``"stop"``, as a pause in
place does) and ``"abort"`` aborts it; the backend's request is stopped either way and the
call's :attr:`Call.hook_path` says ``"client"``. A session then starts afresh at its next
call, which the backend's prefix cache serves — never a silently different context.
"""

from __future__ import annotations

import contextvars
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from agentrt.core.options import RequestOptions
from agentrt.core.outputs import RequestOutput, StreamDelta
from agentrt.core.request import Pause
from agentrt.core.sampling_params import SamplingParams

if TYPE_CHECKING:
    from agentrt.backends.base import Backend
    from agentrt.session import Session

__all__ = ["Call", "HookPath", "as_backend", "request_tags"]

HookPath = Literal["in_place", "client"]

request_tags: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar(
    "agentrt_request_tags", default={})  # noqa: B039 - never mutated, only replaced
"""Request options every call made in this context carries, unless the call sets them (the
graph runtime sets ``group`` and ``depth`` for topology-aware batching)."""


def as_backend(target: Any) -> Backend:
    """``target`` if it is a backend; an :class:`agentrt.Engine` → its local backend (one
    per engine, shared by every caller)."""
    from agentrt.backends.base import Backend

    if isinstance(target, Backend):
        return target
    from agentrt.backends.local import local_backend

    return local_backend(target)


class Call:
    """``prompt_ids`` generated on ``backend`` — as the next call of ``session`` when given
    (then ``prompt_ids`` is the call's whole context; the session sends what is new)."""

    def __init__(self, backend: Any, prompt_ids: Sequence[int],
                 params: SamplingParams | None = None, *, session: Session | None = None,
                 options: RequestOptions | None = None) -> None:
        self.backend = as_backend(backend)
        if session is not None:
            if session.backend != self.backend:
                raise ValueError("the session runs on another backend")
            self.backend = session.backend  # NOTE: the object that holds the session's state
        self.prompt_ids = [int(t) for t in prompt_ids]
        self.params = params or SamplingParams()
        self.session = session
        self.options = _with_defaults(options or RequestOptions())
        self.hook_path: HookPath | None = None
        """Where the hook ran, once the call has started: where the tokens are made
        (``in_place``) or here on the streamed tokens (``client``); None without a hook."""
        self.is_committed = False
        """The backend ended the call itself (stop or length): a session now holds it."""
        self._deltas: list[StreamDelta] = []
        self._client_hook: Any = None

    @property
    def request_id(self) -> str:
        """The id :meth:`abort` stops (the backend's request id of this call)."""
        return self.options.request_id or ""

    # --- running ---------------------------------------------------------------------------
    def stream(self) -> Iterator[StreamDelta]:
        """The call's deltas (closing early aborts it)."""
        sent, session_id, keep = self._begin(self._open_session())
        deltas = self.backend.stream(sent, self.params, session_id=session_id, keep=keep,
                                     options=self._backend_options())
        try:
            for delta in deltas:
                delta = self._take(delta)
                yield delta
                if delta.finished:
                    break
        finally:
            deltas.close()
            self._end()

    async def astream(self) -> AsyncIterator[StreamDelta]:
        """Async twin of :meth:`stream`."""
        sent, session_id, keep = self._begin(await self._aopen_session())
        deltas = self.backend.astream(sent, self.params, session_id=session_id, keep=keep,
                                      options=self._backend_options())
        try:
            async for delta in deltas:
                delta = self._take(delta)
                yield delta
                if delta.finished:
                    break
        finally:
            await deltas.aclose()
            self._end()

    def generate(self) -> RequestOutput:
        """Run to the end; the whole output."""
        for _ in self.stream():
            pass
        return self.output

    async def agenerate(self) -> RequestOutput:
        """Async twin of :meth:`generate`."""
        async for _ in self.astream():
            pass
        return self.output

    def abort(self) -> None:
        """Stop the call if it is in flight (its stream ends with ``"abort"``)."""
        if self._started and not self.finished:
            self.backend.abort(self.request_id)

    async def aabort(self) -> None:
        """Async twin of :meth:`abort`."""
        if self._started and not self.finished:
            await self.backend.aabort(self.request_id)

    # --- counters (from the deltas) ----------------------------------------------------------
    @property
    def output(self) -> RequestOutput:
        """The deltas so far, folded (the whole output once the call has finished)."""
        return RequestOutput.from_deltas(self._deltas)

    @property
    def finished(self) -> bool:
        return bool(self._deltas) and self._deltas[-1].finished

    @property
    def token_ids(self) -> list[int]:
        return [t for d in self._deltas for t in d.token_ids]

    @property
    def finish_reason(self) -> str | None:
        return self._deltas[-1].finish_reason if self.finished else None

    @property
    def num_prompt_tokens(self) -> int:
        """The context this call generated from (a session's call: the whole context)."""
        return self._deltas[-1].num_prompt_tokens if self._deltas else 0

    @property
    def num_cached_tokens(self) -> int:
        """Of those, tokens this call did not compute (held by a session, prefix cache)."""
        return self._deltas[-1].num_cached_tokens if self._deltas else 0

    @property
    def num_prefilled_tokens(self) -> int:
        """Prompt tokens this call computed."""
        return max(0, self.num_prompt_tokens - self.num_cached_tokens)

    @property
    def matched_stop(self) -> int | str | None:
        """The stop token id or stop string that ended the call, if one did."""
        return self._deltas[-1].matched_stop if self.finished else None

    # --- internals -------------------------------------------------------------------------
    _started = False

    def _open_session(self) -> str | None:
        return None if self.session is None else self.session.open()

    async def _aopen_session(self) -> str | None:
        return None if self.session is None else await self.session.aopen()

    def _begin(self, session_id: str | None) -> tuple[list[int], str | None, int | None]:
        """What to send: the whole prompt, or a session's keep + appended tokens."""
        if self._started:
            raise RuntimeError("a Call runs once; make a new one")
        self._started = True
        hook = self.options.hook
        if hook is not None:
            in_place = self.backend.capabilities.can_pause_in_place
            self.hook_path = "in_place" if in_place else "client"
            self._client_hook = None if in_place else hook
        if self.session is None:
            return self.prompt_ids, None, None
        keep, appended = self.session.begin(self)
        return appended, session_id, keep

    def _backend_options(self) -> RequestOptions:
        if self._client_hook is not None:
            return replace(self.options, hook=None)
        return self.options

    def _take(self, delta: StreamDelta) -> StreamDelta:
        """Record ``delta`` (a client-side hook may end the call at one of its tokens)."""
        if delta.request_id != self.request_id:
            delta = replace(delta, request_id=self.request_id)
        if self._client_hook is not None and delta.token_ids and not self._stopped_here:
            delta = self._run_client_hook(delta)
        if delta.finished and not self._stopped_here:
            self.is_committed = delta.finish_reason in ("stop", "length")
        self._deltas.append(delta)
        return delta

    _stopped_here = False

    def _run_client_hook(self, delta: StreamDelta) -> StreamDelta:
        for i, token in enumerate(delta.token_ids):
            try:
                action = self._client_hook(None, [token])
            except Exception:  # noqa: BLE001 - as in the engine: a broken hook aborts its call
                action = "abort"
            if action in (None, "continue"):
                continue
            if isinstance(action, Pause) or action in ("pause", "abort"):
                reason = "abort" if action == "abort" else "stop"
                self._stopped_here = True
                kept = list(delta.token_ids[: i + 1])
                text = delta.text if i + 1 == len(delta.token_ids) else \
                    self.backend.tokenizer.decode(
                        kept, skip_special_tokens=self.params.skip_special_tokens)
                return replace(delta, token_ids=kept, text=text, finished=True,
                               finish_reason=reason, matched_stop=None)
        return delta

    def _end(self) -> None:
        if self.session is not None:
            self.session.end(self)


def _with_defaults(options: RequestOptions) -> RequestOptions:
    """``options`` with the context's :data:`request_tags` and a request id filled in."""
    changes = {k: v for k, v in request_tags.get().items()
               if getattr(options, k) == getattr(_DEFAULTS, k)}
    if options.request_id is None:
        changes["request_id"] = f"call-{uuid.uuid4().hex[:16]}"
    return options.updated(changes)


_DEFAULTS = RequestOptions()
