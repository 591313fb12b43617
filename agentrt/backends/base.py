"""The ``Backend`` interface: what one agent run needs from whatever generates its tokens.

An agent run works in token ids: it generates (whole or streamed) with
:class:`~agentrt.SamplingParams`, keeps its context in a *session* whose later calls append
only what is new (an observation, the next instruction), and aborts a call it no longer
wants. Every backend — the in-process engine, an SGLang server, SGLang's router in front of
several workers — offers these calls, as sync/async twins (``generate``/``agenerate``,
``stream``/``astream``, ...), streams the one delta type (:class:`~agentrt.core.outputs.
StreamDelta`, whose counters say how much of the context this call computed), and says in
:class:`BackendCapabilities` what it really does underneath, so the runtime can choose (e.g.
pause a request in place only where that exists).

A session's context is the prompts and outputs of its calls that the backend *committed*
(ended with ``stop`` or ``length``; output ids include the token that ended them, e.g. EOS).
A session call keeps the first ``keep`` tokens of it (None: all of it; 0: none — the call
starts the session afresh) and appends ``prompt_ids``. A call that does not commit (aborted,
failed, a stream closed early) leaves the session empty: its next call has ``keep=0``.
Front ends do not use this directly: :class:`agentrt.backends.call.Call` and
:class:`agentrt.session.Session` plan ``keep`` (the seam rollback) and read the counters.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from agentrt.core.model_info import ModelInfo
from agentrt.core.options import RequestOptions
from agentrt.core.outputs import RequestOutput, StreamDelta
from agentrt.core.sampling_params import SamplingParams

__all__ = ["Backend", "BackendCapabilities", "FinishReason"]

FinishReason = Literal["stop", "length", "abort"]


@dataclass(frozen=True)
class BackendCapabilities:
    """What a backend does underneath the common calls (no backend pretends)."""

    can_pause_in_place: bool
    """A request can stop in the middle of decoding (e.g. at a tool call) and continue
    later on the same sequence, its KV held meanwhile: the request's ``hook`` runs where the
    tokens are made. Elsewhere a call runs the hook on the streamed tokens and ends there."""
    keeps_kv_across_calls: bool
    """A session's next call reuses the previous call's KV: only appended tokens are sent
    and prefilled."""
    kv_held_between_calls: bool
    """That KV is reserved for the session between calls (not evictable under memory
    pressure; at most swapped to host memory or recomputed by policy)."""
    prefix_cache: bool
    """Requests that share a prompt prefix compute it once."""
    streaming: bool = True
    in_process: bool = False
    """The model runs in this process (no network between the run and its tokens)."""


class Backend(abc.ABC):
    """Generates tokens for agent runs; sync and async twins over one implementation each.

    ``options.request_id`` names a call so that :meth:`abort` can stop it (one is made up
    when not given). Closing a stream early aborts its call.
    """

    name: ClassVar[str]

    @property
    @abc.abstractmethod
    def capabilities(self) -> BackendCapabilities:
        """What this backend does underneath (see :class:`BackendCapabilities`)."""

    # --- the model ------------------------------------------------------------------------
    @property
    @abc.abstractmethod
    def tokenizer(self) -> Any:
        """The served model's tokenizer (a ``transformers`` tokenizer, with its chat
        template): front ends render and tokenize here and send token ids."""

    @property
    @abc.abstractmethod
    def model_info(self) -> ModelInfo:
        """What the served model is (its name, path, architecture, limits)."""

    @property
    def max_model_len(self) -> int:
        """Prompt + output tokens one request may hold."""
        return self.model_info.max_model_len

    # --- generation -----------------------------------------------------------------------
    @abc.abstractmethod
    def stream(self, prompt_ids: Sequence[int], params: SamplingParams | None = None, *,
               session_id: str | None = None, keep: int | None = None,
               options: RequestOptions | None = None) -> Iterator[StreamDelta]:
        """Stream one call; with ``session_id``, ``prompt_ids`` are appended to the first
        ``keep`` tokens of the session's context (see the module docs)."""

    @abc.abstractmethod
    def astream(self, prompt_ids: Sequence[int], params: SamplingParams | None = None, *,
                session_id: str | None = None, keep: int | None = None,
                options: RequestOptions | None = None) -> AsyncIterator[StreamDelta]:
        """Async twin of :meth:`stream`."""

    def generate(self, prompt_ids: Sequence[int], params: SamplingParams | None = None, *,
                 session_id: str | None = None, keep: int | None = None,
                 options: RequestOptions | None = None) -> RequestOutput:
        """One call, whole (see :meth:`stream`)."""
        return RequestOutput.from_deltas(list(self.stream(
            prompt_ids, params, session_id=session_id, keep=keep, options=options)))

    async def agenerate(self, prompt_ids: Sequence[int], params: SamplingParams | None = None,
                        *, session_id: str | None = None, keep: int | None = None,
                        options: RequestOptions | None = None) -> RequestOutput:
        """Async twin of :meth:`generate`."""
        deltas = [d async for d in self.astream(prompt_ids, params, session_id=session_id,
                                                keep=keep, options=options)]
        return RequestOutput.from_deltas(deltas)

    # --- sessions ------------------------------------------------------------------------
    @abc.abstractmethod
    def open_session(self) -> str:
        """Start a session (an agent run's context); returns its id."""

    @abc.abstractmethod
    async def aopen_session(self) -> str:
        """Async twin of :meth:`open_session`."""

    @abc.abstractmethod
    def close_session(self, session_id: str) -> None:
        """End a session and free what it holds (unknown ids are ignored)."""

    @abc.abstractmethod
    async def aclose_session(self, session_id: str) -> None:
        """Async twin of :meth:`close_session`."""

    def set_interception(self, session_id: str, kind: str,  # noqa: B027 - a hint
                         expected_duration: float | None = None) -> None:
        """Say what a session waits for between calls (a tool of ``kind``), so a backend
        that holds its KV can choose to keep, swap or drop it; others ignore the hint."""

    # --- control -------------------------------------------------------------------------
    @abc.abstractmethod
    def abort(self, request_id: str) -> None:
        """Stop a call in flight (its stream ends with ``finish_reason="abort"``)."""

    @abc.abstractmethod
    async def aabort(self, request_id: str) -> None:
        """Async twin of :meth:`abort`."""

    def close(self) -> None:  # noqa: B027 - optional: most backends hold something to free
        """Release the backend's resources (connections; not a shared engine)."""

    async def aclose(self) -> None:
        """Async twin of :meth:`close`."""
        self.close()

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Backend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
