"""SGLang sessions on agentrt: one :class:`agentrt.session.Session` per session id.

In SGLang 0.5.8 (``managers/session_controller.py``) a session is a tree of requests: a
request names the one it continues (``session_params.rid``) and its context is that
request's prompt and output, cut at ``offset`` if given, plus its own ``input_ids`` (a
leading BOS dropped); the server finds the earlier KV in its radix tree, if not evicted.

Here a session is one :class:`agentrt.session.Session` on the server's backend — on the local
engine, one engine request paused between calls with its KV held — and each call sends what
the new context adds: the previous call's output is already in it.
Continuing an older request instead (a branch) rolls the request back to the shared prefix
and computes the rest: the contexts are recorded per request, as token ids.

:class:`NativeState` also knows the native requests in flight, for ``/abort_request``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request

from agentrt.server.errors import APIError
from agentrt.session import Session

if TYPE_CHECKING:
    from agentrt.backends.base import Backend
    from agentrt.server.native_protocol import SessionParams

__all__ = ["Native", "NativeSession", "NativeState", "get_native"]


@dataclass
class _Turn:
    """A finished request of a session: its whole prompt and what it generated."""

    prompt_ids: list[int]
    output_ids: list[int]
    parent: str | None


class NativeSession:
    """One open session: its backend session (via :class:`Session`) and its requests' turns."""

    def __init__(self, backend: Backend, session_id: str, capacity_of_str_len: int) -> None:
        self.session_id = session_id
        self.capacity_of_str_len = capacity_of_str_len
        self.session = Session(backend)  # NOTE: shares the prefix cache with every request
        self.turns: dict[str, _Turn] = {}
        self.bos_token_id = backend.tokenizer.bos_token_id
        self.is_active = False
        """A request of the session is in flight (set by :meth:`prompt_for`)."""

    def prompt_for(self, params: SessionParams, input_ids: list[int]) -> list[int]:
        """The whole context of a request with ``params`` and ``input_ids`` (400 if invalid);
        the session is active from then on, until the caller resets ``is_active``."""
        if self.is_active or self.session.busy:
            raise APIError(400, f"session {self.session_id} is serving another request; "
                                "continue a request once it has finished",
                           param="session_params")
        prompt = self._context(params, input_ids)
        self.is_active = True
        return prompt

    def _context(self, params: SessionParams, input_ids: list[int]) -> list[int]:
        if params.rid is None:
            if params.replace:
                self.turns.clear()
            return list(input_ids)
        turn = self.turns.get(params.rid)
        if turn is None:
            raise APIError(400, f"Invalid request session id: no finished request "
                                f"{params.rid!r} in session {self.session_id}",
                           param="session_params.rid")
        if params.replace:
            self._drop_children(params.rid)
        if input_ids and input_ids[0] == self.bos_token_id:
            input_ids = input_ids[1:]  # NOTE: SGLang trims a BOS from an appended request
        base = turn.prompt_ids if params.drop_previous_output else \
            turn.prompt_ids + turn.output_ids
        if params.offset:
            base = base[: params.offset]
        return base + list(input_ids)

    def record(self, rid: str, prompt_ids: list[int], output_ids: list[int],
               parent: str | None) -> None:
        """A request of this session finished (not aborted): later ones may continue it."""
        self.turns[rid] = _Turn(list(prompt_ids), list(output_ids), parent)

    def close(self) -> None:
        self.session.close()
        self.turns.clear()

    def _drop_children(self, rid: str) -> None:
        children = [r for r, t in self.turns.items() if t.parent == rid]
        for child in children:
            self._drop_children(child)
            self.turns.pop(child, None)


@dataclass
class NativeState:
    """The native API's state in one app: open sessions, requests in flight."""

    backend: Backend
    sessions: dict[str, NativeSession] = field(default_factory=dict)
    running: dict[str, Callable[[], None]] = field(default_factory=dict)
    """rid → how to abort it."""

    def open(self, capacity_of_str_len: int, session_id: str) -> str:
        if session_id in self.sessions:
            raise APIError(400, "Failed to open the session. Check if a session with the "
                                "same id is still open.", param="session_id")
        self.sessions[session_id] = NativeSession(self.backend, session_id,
                                                  capacity_of_str_len)
        return session_id

    def get(self, session_id: str) -> NativeSession:
        session = self.sessions.get(session_id)
        if session is None:
            raise APIError(400, f"Invalid request: session id {session_id} does not exist",
                           param="session_params.id")
        return session

    def close(self, session_id: str) -> None:
        """Close a session (unknown ids are ignored, as SGLang does)."""
        session = self.sessions.pop(session_id, None)
        if session is not None:
            session.close()

    def abort(self, rid: str = "", abort_all: bool = False) -> None:
        """Abort one native request by ``rid`` (unknown: ignored), or all of them."""
        for key in list(self.running) if abort_all else [rid]:
            abort = self.running.get(key)
            if abort is not None:
                abort()


def get_native(request: Request) -> NativeState:
    """FastAPI dependency: the native API's state of the app serving ``request``."""
    return request.app.state.native


Native = Annotated[NativeState, Depends(get_native)]
"""An endpoint parameter of this type receives the app's :class:`NativeState`."""
