"""``POST /v1/completions``: the legacy text completion API, straight onto the backend.

The prompt is raw text or token ids (no chat template), one or several; several prompts are
generated together (continuous batching) and answered as ``n`` choices each (prompt ``p``'s
choice ``j`` has ``index`` ``p * n + j``, as vLLM numbers them; :mod:`.choices`). A stream
takes one prompt.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterable
from functools import partial
from typing import Any

import anyio
from fastapi import APIRouter, Request

from agentrt.backends.call import Call
from agentrt.core.options import RequestOptions
from agentrt.core.outputs import StreamDelta
from agentrt.core.sampling_params import SamplingParams
from agentrt.server.choices import Choices, check_choices, complete_all, nth_seed, stream_choices
from agentrt.server.errors import APIError, check_context
from agentrt.server.logprobs import LegacyLogprobs
from agentrt.server.protocol import (
    Completion,
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    Usage,
)
from agentrt.server.run import Event, Run
from agentrt.server.sampling_extras import with_extras
from agentrt.server.state import ServerState, State
from agentrt.server.streaming import cancel_on_disconnect, start_stream

__all__ = ["CompletionRun", "router"]

ENDPOINT = "/v1/completions"
router = APIRouter()


@router.post(ENDPOINT, response_model=None)
async def create_completion(body: CompletionRequest, request: Request,
                            state: State) -> Any:
    """Continue one or several prompts, whole or streamed (``stream: true``, one prompt)."""
    started = time.monotonic()
    model = state.resolve_model(body.model)
    if body.stream and len(body.prompts) != 1:
        raise APIError(400, "a streamed completion takes one prompt", param="prompt")
    check_choices(state, body.n)
    params = _params(body, state)
    prompts = await anyio.to_thread.run_sync(
        lambda: [p if isinstance(p, list) else state.encode(p) for p in body.prompts])
    response_id = f"cmpl-{uuid.uuid4().hex[:24]}"
    for ids in prompts:
        check_context(state.max_model_len, len(ids), body.max_tokens, param="max_tokens",
                      chat=False)
    created, n = int(time.time()), body.n
    groups = [Choices(state, [CompletionRun(state, ids, nth_seed(params, j),
                                            f"{response_id}-{p * n + j}", started,
                                            index=p * n + j, response_id=response_id,
                                            model=model, created=created)
                              for j in range(n)], ids, f"{response_id}-p{p}")
              for p, ids in enumerate(prompts)]
    counted = partial(state.metrics.count, ENDPOINT)
    if body.stream:
        def usage() -> Iterable[Event]:
            if body.include_usage:
                yield Completion(id=response_id, created=created, model=model, choices=[],
                                 usage=_usage(groups))

        return await start_stream(stream_choices(groups[0], usage), on_end=counted)
    return await cancel_on_disconnect(request, _complete(groups, response_id, model, created),
                                      on_end=counted)


def _params(body: CompletionRequest, state: ServerState) -> SamplingParams:
    try:
        params = SamplingParams(max_tokens=body.max_tokens, temperature=body.temperature,
                                top_p=body.top_p, top_k=body.top_k, seed=body.seed,
                                stop=body.stops, logprobs=body.logprobs)
        return with_extras(params, body, state)
    except ValueError as exc:
        raise APIError.bad_request(exc) from exc


async def _complete(groups: list[Choices], response_id: str, model: str, created: int
                    ) -> Completion:
    """Every prompt's choices, generated together (one rejected prompt aborts the others)."""
    answers = await complete_all(groups)
    return Completion(id=response_id, created=created, model=model,
                      choices=[choice for group in answers for choice in group],
                      usage=_usage(groups))


def _usage(groups: list[Choices]) -> Usage:
    return Usage.of(sum(g.num_prompt_tokens for g in groups),
                    sum(g.num_output_tokens for g in groups),
                    sum(g.num_cached_tokens for g in groups))


class CompletionRun(Run):
    """One prompt's generation in flight (one choice of the answer)."""

    def __init__(self, state: ServerState, prompt_ids: list[int], params: SamplingParams,
                 request_id: str, started: float, index: int = 0, *, response_id: str = "",
                 model: str = "", created: int | None = None) -> None:
        super().__init__(state, started)
        self.prompt_ids = prompt_ids
        self.call = Call(state.backend, prompt_ids, params,
                         options=RequestOptions(request_id=request_id))
        self.index = index
        self.response_id = response_id
        self.model = model
        self.created = int(time.time()) if created is None else created
        self.text: list[str] = []
        self.num_output_tokens = 0
        self.finish_reason: str | None = None
        self.logprobs = None if params.logprobs is None else \
            LegacyLogprobs(state.tokenizer, params.logprobs)
        """With ``logprobs`` asked for: the answer's entries so far (:mod:`.logprobs`)."""
        self._fresh: CompletionLogprobs | None = None

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_ids)

    def source(self) -> AsyncIterator[StreamDelta]:
        return self.call.astream()

    def add(self, delta: StreamDelta) -> None:
        self.text.append(delta.text)
        self.num_output_tokens += len(delta.token_ids)
        if self.logprobs is not None:
            self._fresh = self.logprobs.add(delta.token_ids, delta.logprobs or [])
        if delta.finished:
            self.finish_reason = delta.finish_reason

    def answer(self) -> CompletionChoice:
        return self.choice()

    def choice(self, text: str | None = None, finish_reason: str | None = None
               ) -> CompletionChoice:
        """This prompt's choice: the whole text, or one chunk's ``text``."""
        if text is None:
            text, finish_reason = "".join(self.text), self.finish_reason or "stop"
            logprobs = self.logprobs.whole if self.logprobs is not None else None
        else:
            logprobs = self._fresh
        return CompletionChoice(index=self.index, text=text, finish_reason=finish_reason,
                                logprobs=logprobs)

    def events_of(self, delta: StreamDelta) -> Iterable[Event]:
        if delta.text or delta.finished or (self._fresh and self._fresh.tokens):
            reason = (delta.finish_reason or "stop") if delta.finished else None
            yield self._completion([self.choice(delta.text, reason)])

    @property
    def num_cached_tokens(self) -> int:  # type: ignore[override]
        return self.call.num_cached_tokens

    def _completion(self, choices: list[CompletionChoice]) -> Completion:
        return Completion(id=self.response_id, created=self.created, model=self.model,
                          choices=choices)
