"""EngineCall: one generation on agentrt's engine, with the counters a remote API reports.

The engine streams :class:`~agentrt.engine.outputs.StreamDelta`\\ s; a backend or the
SGLang-compatible server also needs, per call, how many prompt tokens were reused rather
than computed and which stop ended it. A call runs as a request of its own, or as the next
call of an :class:`agentrt.session.Session` (its paused request resumed with the new
tokens). A small hook sees the engine request at every sampled token, so its counters stay
readable after the request has finished and left the engine.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentrt.core.request import Request
    from agentrt.core.sampling_params import SamplingParams
    from agentrt.engine.engine import Engine
    from agentrt.engine.outputs import StreamDelta
    from agentrt.session import Session

__all__ = ["EngineCall"]

Hook = Callable[["Request", list[int]], Any]


class EngineCall:
    """``prompt_ids`` generated on ``engine``, or on ``session``'s request when given.

    For a session, ``prompt_ids`` is the whole context of this call; the session keeps what
    its request already holds and prefills only the rest. ``hook`` is the engine hook of the
    request (see :meth:`agentrt.Engine.submit`); it still decides pause / abort.
    """

    def __init__(self, engine: Engine, prompt_ids: list[int], params: SamplingParams | None,
                 *, request_id: str | None = None, session: Session | None = None,
                 hook: Hook | None = None) -> None:
        self.engine = engine
        self.prompt_ids = list(prompt_ids)
        self.params = params
        self.request_id = request_id or f"call-{uuid.uuid4().hex[:16]}"
        self.session = session
        self._hook = hook
        self._request: Request | None = None
        self._prefill_before = 0

    # --- running ---------------------------------------------------------------------------
    def stream(self) -> Iterator[StreamDelta]:
        """The engine's deltas (closing early aborts the request)."""
        yield from self._start(is_async=False)

    async def astream(self) -> AsyncIterator[StreamDelta]:
        """Async twin of :meth:`stream`."""
        deltas = self._start(is_async=True)
        try:
            async for delta in deltas:
                yield delta
        finally:
            await deltas.aclose()

    def abort(self) -> None:
        """Abort the engine request serving this call (a session's: the session restarts)."""
        if self.session is not None and not self.session.busy:
            return  # not started yet (or over): the session's paused request is not ours
        rid = self.engine_request_id
        if rid:
            self.engine.abort(rid)

    @property
    def engine_request_id(self) -> str | None:
        if self.session is not None:
            return self.session.request_id
        return self.request_id

    # --- counters --------------------------------------------------------------------------
    @property
    def num_cached_tokens(self) -> int:
        """Prompt tokens whose KV this call reused (0 until the prompt is prefilled)."""
        req, n = self._request, len(self.prompt_ids)
        if req is None:
            return 0
        computed = req.stats.num_prefill_tokens - self._prefill_before
        return max(0, min(n, n - computed))

    @property
    def stop_reason(self) -> int | str | None:
        """The stop token id or stop string that ended the call, if one did."""
        return None if self._request is None else self._request.stop_reason

    # --- internals -------------------------------------------------------------------------
    def _start(self, is_async: bool) -> Any:
        if self.session is None:
            start = self.engine.astream if is_async else self.engine.stream
            return start(self.prompt_ids, self.params, request_id=self.request_id,
                         hook=self._probe)
        self._prefill_before = self._held_prefill()
        start = self.session.astream if is_async else self.session.stream
        return start(self.prompt_ids, self.params, hook=self._probe)

    def _held_prefill(self) -> int:
        """Prefill tokens the session's request counted before this call (0: a new one)."""
        session = self.session
        assert session is not None
        keep, _ = session.plan(self.prompt_ids)
        req = self.engine.core.requests.get(session.request_id or "") if keep else None
        return 0 if req is None else req.stats.num_prefill_tokens

    def _probe(self, req: Request, token_ids: list[int]) -> Any:
        self._request = req
        return None if self._hook is None else self._hook(req, token_ids)
