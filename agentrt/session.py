"""Session: one agent run as one engine request, its KV kept across model calls.

Agent frameworks call the model again and again with a prompt that re-renders the whole
history — the previous prompt, the model's answer, a tool's observation, a new instruction.
A session keeps the request paused between calls (its KV stays; the interception policy may
swap or discard it while the tool runs) and, on each call, compares the new prompt's tokens
with what the request already holds, its previous prompt plus its output:

* the common prefix is kept, the rest of the new prompt is appended and prefilled;
* where re-tokenizing the text splits the seam differently from the tokens the model
  generated (a stop string cut mid-token, a space merged into the next word), the tokens
  after the common prefix are rolled back and computed again.

So the model sees exactly the tokens a fresh call would, and a fresh call's greedy output is
reproduced — while the engine prefills only what is new. :func:`agent_run` opens a scope in
which integrations (``ChatAgentRT``, ``AgentRT``) route their calls through sessions.
"""

from __future__ import annotations

import contextvars
import itertools
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentrt.core.sampling_params import SamplingParams

if TYPE_CHECKING:
    from agentrt.engine.engine import Engine
    from agentrt.engine.outputs import StreamDelta

__all__ = [
    "PinnedScope", "Session", "SessionScope", "SessionStats", "agent_run", "current_scope",
    "request_tags",
]

_ids = itertools.count()
_PREFILL_ONLY = SamplingParams(max_tokens=1)


@dataclass
class SessionStats:
    """What a session saved: prompt tokens re-rendered by the framework vs computed."""

    num_calls: int = 0
    num_prompt_tokens: int = 0
    """Sum of every call's full prompt (what a stateless backend would prefill)."""
    num_reused_tokens: int = 0
    """Prompt tokens the request already held (kept, not sent again)."""
    num_appended_tokens: int = 0
    """Prompt tokens appended after the common prefix."""
    num_rollback_tokens: int = 0
    """Tokens of the held context dropped at seams that re-tokenized differently."""
    num_rollbacks: int = 0
    num_prefill_tokens: int = 0
    """Tokens the engine computed in prefill for this session (its own counter)."""


def common_prefix_len(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class Session:
    """One paused-and-resumed engine request serving a sequence of model calls."""

    def __init__(self, engine: Engine, *, namespace: str = "") -> None:
        self.engine = engine
        self.namespace = namespace
        self.request_id: str | None = None
        self.context: list[int] = []
        """The tokens the request holds: the last prompt and the output generated for it."""
        self.prompt_len = 0
        """Length of the last prompt (the part of ``context`` a continuation must share)."""
        self.stats = SessionStats()
        self.busy = False

    # --- calls ------------------------------------------------------------------------------
    def stream(self, prompt_ids: list[int], params: SamplingParams | None = None,
               **kwargs: Any) -> Iterator[StreamDelta]:
        """Generate for ``prompt_ids`` on the session's request; yields the engine's deltas.

        ``kwargs`` go to the engine (``hook``, ``pause``, ``forced_token_ids``)."""
        outputs: list[int] = []
        reason = None
        try:
            for delta in self._open(prompt_ids, params, kwargs, is_async=False):
                outputs.extend(delta.token_ids)
                reason = delta.finish_reason if delta.finished else None
                yield delta
        finally:
            self._close_call(prompt_ids, outputs, reason)

    async def astream(self, prompt_ids: list[int], params: SamplingParams | None = None,
                      **kwargs: Any) -> AsyncIterator[StreamDelta]:
        """Async twin of :meth:`stream`."""
        outputs: list[int] = []
        reason = None
        try:
            async for delta in self._open(prompt_ids, params, kwargs, is_async=True):
                outputs.extend(delta.token_ids)
                reason = delta.finish_reason if delta.finished else None
                yield delta
        finally:
            self._close_call(prompt_ids, outputs, reason)

    def plan(self, prompt_ids: list[int]) -> tuple[int, list[int]]:
        """(tokens of the held context to keep, tokens to append) for a new prompt."""
        if self.request_id is None:
            return 0, list(prompt_ids)
        keep = common_prefix_len(self.context, prompt_ids)
        return keep, list(prompt_ids[keep:])

    def close(self) -> None:
        """Free the request's KV (the session can be used again: it starts afresh)."""
        rid, self.request_id, self.context = self.request_id, None, []
        self._prefill_done += self._prefill_current
        self._prefill_current = 0
        if rid is not None:
            self.engine.abort(rid) if self.busy else self.engine.release(rid)

    def prefill(self, prompt_ids: list[int]) -> None:
        """Compute the KV of a prompt known early (a prefill-only call: the request then waits,
        its KV kept, until the next call appends the rest of the prompt)."""
        for _ in self.stream(prompt_ids, _PREFILL_ONLY):
            pass

    async def aprefill(self, prompt_ids: list[int]) -> None:
        """Async twin of :meth:`prefill`."""
        async for _ in self.astream(prompt_ids, _PREFILL_ONLY):
            pass

    # --- internals --------------------------------------------------------------------------
    _prefill_done = 0
    _prefill_current = 0

    def _open(self, prompt_ids: list[int], params, kwargs: dict, is_async: bool):
        self.stats.num_calls += 1
        self.stats.num_prompt_tokens += len(prompt_ids)
        keep, appended = self.plan(prompt_ids)
        e = self.engine
        if keep == 0:
            self.busy = False
            self.close()
            self.request_id = f"session-{next(_ids)}"
            self.busy = True
            start = e.astream if is_async else e.stream
            return start(prompt_ids, params, request_id=self.request_id, keep_kv=True,
                         namespace=self.namespace, **request_tags.get(), **kwargs)
        self.busy = True
        dropped = len(self.context) - keep
        self.stats.num_reused_tokens += keep
        self.stats.num_appended_tokens += len(appended)
        self.stats.num_rollback_tokens += dropped
        self.stats.num_rollbacks += dropped > 0
        resume = e.aresume_stream if is_async else e.resume_stream
        return resume(self.request_id, appended, params, keep_kv=True, truncate_to=keep,
                      **request_tags.get(), **kwargs)

    def _close_call(self, prompt_ids: list[int], outputs: list[int], reason) -> None:
        req = self.engine.core.requests.get(self.request_id or "")
        if req is not None:
            self._prefill_current = req.stats.num_prefill_tokens
            self.stats.num_prefill_tokens = self._prefill_done + self._prefill_current
        if reason in (None, "abort") or req is None:
            self.close()  # cut short, failed or aborted: start afresh next time
        else:
            self.context = list(prompt_ids) + outputs
            self.prompt_len = len(prompt_ids)
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
        """Makes the engine hook of each call from the engine's tokenizer (e.g. partial
        execution of the run's tools); its ``close()`` runs when the call's output ends, and
        the factory's ``withdraw()``, if any, when the scope closes."""
        self.grammar: str | None = None
        """A GBNF grammar the run's model calls follow unless a call binds its own tools or
        format (set by an executor that knows the agent's output format, e.g. ReAct)."""
        self._lock = threading.Lock()

    def session_for(self, engine: Engine, prompt_ids: list[int]) -> Session:
        with self._lock:
            best, best_len = None, 0
            for s in self.sessions:
                if s.engine is engine and not s.busy and s.request_id is not None:
                    n = common_prefix_len(s.context, prompt_ids)
                    enough = max(self.min_shared_tokens, s.prompt_len - self.seam_slack)
                    if n >= enough and n > best_len:
                        best, best_len = s, n
            if best is None:
                best = Session(engine)
                self.sessions.append(best)
            best.busy = True  # NOTE: reserved until its call ends
            self.last = best
            return best

    def annotate_last(self, kind: str, expected_duration: float | None = None) -> None:
        """Tell the engine what the most recently used session now waits for (a tool)."""
        s = self.last
        if s is not None and s.request_id is not None and not s.busy:
            try:
                s.engine.set_interception(s.request_id, kind, expected_duration)
            except (KeyError, ValueError):
                pass  # the request is not paused (finished or aborted): nothing to tell

    @property
    def stats(self) -> SessionStats:
        """The sum over this scope's sessions."""
        total = SessionStats()
        for s in self.sessions:
            for k, v in vars(s.stats).items():
                setattr(total, k, getattr(total, k) + v)
        return total

    def close(self) -> None:
        """Free every session's KV (and withdraw what the hooks left running)."""
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

    def session_for(self, engine: Engine, prompt_ids: list[int]) -> Session:
        session = self.sessions[0]
        if session.engine is not engine:
            raise ValueError("the pinned session runs on another engine")
        session.busy = True
        self.last = session
        return session


_current: contextvars.ContextVar[SessionScope | None] = contextvars.ContextVar(
    "agentrt_session_scope", default=None)

request_tags: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar(
    "agentrt_request_tags", default={})  # noqa: B039 - never mutated, only replaced
"""Engine ``submit`` options every model call made in this context carries (the graph
runtime sets ``group`` and ``depth`` for topology-aware batching)."""


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
