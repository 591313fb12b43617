"""OpenAI's ``n``: several choices of one prompt, as one answer (whole or streamed).

Each choice is a :class:`~agentrt.server.run.Run` of its own (so each is parsed on its own:
its text, its tool calls, its ``finish_reason``), with ``index`` 0..n-1. The prompt is
prefilled once first, by a one-token call whose KV goes to the prefix cache (SGLang's way
for ``n``): the n calls, then submitted together, find it there instead of each computing it.
``usage`` counts the prompt once and every choice's tokens; its ``cached_tokens`` are those
the cache held before the request. Streamed, the choices' chunks interleave as they come,
each naming its choice's ``index``. With a ``seed``, choice i samples with ``seed + i``
(vLLM's rule), so the choices differ yet repeat; at temperature 0 all n are the same.

A request asks for at most :data:`MAX_CHOICES`, and, on the local engine, for no more than
it decodes at once (its max batch); above either it is a 400 naming ``n``.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from agentrt.backends.call import Call
from agentrt.core.options import RequestOptions
from agentrt.core.sampling_params import SamplingParams
from agentrt.server.errors import APIError, rejected_as_400
from agentrt.server.streaming import DONE, sse

if TYPE_CHECKING:
    from agentrt.server.run import Event, Run
    from agentrt.server.state import ServerState

__all__ = ["MAX_CHOICES", "Choices", "check_choices", "complete_all", "nth_seed",
           "stream_choices"]

T = TypeVar("T")
MAX_CHOICES = 16
"""The most choices one request may ask for (``n``)."""


def check_choices(state: ServerState, n: int) -> None:
    """A 400 naming ``n`` when the local engine cannot decode ``n`` choices at once."""
    if state.engine is None:
        return
    max_batch = state.engine.config.max_num_seqs
    if n > max_batch:
        raise APIError(400, f"n={n} is more choices than this server decodes at once (its max "
                            f"batch is {max_batch}, agentrt serve --max-batch); ask for at "
                            f"most {max_batch}", param="n", code="invalid_value")


def nth_seed(params: SamplingParams, index: int) -> SamplingParams:
    """``params`` for choice ``index``: its seed moved by ``index`` (wrapping in 64 bits)."""
    if params.seed is None or index == 0:
        return params
    seed = (params.seed + index + 2**63) % 2**64 - 2**63
    return dataclasses.replace(params, seed=seed)


class Choices:
    """The ``n`` runs of one prompt (``runs[i]`` answers choice ``i``)."""

    def __init__(self, state: ServerState, runs: Sequence[Run], prompt_ids: Sequence[int],
                 request_id: str) -> None:
        self.state = state
        self.runs = list(runs)
        self.prompt_ids = list(prompt_ids)
        self.request_id = request_id
        self._cached: int | None = None
        """The prompt tokens the cache held, as the shared prefill found them."""
        for run in self.runs[1:]:
            run.counts_prompt = False  # NOTE: the metrics count the prompt once too

    async def share_prompt(self) -> None:
        """With several choices, prefill the prompt once into the prefix cache (a one-token
        call; a prompt the backend rejects is a 400 here)."""
        if len(self.runs) < 2 or self._cached is not None:
            return
        call = Call(self.state.backend, self.prompt_ids, SamplingParams(max_tokens=1),
                    options=RequestOptions(request_id=f"{self.request_id}-prompt"))
        async with aclosing(rejected_as_400(call.astream())) as deltas:
            async for _ in deltas:
                pass
        self._cached = call.num_cached_tokens

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_ids)

    @property
    def num_output_tokens(self) -> int:
        return sum(run.num_output_tokens for run in self.runs)

    @property
    def num_cached_tokens(self) -> int:
        return self._cached if self._cached is not None else self.runs[0].num_cached_tokens

    async def complete(self) -> list[Any]:
        """Every choice's whole answer, in ``index`` order."""
        await self.share_prompt()
        return await complete_all(self.runs)

    async def events(self) -> AsyncIterator[Event]:
        """The choices' events, interleaved as they come."""
        await self.share_prompt()
        async with aclosing(interleaved([run.choice_events() for run in self.runs])) as events:
            async for event in events:
                yield event


async def complete_all(runs: Sequence[Run | Choices]) -> list[Any]:
    """Run ``runs`` (runs, or the choices of several prompts) together; their answers in
    order. One failing (or the client leaving) cancels the others, which aborts their calls."""
    tasks = [asyncio.ensure_future(run.complete()) for run in runs]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()


async def stream_choices(choices: Choices, last: Callable[[], Iterable[Event]]
                         ) -> AsyncIterator[str]:
    """``choices`` as server-sent events, then ``last()``'s events (the usage), ``[DONE]``."""
    async with aclosing(choices.events()) as events:
        async for event in events:
            yield sse(event)
    for event in last():
        yield sse(event)
    yield DONE


_END = object()


async def interleaved(sources: Sequence[AsyncIterator[T]]) -> AsyncIterator[T]:
    """The items of ``sources`` as each comes. The first failure is raised here (the other
    sources closed); closing this closes every source."""
    if len(sources) == 1:
        async with aclosing(sources[0]) as only:  # type: ignore[type-var]
            async for item in only:
                yield item
        return
    queue: asyncio.Queue[tuple[Any, BaseException | None]] = asyncio.Queue()

    async def pump(source: AsyncIterator[T]) -> None:
        try:
            async with aclosing(source):  # type: ignore[type-var]
                async for item in source:
                    await queue.put((item, None))
        except Exception as exc:  # noqa: BLE001 - handed to the reader
            await queue.put((_END, exc))
            return
        await queue.put((_END, None))

    tasks = [asyncio.ensure_future(pump(source)) for source in sources]
    try:
        running = len(tasks)
        while running:
            item, error = await queue.get()
            if error is not None:
                raise error
            if item is _END:
                running -= 1
                continue
            yield item
    finally:
        for task in tasks:
            task.cancel()
        with anyio.CancelScope(shield=True):
            await asyncio.gather(*tasks, return_exceptions=True)
