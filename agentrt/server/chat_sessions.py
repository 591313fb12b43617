"""Agent sessions on ``POST /v1/chat/completions``: the ``session_id`` field.

An OpenAI client names the agent a request continues with a ``session_id`` of its choosing
(the ``openai`` package: ``extra_body={"session_id": "agent-7"}``; ``ChatOpenAI``:
``extra_body=`` or ``model_kwargs=``). The server then keeps that agent's context between its
requests — on the local engine, one request paused with its KV held — and each request
prefills only what its messages add (the tool's observation, the template's glue); the
answer's ``usage.prompt_tokens_details.cached_tokens`` counts the rest.

Prior art: SGLang opens sessions explicitly (``/open_session``, then
``session_params={"id", "rid"}`` per request, ``/close_session``); llama-server keeps one
prompt per slot (``id_slot``, ``cache_prompt``), reused when the next prompt shares its
prefix. Here the client's own id opens the session on first use, as a LangGraph
``thread_id`` does; the new prompt is compared with what the session holds (a context that
re-renders differently is rolled back to the common prefix, never served stale). A session
ends:

* on ``DELETE /v1/sessions/{session_id}`` (the agent has finished);
* when its request is cut short (the client disconnected, or it was aborted);
* after ``ttl_s`` seconds unused (``agentrt serve --session-ttl``);
* when ``max_sessions`` are open and another is needed: the least recently used idle one
  (``--max-sessions``).

One session serves one request at a time: a second concurrent request of it is a 409; a new
session while all ``max_sessions`` serve requests is a 429.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from agentrt.server.errors import APIError
from agentrt.server.protocol import ChatCompletionRequest
from agentrt.server.state import State

if TYPE_CHECKING:
    from agentrt.chat import ChatCall
    from agentrt.server.state import ServerState

__all__ = ["SessionChatRequest", "attach_session", "end_session", "router"]

router = APIRouter()


class SessionField(BaseModel):
    """The ``session_id`` a chat request may carry."""

    session_id: str | None = Field(None, min_length=1, max_length=256)
    """The agent this request continues (any string the client picks; opened on first use)."""


class SessionChatRequest(ChatCompletionRequest, SessionField):
    """``POST /v1/chat/completions`` with agentrt's ``session_id``."""


def attach_session(state: ServerState, body: SessionChatRequest, call: ChatCall) -> None:
    """Make ``call`` the next call of ``body.session_id``'s session (a 400 with ``n`` > 1,
    a 409 while the session serves another request)."""
    if body.session_id is None:
        return
    if body.n != 1:
        raise APIError.bad_request(ValueError("a session continues one answer: n must be 1 "
                                              "with session_id"), param="n")
    try:
        session = state.sessions.get(body.session_id, state.backend)
    except RuntimeError as exc:  # NOTE: every session is serving a request: none to evict
        raise APIError(429, str(exc), param="session_id", code="too_many_sessions") from exc
    if session.busy:
        raise APIError(409, f"session {body.session_id!r} is serving another request; send "
                            "its next request once that one has finished",
                       param="session_id", code="session_busy")
    session.busy = True  # NOTE: reserved now; the call's own begin/end keep it so
    call.session = session


def end_session(state: ServerState, session_id: str | None, call: ChatCall) -> None:
    """The request of ``session_id`` is over: a request cut short (disconnect, abort) closes
    its session; otherwise the session is kept for its agent's next request."""
    if session_id is None or call.session is None:
        return
    backend_call = call.call
    call.session.busy = False
    if backend_call is None or not backend_call.is_committed:
        state.sessions.close(session_id)


class SessionInfo(BaseModel):
    """What ``DELETE /v1/sessions/{id}`` answers."""

    id: str
    object: str = "session"
    deleted: bool
    usage: dict[str, Any] | None = None
    """The session's token counts: prompt tokens sent, reused from the session, prefilled."""


@router.delete("/v1/sessions/{session_id}")
async def close_session(session_id: str, state: State) -> SessionInfo:
    """The agent has finished: free its session's KV (an unknown id: ``deleted: false``)."""
    stats = state.sessions.close(session_id)
    if stats is None:
        return SessionInfo(id=session_id, deleted=False)
    return SessionInfo(id=session_id, deleted=True, usage={
        "num_calls": stats.num_calls, "prompt_tokens": stats.num_prompt_tokens,
        "reused_tokens": stats.num_reused_tokens, "prefill_tokens": stats.num_prefill_tokens})


@router.get("/v1/sessions")
async def list_sessions(state: State) -> dict[str, Any]:
    """The open sessions' ids (least recently used first) and the table's limits (the
    expired ones closed first)."""
    table = state.sessions
    table.sweep()
    return {"object": "list", "data": table.keys(), "max_sessions": table.max_sessions,
            "ttl_s": table.ttl_s, "num_expired": table.num_expired,
            "num_evicted": table.num_evicted}
