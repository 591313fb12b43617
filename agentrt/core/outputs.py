"""The one output pair of every layer: a streamed :class:`StreamDelta`, a whole
:class:`RequestOutput`.

The engine, every backend (in process or an SGLang server) and the HTTP server speak these
two types. Counters are per *segment* (one engine call: a ``generate``, or a ``resume`` of a
paused request): ``num_prompt_tokens`` is the context the segment generated from and
``num_cached_tokens`` how many of those it did not compute (KV kept from the previous
segment, prefix-cache hits). A recompute after the KV was discarded counts as computed.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from agentrt.core.request import FinishReason, Request, RequestStats

__all__ = ["RequestOutput", "SegmentCounters", "StreamDelta", "segment_counters"]


@dataclass(frozen=True)
class StreamDelta:
    """New text and token ids of one request after one step (or one streamed chunk).

    Unlike vLLM's streamed ``RequestOutput`` (cumulative, every step), a delta holds only
    what is new: the concatenated deltas are the whole answer
    (:meth:`RequestOutput.from_deltas`), their :attr:`logprobs` too.
    """

    request_id: str
    text: str
    """Text added by this delta (never a broken UTF-8 character; stop strings held back)."""
    token_ids: list[int]
    """Token ids added by this delta."""
    finished: bool = False
    """True on the last delta of the segment."""
    finish_reason: FinishReason | None = None
    """On the last delta: ``"stop"`` (EOS, a stop token or string), ``"length"``
    (``max_tokens`` or the context is full) or ``"abort"``."""
    num_prompt_tokens: int = 0
    """The context this segment generates from (a resumed call: the whole context)."""
    num_cached_tokens: int = 0
    """Of ``num_prompt_tokens``, those this segment did not compute (kept KV, prefix cache)."""
    matched_stop: int | str | None = None
    """On the finishing delta: the stop token id or stop string that ended the segment
    (for an abort by a hook or a failed sampler: the reason, as text)."""
    logprobs: list[dict[int, float]] | None = None
    """With ``SamplingParams.logprobs`` set: for each of :attr:`token_ids`, token id →
    log-probability of the sampled token and the top alternatives (as
    :attr:`RequestOutput.logprobs`); None otherwise."""


@dataclass(frozen=True)
class RequestOutput:
    """Result of one generation segment (a ``generate`` or a ``resume`` call).

    Flat where vLLM nests: one completion per request, so vLLM's
    ``output.outputs[0].text`` / ``.token_ids`` / ``.finish_reason`` are ``output.text`` /
    ``.token_ids`` / ``.finish_reason`` here, and ``len(output.prompt_token_ids)`` is
    :attr:`num_prompt_tokens`.
    """

    request_id: str
    num_prompt_tokens: int
    """Tokens before this segment's outputs (the prompt, or the whole context on resume)."""
    token_ids: list[int]
    """Tokens generated in this segment (including a final EOS / stop token)."""
    text: str
    """Decoded output, stop string and special tokens removed."""
    finish_reason: FinishReason | None
    """``"stop"``, ``"length"`` or ``"abort"`` (see :class:`StreamDelta`)."""
    matched_stop: int | str | None = None
    """The stop token id or stop string that ended the segment (see :class:`StreamDelta`)."""
    logprobs: list[dict[int, float]] = field(default_factory=list)
    """With ``SamplingParams.logprobs`` set: per generated token, token id → log-probability
    of the sampled token and the top alternatives (before temperature, after a logits
    processor); empty otherwise."""
    num_cached_tokens: int = 0
    """Of ``num_prompt_tokens``, those this segment did not compute (kept KV from the last
    segment, prefix-cache hits)."""
    num_prefill_tokens: int = 0
    """Tokens computed in prefill chunks in this segment (prompt / appended / recompute)."""
    is_paused: bool = False
    """True when the KV was kept (``keep_kv``): the request can be resumed."""
    stats: RequestStats = field(default_factory=RequestStats)
    """A snapshot of the request's counters over its whole life (interceptions included)."""

    @property
    def prompt_len(self) -> int:
        """Old name of :attr:`num_prompt_tokens` (read-only alias)."""
        return self.num_prompt_tokens

    @property
    def stop_reason(self) -> int | str | None:
        """Old name of :attr:`matched_stop` (read-only alias)."""
        return self.matched_stop

    @classmethod
    def of(cls, req: Request) -> RequestOutput:
        """The current segment of ``req`` (read while the engine does not step it)."""
        prompt, cached, prefilled = segment_counters(req)
        return cls(
            request_id=req.request_id,
            num_prompt_tokens=prompt,
            token_ids=list(req.output_token_ids),
            text=req.output_text,
            finish_reason=req.finish_reason,
            matched_stop=req.stop_reason,
            logprobs=list(req.logprobs),
            num_cached_tokens=cached,
            num_prefill_tokens=prefilled,
            is_paused=req.status.name == "INTERCEPTED",
            stats=copy.deepcopy(req.stats),
        )

    @classmethod
    def from_deltas(cls, deltas: Iterable[StreamDelta]) -> RequestOutput:
        """Fold a stream into a whole output: texts and ids concatenated, counters and the
        finish from the last delta. Without the engine's request, ``num_prefill_tokens`` is
        the prompt tokens not cached, and ``stats`` are empty."""
        request_id, text, token_ids, logprobs = "", [], [], []
        last: StreamDelta | None = None
        for d in deltas:
            request_id = d.request_id
            text.append(d.text)
            token_ids.extend(d.token_ids)
            logprobs.extend(d.logprobs or ())
            last = d
        if last is None:
            return cls(request_id="", num_prompt_tokens=0, token_ids=[], text="",
                       finish_reason=None)
        return cls(
            request_id=request_id,
            num_prompt_tokens=last.num_prompt_tokens,
            token_ids=token_ids,
            text="".join(text),
            finish_reason=last.finish_reason if last.finished else None,
            matched_stop=last.matched_stop if last.finished else None,
            num_cached_tokens=last.num_cached_tokens,
            num_prefill_tokens=max(0, last.num_prompt_tokens - last.num_cached_tokens),
            logprobs=logprobs,
        )


class SegmentCounters(NamedTuple):
    """The token counters of one segment of a request (see :func:`segment_counters`)."""

    num_prompt_tokens: int
    num_cached_tokens: int
    num_prefill_tokens: int


def segment_counters(req: Request) -> SegmentCounters:
    """The counters of ``req``'s current segment: its prompt, how much of it was cached and how
    many tokens the segment computed in prefill chunks.

    ``num_cached_tokens`` is the prompt minus what this segment computed (capped at 0..
    prompt): once the prompt is prefilled — before the first delta — it is final, unless a
    preemption makes the segment compute its prompt again.
    """
    prompt = req.segment_start
    prefilled = req.stats.num_prefill_tokens - req.segment_prefill_start
    return SegmentCounters(prompt, max(0, prompt - min(prompt, prefilled)), prefilled)
