"""``POST /v1/completions``: the legacy text completion API, straight onto the engine.

The prompt is raw text or token ids (no chat template), one or several; several prompts are
generated together (continuous batching) and answered as one choice each. A stream takes
one prompt.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from functools import partial
from typing import Any

import anyio
from fastapi import APIRouter, Request

from agentrt.core.sampling_params import SamplingParams
from agentrt.engine.outputs import StreamDelta
from agentrt.server.errors import APIError, check_context, rejected_as_400
from agentrt.server.protocol import Completion, CompletionChoice, CompletionRequest, Usage
from agentrt.server.state import ServerState, State
from agentrt.server.streaming import DONE, cancel_on_disconnect, sse, start_stream

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
    params = _params(body)
    encode = state.engine.core.encode
    prompts = await anyio.to_thread.run_sync(lambda: [encode(p) for p in body.prompts])
    response_id = f"cmpl-{uuid.uuid4().hex[:24]}"
    for ids in prompts:
        check_context(state.max_model_len, len(ids), body.max_tokens, param="max_tokens",
                      chat=False)
    runs = [CompletionRun(state, ids, params, f"{response_id}-{i}", started, index=i)
            for i, ids in enumerate(prompts)]
    counted = partial(state.metrics.count, ENDPOINT)
    if body.stream:
        events = runs[0].events(response_id, model, body.include_usage)
        return await start_stream(events, on_end=counted)
    return await cancel_on_disconnect(request, _complete(runs, response_id, model),
                                      on_end=counted)


def _params(body: CompletionRequest) -> SamplingParams:
    try:
        return SamplingParams(max_tokens=body.max_tokens, temperature=body.temperature,
                              top_p=body.top_p, top_k=body.top_k, seed=body.seed,
                              stop=body.stops)
    except ValueError as exc:
        raise APIError.bad_request(exc) from exc


async def _complete(runs: list[CompletionRun], response_id: str, model: str) -> Completion:
    tasks = [asyncio.ensure_future(run.complete()) for run in runs]
    try:
        await asyncio.gather(*tasks)
    finally:  # NOTE: one prompt rejected (or the client gone): abort the others too
        for task in tasks:
            task.cancel()
    usage = Usage.of(sum(len(r.prompt_ids) for r in runs),
                     sum(r.num_output_tokens for r in runs))
    return Completion(id=response_id, model=model, choices=[r.choice() for r in runs],
                      usage=usage)


class CompletionRun:
    """One prompt's generation in flight."""

    def __init__(self, state: ServerState, prompt_ids: list[int], params: SamplingParams,
                 request_id: str, started: float, index: int = 0) -> None:
        self.state = state
        self.prompt_ids = prompt_ids
        self.params = params
        self.request_id = request_id
        self.started = started
        self.index = index
        self.text: list[str] = []
        self.num_output_tokens = 0
        self.finish_reason: str | None = None

    async def deltas(self) -> AsyncIterator[StreamDelta]:
        """The engine's deltas (closing this aborts the request)."""
        source = self.state.engine.astream(self.prompt_ids, self.params,
                                           request_id=self.request_id)
        deltas = self.state.metrics.observe(rejected_as_400(source), len(self.prompt_ids),
                                            self.started)
        async with aclosing(deltas):
            async for delta in deltas:
                self.text.append(delta.text)
                self.num_output_tokens += len(delta.token_ids)
                if delta.finished:
                    self.finish_reason = delta.finish_reason
                yield delta

    async def complete(self) -> None:
        async with aclosing(self.deltas()) as deltas:
            async for _ in deltas:
                pass

    def choice(self, text: str | None = None, finish_reason: str | None = None
               ) -> CompletionChoice:
        """This prompt's choice: the whole text, or one chunk's ``text``."""
        if text is None:
            text, finish_reason = "".join(self.text), self.finish_reason or "stop"
        return CompletionChoice(index=self.index, text=text, finish_reason=finish_reason)

    async def events(self, response_id: str, model: str, include_usage: bool
                     ) -> AsyncIterator[str]:
        """The completion as server-sent ``text_completion`` chunks, ``[DONE]`` last."""
        created = int(time.time())
        async with aclosing(self.deltas()) as deltas:
            async for delta in deltas:
                if delta.text or delta.finished:
                    reason = (delta.finish_reason or "stop") if delta.finished else None
                    choice = self.choice(delta.text, reason)
                    yield sse(Completion(id=response_id, created=created, model=model,
                                         choices=[choice]))
        if include_usage:
            usage = Usage.of(len(self.prompt_ids), self.num_output_tokens)
            yield sse(Completion(id=response_id, created=created, model=model, choices=[],
                                 usage=usage))
        yield DONE
