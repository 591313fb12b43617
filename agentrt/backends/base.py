"""The ``Backend`` interface: what one agent run needs from whatever generates its tokens.

An agent run works in token ids: it generates (whole or streamed) with
:class:`~agentrt.SamplingParams`, keeps its context in a *session* whose later calls append
only what is new (an observation, the next instruction), and aborts a call it no longer
wants. Every backend — the in-process engine, an SGLang server, SGLang's router in front of
several workers — offers these calls, as sync/async twins (``generate``/``agenerate``,
``stream``/``astream``, ...), and says in :class:`BackendCapabilities` what it really does
underneath, so the runtime can choose (e.g. pause a request in place only where that exists).

Session calls take the tokens *appended* to the session's context, which is the previous
calls' prompts and outputs (output ids include the token that ended them, e.g. EOS): the
first call's ``prompt_ids`` are the whole prompt.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from agentrt.core.sampling_params import SamplingParams

__all__ = ["Backend", "BackendCapabilities", "FinishReason", "Generation", "GenerationChunk"]

FinishReason = Literal["stop", "length", "abort"]


@dataclass(frozen=True)
class BackendCapabilities:
    """What a backend does underneath the common calls (no backend pretends)."""

    can_pause_in_place: bool
    """A request can stop in the middle of decoding (e.g. at a tool call) and continue
    later on the same sequence, its KV held meanwhile (the engine's hook / ``resume``)."""
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


@dataclass(frozen=True)
class GenerationChunk:
    """What one streamed step added to a generation (``text`` and ``token_ids`` are new)."""

    request_id: str
    text: str
    token_ids: list[int]
    finished: bool = False
    finish_reason: FinishReason | None = None
    num_prompt_tokens: int = 0
    """The context this call generated from (a session call: the whole session so far)."""
    num_cached_tokens: int = 0
    """Of those, tokens whose KV was reused rather than computed by this call."""
    matched_stop: int | str | None = None
    """The stop token id or stop string that ended the generation, if one did."""


@dataclass
class Generation:
    """A whole generation: the chunks of a stream folded together."""

    request_id: str = ""
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0
    matched_stop: int | str | None = None

    def add(self, chunk: GenerationChunk) -> None:
        """Fold one chunk in (counters are taken from the latest chunk)."""
        self.request_id = chunk.request_id
        self.text += chunk.text
        self.token_ids.extend(chunk.token_ids)
        self.num_prompt_tokens = chunk.num_prompt_tokens
        self.num_cached_tokens = chunk.num_cached_tokens
        if chunk.finished:
            self.finish_reason = chunk.finish_reason
            self.matched_stop = chunk.matched_stop


class Backend(abc.ABC):
    """Generates tokens for agent runs; sync and async twins over one implementation each.

    ``request_id`` names a call so that :meth:`abort` can stop it (one is made up when not
    given). Closing a stream early aborts its call.
    """

    name: ClassVar[str]

    @property
    @abc.abstractmethod
    def capabilities(self) -> BackendCapabilities:
        """What this backend does underneath (see :class:`BackendCapabilities`)."""

    # --- generation -----------------------------------------------------------------------
    @abc.abstractmethod
    def stream(self, prompt_ids: Sequence[int], params: SamplingParams | None = None, *,
               session_id: str | None = None, request_id: str | None = None
               ) -> Iterator[GenerationChunk]:
        """Stream one call; with ``session_id``, ``prompt_ids`` are appended to the session."""

    @abc.abstractmethod
    def astream(self, prompt_ids: Sequence[int], params: SamplingParams | None = None, *,
                session_id: str | None = None, request_id: str | None = None
                ) -> AsyncIterator[GenerationChunk]:
        """Async twin of :meth:`stream`."""

    def generate(self, prompt_ids: Sequence[int], params: SamplingParams | None = None, *,
                 session_id: str | None = None, request_id: str | None = None) -> Generation:
        """One call, whole (see :meth:`stream`)."""
        out = Generation()
        for chunk in self.stream(prompt_ids, params, session_id=session_id,
                                 request_id=request_id):
            out.add(chunk)
        return out

    async def agenerate(self, prompt_ids: Sequence[int], params: SamplingParams | None = None,
                        *, session_id: str | None = None, request_id: str | None = None
                        ) -> Generation:
        """Async twin of :meth:`generate`."""
        out = Generation()
        async for chunk in self.astream(prompt_ids, params, session_id=session_id,
                                        request_id=request_id):
            out.add(chunk)
        return out

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
