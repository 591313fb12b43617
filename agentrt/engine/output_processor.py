"""Output processing: what a sampled token does to its request, and what the caller sees.

After each step the engine hands every sampled token to :meth:`OutputProcessor.append`:
forced tokens replace it, it is detokenized (never a broken UTF-8 character), stop tokens,
stop strings and the length limit are checked, and the request's hook may pause or abort
it. :func:`make_update` then builds the :class:`StepUpdate` and its
:class:`~agentrt.core.outputs.StreamDelta` — with the segment's counters — while the engine
still holds the request, so no caller reads the live request later.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from agentrt.core.detokenizer import IncrementalDetokenizer, find_stop, stop_holdback
from agentrt.core.outputs import StreamDelta, segment_counters
from agentrt.core.request import FinishReason, Pause, Request, RequestStatus

__all__ = ["OutputProcessor", "StepUpdate", "make_update"]


@dataclass(frozen=True)
class StepUpdate:
    """What one step did to one request: the delta its caller sees, made inside the step."""

    request: Request
    delta: StreamDelta
    error: Exception | None = None
    """What failed inside this request's sampling (it is aborted; the others run on)."""

    @property
    def finished(self) -> bool:
        return self.delta.finished


def make_update(req: Request, token_ids: list[int], text: str, finished: bool,
                error: Exception | None = None) -> StepUpdate:
    """The update (and stream delta, with the segment's counters) of ``req`` now."""
    prompt, cached, _ = segment_counters(req)
    # NOTE: one token a step, sampled (its logprobs the sampler's last entry) or forced
    logprobs = req.logprobs[-len(token_ids):] \
        if req.params.logprobs is not None and token_ids else None
    delta = StreamDelta(req.request_id, text, token_ids, finished,
                        req.finish_reason if finished else None, prompt, cached,
                        req.stop_reason if finished else None, logprobs)
    return StepUpdate(req, delta, error)


class OutputProcessor:
    """Per-token bookkeeping of the requests of one engine (tokenizer, EOS ids, context)."""

    def __init__(self, tokenizer: Any, eos_token_ids: set[int], max_model_len: int) -> None:
        self.tokenizer = tokenizer
        self.eos_token_ids = eos_token_ids
        self.max_model_len = max_model_len

    def start_segment(self, req: Request) -> None:
        """Reset ``req``'s per-segment state: a new ``generate`` or a ``resume`` begins."""
        req.segment_start = req.num_tokens
        req.segment_prefill_start = req.stats.num_prefill_tokens
        req.num_segment_outputs = 0
        req.last_is_sampled = False
        req.finish_reason = req.stop_reason = None
        req.output_text, req.num_emitted_chars, req.logprobs = "", 0, []
        req.detok = IncrementalDetokenizer(
            self.tokenizer, req.token_ids, skip_special_tokens=req.params.skip_special_tokens)

    def append(self, req: Request, token: int) -> FinishReason | None:
        """Append the sampled ``token`` (or the next forced one) to ``req``; the reason its
        segment ends now, if it does (a hook's pause ends it with ``stop`` and keeps KV)."""
        if req.forced_token_ids:
            token = req.forced_token_ids.popleft()
        if req.stats.first_token_time is None:
            req.stats.first_token_time = time.monotonic()
        req.token_ids.append(token)
        req.num_segment_outputs += 1
        req.last_is_sampled = True
        prev = len(req.output_text)
        req.output_text += req.detok.push([token])
        reason = self._finish_reason(req, token, prev)
        action = _call_hook(req, token)
        if reason is None and action in ("pause", "abort"):
            reason = "stop" if action == "pause" else "abort"
            req.keep_kv = req.keep_kv or action == "pause"
        return reason

    @staticmethod
    def stream_text(req: Request) -> str:
        """The output text not streamed yet; a possible stop-string prefix is held back
        while the segment runs."""
        end = len(req.output_text)
        if not req.status.is_finished and req.status is not RequestStatus.INTERCEPTED:
            end -= stop_holdback(req.output_text, req.params.stop)
        delta = req.output_text[req.num_emitted_chars : max(end, req.num_emitted_chars)]
        req.num_emitted_chars += len(delta)
        return delta

    def _finish_reason(self, req: Request, token: int, prev_len: int) -> FinishReason | None:
        p = req.params
        if (token in self.eos_token_ids and not p.ignore_eos) or token in p.stop_token_ids:
            req.stop_reason = token
            return "stop"
        if p.stop:
            hit = find_stop(req.output_text, p.stop, prev_len)
            if hit is not None:
                req.output_text = req.output_text[: hit[0]]
                req.stop_reason = hit[1]
                return "stop"
        if req.num_segment_outputs >= p.max_tokens or req.num_tokens >= self.max_model_len:
            return "length"
        return None


def _call_hook(req: Request, token: int) -> str | None:
    """The request's hook; one that raises aborts only its own request. A hook answering
    ``Pause(kind, expected_duration)`` pauses the request for a tool of that kind."""
    if req.hook is None:
        return None
    try:
        action = req.hook(req, [token])
    except Exception as exc:  # noqa: BLE001 - a broken hook must not stop the batch
        req.stop_reason = f"hook raised {type(exc).__name__}: {exc}"
        return "abort"
    if isinstance(action, Pause):
        req.pending_pause = action
        return "pause"
    return action
