"""Session: one agent run's context on a backend, kept across model calls.

Agent frameworks call the model again and again with a prompt that re-renders the whole
history — the previous prompt, the model's answer, a tool's observation, a new instruction.
A session keeps that context on its :class:`~agentrt.backends.base.Backend` between calls —
the local engine holds it in one paused request (the interception policy may swap or discard
its KV while a tool runs); an SGLang server in its own session — and, on each call, compares
the new prompt's tokens with what the backend holds, the previous prompt plus its output:

* the common prefix is kept, the rest of the new prompt is appended and prefilled;
* where re-tokenizing the text splits the seam differently from the tokens the model
  generated (a stop string cut mid-token, a space merged into the next word), the tokens
  after the common prefix are rolled back and computed again.

So the model sees exactly the tokens a fresh call would, and a fresh call's greedy output is
reproduced — while the backend prefills only what is new. Each call is a
:class:`~agentrt.backends.call.Call`; :class:`SessionStats` adds up its counters.
:func:`agent_run` opens a scope in which integrations (``ChatAgentRT``, ``AgentRT``) route
their calls through sessions.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from agentrt.backends.call import Call, as_backend, request_tags
from agentrt.core.options import RequestOptions
from agentrt.core.sampling_params import SamplingParams

if TYPE_CHECKING:
    from agentrt.backends.base import Backend
    from agentrt.core.outputs import RequestOutput, StreamDelta

__all__ = [
    "PinnedScope", "Session", "SessionScope", "SessionStats", "agent_run", "common_prefix_len",
    "current_scope", "request_tags",
]

_PREFILL_ONLY = SamplingParams(max_tokens=1)


@dataclass
class SessionStats:
    """What a session saved: prompt tokens re-rendered by the framework vs computed."""

    backend: str = ""
    """The backend that served the calls (``local``, ``sglang``)."""
    num_calls: int = 0
    num_prompt_tokens: int = 0
    """Sum of every call's full prompt (what a stateless backend would prefill)."""
    num_reused_tokens: int = 0
    """Prompt tokens the backend already held for the session (kept, not sent again)."""
    num_appended_tokens: int = 0
    """Prompt tokens appended after the common prefix."""
    num_rollback_tokens: int = 0
    """Tokens of the held context dropped at seams that re-tokenized differently."""
    num_rollbacks: int = 0
    num_prefill_tokens: int = 0
    """Prompt tokens the backend computed for this session's calls (from their deltas)."""
    num_cached_tokens: int = 0
    """Prompt tokens the backend did not compute: held by the session or prefix-cache hits."""
    num_paused_in_place: int = 0
    """Calls a hook ended where the tokens are made (the engine paused the request)."""
    num_stopped_client_side: int = 0
    """Calls a hook ended here, on the streamed tokens (the backend cannot pause in place);
    the next call starts the session afresh, served by the backend's prefix cache."""

    def add(self, other: SessionStats) -> None:
        """Add ``other``'s counters to these (the backend names joined)."""
        for f in fields(self):
            if f.name == "backend":
                names = [n for n in (self.backend, other.backend) if n]
                self.backend = "+".join(dict.fromkeys("+".join(names).split("+"))) \
                    if names else ""
            else:
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


def common_prefix_len(a: list[int], b: list[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class Session:
    """An agent run's context on ``backend`` (an :class:`agentrt.Engine` is taken as its
    local backend), serving a sequence of model calls."""

    def __init__(self, backend: Any, *, namespace: str = "") -> None:
        self.backend: Backend = as_backend(backend)
        self.namespace = namespace
        self.session_id: str | None = None
        """The backend's session, opened at the first call."""
        self.context: list[int] = []
        """The tokens the backend holds: the last prompt and the output generated for it."""
        self.prompt_len = 0
        """Length of the last prompt (the part of ``context`` a continuation must share)."""
        self.stats = SessionStats(backend=self.backend.name)
        self.busy = False
        self.last_call: Call | None = None

    # --- calls ------------------------------------------------------------------------------
    def call(self, prompt_ids: list[int], params: SamplingParams | None = None,
             options: RequestOptions | None = None, **changes: Any) -> Call:
        """The next call of this session (run it with ``stream`` / ``generate`` / ...);
        ``changes`` are :class:`RequestOptions` fields (``hook``, ``forced_token_ids``)."""
        options = RequestOptions.of(options, **changes)
        if not options.namespace and self.namespace:
            options = options.updated({"namespace": self.namespace})
        return Call(self.backend, prompt_ids, params, session=self, options=options)

    def stream(self, prompt_ids: list[int], params: SamplingParams | None = None,
               **changes: Any) -> Iterator[StreamDelta]:
        """Generate for ``prompt_ids`` (the whole context) on the session; yields the deltas."""
        yield from self.call(prompt_ids, params, **changes).stream()

    async def astream(self, prompt_ids: list[int], params: SamplingParams | None = None,
                      **changes: Any) -> AsyncIterator[StreamDelta]:
        """Async twin of :meth:`stream`."""
        deltas = self.call(prompt_ids, params, **changes).astream()
        try:
            async for delta in deltas:
                yield delta
        finally:
            await deltas.aclose()

    def generate(self, prompt_ids: list[int], params: SamplingParams | None = None,
                 **changes: Any) -> RequestOutput:
        """One call, whole."""
        return self.call(prompt_ids, params, **changes).generate()

    async def agenerate(self, prompt_ids: list[int], params: SamplingParams | None = None,
                        **changes: Any) -> RequestOutput:
        """Async twin of :meth:`generate`."""
        return await self.call(prompt_ids, params, **changes).agenerate()

    def prefill(self, prompt_ids: list[int]) -> None:
        """Compute the KV of a prompt known early (a one-token call: the backend then holds
        it until the next call appends the rest of the prompt)."""
        self.generate(prompt_ids, _PREFILL_ONLY)

    async def aprefill(self, prompt_ids: list[int]) -> None:
        """Async twin of :meth:`prefill`."""
        await self.agenerate(prompt_ids, _PREFILL_ONLY)

    def plan(self, prompt_ids: list[int]) -> tuple[int, list[int]]:
        """(tokens of the held context to keep, tokens to append) for a new prompt."""
        keep = common_prefix_len(self.context, prompt_ids)
        return keep, list(prompt_ids[keep:])

    def close(self) -> None:
        """Free what the backend holds (the session can be used again: it starts afresh)."""
        sid, self.session_id, self.context, self.prompt_len = self.session_id, None, [], 0
        if self.busy and self.last_call is not None:
            self.last_call.abort()
        if sid is not None:
            self.backend.close_session(sid)

    async def aclose(self) -> None:
        """Async twin of :meth:`close`."""
        sid, self.session_id, self.context, self.prompt_len = self.session_id, None, [], 0
        if self.busy and self.last_call is not None:
            await self.last_call.aabort()
        if sid is not None:
            await self.backend.aclose_session(sid)

    # --- what a Call asks of its session ---------------------------------------------------
    def open(self) -> str:
        """The backend session's id (opened on first use)."""
        if self.session_id is None:
            self.session_id = self.backend.open_session()
        return self.session_id

    async def aopen(self) -> str:
        """Async twin of :meth:`open`."""
        if self.session_id is None:
            self.session_id = await self.backend.aopen_session()
        return self.session_id

    def begin(self, call: Call) -> tuple[int, list[int]]:
        """``call`` starts: what it keeps of the held context and appends (counted)."""
        keep, appended = self.plan(call.prompt_ids)
        stats, dropped = self.stats, len(self.context) - keep
        stats.num_calls += 1
        stats.num_prompt_tokens += len(call.prompt_ids)
        stats.num_reused_tokens += keep
        stats.num_appended_tokens += len(appended)
        stats.num_rollback_tokens += dropped if keep else 0
        stats.num_rollbacks += dropped > 0 and keep > 0
        self.busy, self.last_call = True, call
        return keep, appended

    def end(self, call: Call) -> None:
        """``call`` is over: the backend holds its prompt and output if it committed it;
        otherwise (cut short, aborted, stopped here) the next call starts afresh."""
        stats = self.stats
        stats.num_prefill_tokens += call.num_prefilled_tokens
        stats.num_cached_tokens += call.num_cached_tokens
        if call.finish_reason == "stop" and call.matched_stop is None and call.hook_path:
            if call.hook_path == "in_place":
                stats.num_paused_in_place += 1
            else:
                stats.num_stopped_client_side += 1
        if call.is_committed:
            self.context = call.prompt_ids + call.token_ids
            self.prompt_len = len(call.prompt_ids)
        else:
            self.context, self.prompt_len = [], 0
        self.busy = False


class SessionScope:
    """The sessions of one agent run. A call continues the idle session on its engine whose
    context its prompt extends — sharing at least that session's last prompt, up to
    ``seam_slack`` tokens at its end (the chat template's closing turn markers, e.g. when
    a ReAct scratchpad inside the user turn grows) — preferring the longest shared prefix;
    otherwise it opens a new session (an unrelated call never wipes an agent's context)."""

    def __init__(self, min_shared_tokens: int = 1, seam_slack: int = 8) -> None:
        self.min_shared_tokens = min_shared_tokens
        self.seam_slack = seam_slack
        self.sessions: list[Session] = []
        self.last: Session | None = None
        self.hook_factory: Any = None
        """Makes the hook of each call (e.g. partial execution of the run's tools), called as
        ``factory(tokenizer, reasoning=mode, tool_format=fmt, can_call_tools=bool)``: the
        backend's tokenizer, where the call's output may hold reasoning text (``"none"``,
        ``"detect"``, ``"open"``, ``"detect_mistral"``, ``"open_mistral"``), the format its
        tool calls are written in, and whether it may make any; None: no hook for that call.
        A hook's ``close()`` runs when the call's output ends, and the factory's
        ``withdraw()``, if any, when the scope closes."""
        self.grammar: str | None = None
        """A GBNF grammar the run's model calls follow unless a call binds its own tools or
        format (set by an executor that knows the agent's output format, e.g. ReAct)."""
        self.is_closed = False
        """The run has ended (:meth:`close`): its KV is freed and no session opens."""
        self._lock = threading.Lock()

    closed_message = ("this agent run has ended: its KV is freed, and a call in it now would "
                      "hold KV no one frees; make the run's calls before it ends")
    """What a call made after :meth:`close` raises (a front end says how to use it)."""

    def session_for(self, backend: Any, prompt_ids: list[int]) -> Session:
        """The session a call of ``prompt_ids`` on ``backend`` (or an engine) continues,
        reserved for it until the call ends; a ``RuntimeError`` once the scope is closed."""
        backend = as_backend(backend)
        if self.is_closed:
            raise RuntimeError(self.closed_message)
        with self._lock:
            best, best_len = None, 0
            for s in self.sessions:
                if s.backend == backend and not s.busy and s.context:
                    n = common_prefix_len(s.context, prompt_ids)
                    enough = max(self.min_shared_tokens, s.prompt_len - self.seam_slack)
                    if n >= enough and n > best_len:
                        best, best_len = s, n
            if best is None:
                best = Session(backend)
                self.sessions.append(best)
            best.busy = True  # NOTE: reserved until its call ends
            self.last = best
            return best

    def annotate_last(self, kind: str, expected_duration: float | None = None) -> None:
        """Tell the backend what the most recently used session now waits for (a tool)."""
        s = self.last
        if s is not None and s.session_id is not None and s.context and not s.busy:
            s.backend.set_interception(s.session_id, kind, expected_duration)

    @property
    def stats(self) -> SessionStats:
        """The sum over this scope's sessions."""
        total = SessionStats()
        for s in self.sessions:
            total.add(s.stats)
        return total

    def close(self) -> None:
        """Free every session's KV (and withdraw what the hooks left running); later calls
        in this scope raise (:attr:`closed_message`)."""
        self.is_closed = True  # NOTE: first, so no call of the run opens a session past it
        with self._lock:
            for s in self.sessions:
                s.close()
        withdraw = getattr(self.hook_factory, "withdraw", None)
        if withdraw is not None:
            withdraw()


class PinnedScope(SessionScope):
    """A scope whose every call continues one given session (e.g. one a partial prefill
    filled for the call that completes its prompt)."""

    def __init__(self, session: Session) -> None:
        super().__init__()
        self.sessions = [session]

    def session_for(self, backend: Any, prompt_ids: list[int]) -> Session:
        session = self.sessions[0]
        if session.backend != as_backend(backend):
            raise ValueError("the pinned session runs on another backend")
        session.busy = True
        self.last = session
        return session


_current: contextvars.ContextVar[SessionScope | None] = contextvars.ContextVar(
    "agentrt_session_scope", default=None)

def current_scope() -> SessionScope | None:
    """The scope opened by the innermost :func:`agent_run`, if any."""
    return _current.get()


@contextmanager
def agent_run(scope: SessionScope | None = None) -> Iterator[SessionScope]:
    """Route the model calls made inside this block through sessions; free them at the end
    (also on error or abort)."""
    scope = scope or SessionScope()
    token = _current.set(scope)
    try:
        yield scope
    finally:
        _current.reset(token)
        scope.close()
