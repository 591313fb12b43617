"""AgentRTMiddleware: a ``create_agent`` run keeps its KV between its model calls.

LangChain 1.x agents (``langchain.agents.create_agent``) call the model once per step with
the whole history re-rendered. With this middleware each run of the agent is one
:class:`agentrt.Session` on the model's backend: the run's second model call prefills only
what the step added (the tool's observation and the chat template's glue), not the whole
prompt again. The session lives in an :class:`agentrt.SessionTable` under a key held in the
run's private state; it closes when the run ends (``after_agent``), or — a run that never
ends (an error, an interrupt never resumed) — after its time-to-live: ``ttl_s`` plus the
expected duration of the tool it waits for (``tool_durations``).

The middleware also carries the repeat guard: the model's next call is skipped and the run
ends with a clear message once the agent has made the identical tool call ``max_repeats``
times in a row (:mod:`langchain_agentrt.repeats`). For limits on the number of calls, add
LangChain's own ``ModelCallLimitMiddleware`` / ``ToolCallLimitMiddleware``.

With ``ChatOpenAI`` on an ``agentrt serve`` instead, the run's requests carry its key as
``session_id`` (in ``extra_body``) and the run's end closes the server's session.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any, NotRequired

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, hook_config
from langchain.agents.middleware.types import PrivateStateAttr
from langchain_core.messages import AIMessage
from langgraph.channels.untracked_value import UntrackedValue

from agentrt.session_table import SessionTable
from langchain_agentrt.chat_models import ChatAgentRT
from langchain_agentrt.repeats import DEFAULT_MAX_REPEATS, repeat_message, repeated_call

__all__ = ["AgentRTMiddleware"]

_KEY = "agentrt_session"


class AgentRTState(AgentState):
    """The agent's state plus the run's session key (private, not checkpointed)."""

    agentrt_session: NotRequired[Annotated[str, UntrackedValue, PrivateStateAttr]]


class AgentRTMiddleware(AgentMiddleware):
    """One session per agent run, and the repeat guard.

    >>> agent = create_agent(ChatAgentRT(), tools, middleware=[AgentRTMiddleware()])

    ``ttl_s``: seconds a paused run's KV is kept past the expected duration of its tool
    (``tool_durations``: tool name → seconds); ``max_sessions``: runs held at once (the least
    recently used idle one is closed for a new one); ``max_repeats``: identical tool calls in
    a row that end the run (None: no guard); ``sessions``: a table of your own (shared by
    several agents, or to read its counters)."""

    state_schema = AgentRTState

    def __init__(self, *, ttl_s: float = 60.0, max_sessions: int = 256,
                 max_repeats: int | None = DEFAULT_MAX_REPEATS,
                 tool_durations: Mapping[str, float] | None = None,
                 sessions: SessionTable | None = None) -> None:
        super().__init__()
        self.sessions = sessions if sessions is not None else SessionTable(
            ttl_s=ttl_s, max_sessions=max_sessions)
        self.max_repeats = max_repeats
        self.tool_durations = dict(tool_durations or {})
        self._remote: dict[str, tuple[str, str | None]] = {}
        """Run key → (base URL, API key) of the ``agentrt serve`` holding its session."""

    # --- the run's session --------------------------------------------------------------------
    def before_agent(self, state: AgentRTState, runtime: Any) -> dict[str, Any] | None:
        """A new run: a fresh session key (the session opens at the first model call)."""
        return {_KEY: f"run-{uuid.uuid4().hex}"}

    async def abefore_agent(self, state: AgentRTState, runtime: Any) -> dict[str, Any] | None:
        return self.before_agent(state, runtime)

    def after_agent(self, state: AgentRTState, runtime: Any) -> dict[str, Any] | None:
        """The run has ended: its session closes, its KV is freed (on an ``agentrt serve``
        it was opened on, by ``DELETE /v1/sessions/{id}``)."""
        key = state.get(_KEY)
        if key is not None:
            self.sessions.close(key)
            remote = self._remote.pop(key, None)
            if remote is not None:
                _close_remote(*remote, key)
        return None

    async def aafter_agent(self, state: AgentRTState, runtime: Any) -> dict[str, Any] | None:
        return self.after_agent(state, runtime)

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], Any]
                        ) -> Any:
        """The model call, as the next call of the run's session."""
        key, request = self._with_session(request)
        response = handler(request)
        self._paused(key, response)
        return response

    async def awrap_model_call(self, request: ModelRequest,
                               handler: Callable[[ModelRequest], Awaitable[Any]]) -> Any:
        key, request = self._with_session(request)
        response = await handler(request)
        self._paused(key, response)
        return response

    # --- the repeat guard -----------------------------------------------------------------------
    @hook_config(can_jump_to=["end"])
    def before_model(self, state: AgentRTState, runtime: Any) -> dict[str, Any] | None:
        """End the run, with the guard's message, instead of a call that would repeat."""
        steps = [[(c["name"], c["args"]) for c in m.tool_calls]
                 for m in state["messages"] if isinstance(m, AIMessage) and m.tool_calls]
        call = repeated_call(steps, self.max_repeats)
        if call is None or self.max_repeats is None:
            return None
        return {"jump_to": "end",
                "messages": [AIMessage(content=repeat_message(call, self.max_repeats))]}

    @hook_config(can_jump_to=["end"])
    async def abefore_model(self, state: AgentRTState, runtime: Any) -> dict[str, Any] | None:
        return self.before_model(state, runtime)

    # --- internals ------------------------------------------------------------------------------
    def _with_session(self, request: ModelRequest) -> tuple[str | None, ModelRequest]:
        key = request.state.get(_KEY)
        if key is not None and not isinstance(request.model, ChatAgentRT):
            return None, self._with_session_id(key, request)
        if key is None or "session" in request.model_settings:
            return None, request
        session = self.sessions.get(key, request.model.get_backend())
        return key, request.override(model_settings={**request.model_settings,
                                                     "session": session})

    def _with_session_id(self, key: str, request: ModelRequest) -> ModelRequest:
        """An OpenAI client's request (``ChatOpenAI`` → ``agentrt serve``) names the run's
        session with ``session_id`` (:mod:`agentrt.server.chat_sessions`)."""
        base_url = getattr(request.model, "openai_api_base", None)
        if base_url is None or not hasattr(request.model, "extra_body"):
            return request
        secret = getattr(request.model, "openai_api_key", None)
        self._remote[key] = (base_url, secret.get_secret_value() if secret else None)
        extra = {**(request.model.extra_body or {}),
                 **request.model_settings.get("extra_body", {}), "session_id": key}
        return request.override(model_settings={**request.model_settings, "extra_body": extra})

    def _paused(self, key: str | None, response: Any) -> None:
        """The call is over; the run now waits for its tools: say for how long."""
        if key is None:
            return
        messages = getattr(response, "result", None) or [response]
        calls = [c["name"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls]
        if calls:
            duration = max(self.tool_durations.get(name, 0.0) for name in calls)
            self.sessions.pause(key, calls[0], duration or None)


def _close_remote(base_url: str, api_key: str | None, key: str) -> None:
    """Close the run's session on the server (best effort: its TTL closes it otherwise)."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        httpx.delete(f"{base_url.rstrip('/')}/sessions/{key}", headers=headers, timeout=5.0)
    except httpx.HTTPError:
        pass
