"""``POST /v1/chat/completions``: OpenAI chat requests on the shared chat layer.

:mod:`agentrt.chat` does the work every front end shares — rendering the messages and tools
with the model's template, grammar-constraining tool calls and ``response_format``, parsing
``<tool_call>`` blocks out of the stream. This module only maps the wire format: a request
to :func:`~agentrt.chat.prepare_chat` options on the server's backend, and a
:class:`~agentrt.chat.ChatProgress` to one ``chat.completion`` or to ``chat.completion.chunk``
events (a :class:`~agentrt.server.run.Run`), tool calls streamed as OpenAI's ``tool_calls``
deltas (id, type and name in a call's first delta, then fragments of the arguments JSON).

A whole answer and a streamed one describe the same calls: the whole message's
``tool_calls`` are the stream's deltas merged by ``index`` (ids, names, argument strings), and
both end with the same ``finish_reason``. So a call the chat layer finds invalid is in both,
as the model wrote it, never dropped from one and never shown with made-up ``{}`` arguments —
what OpenAI does, whose ``arguments`` are "not always valid JSON" and are for the client to
validate:

- a call cut off by ``max_tokens``: its arguments as far as they were written (a prefix of the
  JSON, which does not parse), ``finish_reason: "length"`` (OpenAI's, and vLLM's
  non-streaming answer; never ``"tool_calls"``); a call cut off before its name is
  complete has sent no delta, and is in neither;
- a call that ended but is not valid (arguments that are not a JSON object): its arguments
  as written (``"[12, 7]"``), ``finish_reason: "stop"`` — ``"tool_calls"`` only when the
  engine stopped after at least one valid call (:attr:`agentrt.chat.ChatProgress.finish_reason`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterable
from dataclasses import replace
from functools import partial
from typing import Any

import anyio
from fastapi import APIRouter, Request

from agentrt.chat import ChatCall, ChatProgress, StreamPiece, arun_deltas, prepare_chat
from agentrt.core.outputs import StreamDelta
from agentrt.server.chat_sessions import SessionChatRequest, attach_session, end_session
from agentrt.server.choices import Choices, check_choices, nth_seed, stream_choices
from agentrt.server.errors import APIError, check_context
from agentrt.server.protocol import (
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChoiceLogprobs,
    ChunkChoice,
    DeltaMessage,
    FunctionCall,
    TokenLogprob,
    ToolCall,
    Usage,
)
from agentrt.server.run import Event, Run
from agentrt.server.sampling_extras import with_extras
from agentrt.server.state import ServerState, State
from agentrt.server.streaming import cancel_on_disconnect, start_stream

__all__ = ["ChatRun", "router"]

ENDPOINT = "/v1/chat/completions"
router = APIRouter()


@router.post(ENDPOINT, response_model=None)
async def create_chat_completion(body: SessionChatRequest, request: Request,
                                 state: State) -> Any:
    """Answer a conversation, whole or streamed (``stream: true``); with ``session_id``, as
    the next request of that agent's session (:mod:`agentrt.server.chat_sessions`)."""
    started = time.monotonic()
    model = state.resolve_model(body.model)
    check_choices(state, body.n)
    call = await _prepare(state, body)
    attach_session(state, body, call)
    created = int(time.time())
    runs = [ChatRun(_nth(call, i, body.n), model, state, started, index=i,
                    response_id=call.request_id, created=created,
                    session_id=body.session_id) for i in range(body.n)]
    choices = Choices(state, runs, call.prompt_ids, call.request_id)
    counted = partial(state.metrics.count, ENDPOINT)
    if body.stream:
        def usage() -> Iterable[Event]:
            if body.include_usage:
                yield ChatCompletionChunk(id=call.request_id, created=created, model=model,
                                          choices=[], usage=_usage(choices))

        return await start_stream(stream_choices(choices, usage), on_end=counted)
    return await cancel_on_disconnect(request, _answer(choices, created, model),
                                      on_end=counted)


def _nth(call: ChatCall, index: int, n: int) -> ChatCall:
    """The chat call of choice ``index`` of ``n`` (its own engine request id and seed)."""
    if n == 1:
        return call
    return replace(call, request_id=f"{call.request_id}-{index}",
                   params=nth_seed(call.params, index))


async def _answer(choices: Choices, created: int, model: str) -> ChatCompletion:
    answers = await choices.complete()
    return ChatCompletion(id=choices.request_id, created=created, model=model,
                          choices=answers, usage=_usage(choices))


def _usage(choices: Choices) -> Usage:
    return Usage.of(choices.num_prompt_tokens, choices.num_output_tokens,
                    choices.num_cached_tokens)


async def _prepare(state: ServerState, body: SessionChatRequest) -> ChatCall:
    """Render, tokenize and compile the grammar in a worker thread (milliseconds; a grammar
    up to seconds); a 400 for input the chat layer rejects or a ``max_tokens`` the context
    cannot hold."""
    messages = [m.model_dump(exclude_none=True) for m in body.messages]
    tools = [t.model_dump(exclude_none=True) for t in body.tools or ()]
    try:
        logprobs = body.num_logprobs
        prepare = partial(
            prepare_chat, state.backend, messages, tools=tools, tool_choice=body.tool_choice,
            response_format=body.output_format,
            parallel_tool_calls=bool(body.parallel_tool_calls), stop=body.stops,
            temperature=body.temperature, top_p=body.top_p, top_k=body.top_k, seed=body.seed,
            max_tokens=body.output_limit or state.max_model_len,
            chat_template_kwargs=body.chat_template_kwargs, logprobs=logprobs,
            request_id=f"chatcmpl-{uuid.uuid4().hex[:24]}")
        call = await anyio.to_thread.run_sync(partial(_prepared, state, prepare))
        call = replace(call, params=with_extras(call.params, body, state))
    except ValueError as exc:
        raise APIError.bad_request(exc) from exc
    if body.output_limit is not None:
        param = "max_completion_tokens" if body.max_completion_tokens else "max_tokens"
        check_context(state.max_model_len, len(call.prompt_ids), body.output_limit,
                      param=param, chat=True)
    return call


def _prepared(state: ServerState, prepare: Any) -> ChatCall:
    """``prepare()``'s call, its grammar compiled (see :meth:`ServerState.compile_grammar`)."""
    call = prepare()
    state.compile_grammar(call.params)
    return call


class ChatRun(Run):
    """One chat completion in flight: the chat call, its progress, its OpenAI answers."""

    def __init__(self, call: ChatCall, model: str, state: ServerState, started: float, *,
                 index: int = 0, response_id: str | None = None,
                 created: int | None = None, session_id: str | None = None) -> None:
        super().__init__(state, started)
        self.call = call
        self.session_id = session_id
        """The agent session this request continues (``session_id``), if any."""
        self.model = model
        self.index = index
        """Which choice of the answer this is (OpenAI's ``n``)."""
        self.response_id = response_id or call.request_id
        """The answer's ``id`` (its choices share it; each call has its own request id)."""
        self.progress = ChatProgress(call)
        self.created = int(time.time()) if created is None else created
        self._piece: StreamPiece | None = None
        self._calls: dict[int, ToolCall] = {}
        """The tool calls so far: the stream's deltas merged by index."""
        self._num_cached_tokens = 0
        self._sent_logprobs = 0
        """Of the progress's logprobs entries, those already in a streamed chunk."""

    @property
    def num_prompt_tokens(self) -> int:
        return self.progress.num_prompt_tokens

    def source(self) -> AsyncIterator[StreamDelta]:
        return arun_deltas(self.call)

    def on_end(self) -> None:
        end_session(self.state, self.session_id, self.call)

    def add(self, delta: StreamDelta) -> None:
        self._num_cached_tokens = delta.num_cached_tokens  # NOTE: every delta carries it
        self._piece = self.progress.feed(delta)
        for chunk in self._piece.tool_call_chunks:
            self._merge(chunk)

    def _merge(self, chunk: dict[str, Any]) -> None:
        index = chunk["index"]
        if index not in self._calls:  # NOTE: a call's first chunk carries its id
            self._calls[index] = ToolCall(id=chunk["id"], type="function",
                                          function=FunctionCall(arguments=""))
        function = self._calls[index].function
        function.name = function.name or chunk["name"]
        function.arguments = (function.arguments or "") + (chunk["args"] or "")

    def answer(self) -> ChatChoice:
        """This choice of the whole answer."""
        return ChatChoice(index=self.index, message=self.message(),
                          finish_reason=self.finish_reason,
                          logprobs=self._choice_logprobs(self.progress.logprobs))

    def events_of(self, delta: StreamDelta) -> Iterable[Event]:
        if self._piece is None:
            return
        if not self._started_stream:  # NOTE: after the first delta, so a rejection is a 400
            self._started_stream = True
            yield self.chunk(DeltaMessage(role="assistant", content=""), logprobs=False)
        if self._piece:
            yield self.chunk(_delta(self._piece))

    _started_stream = False

    def final_events(self) -> Iterable[Event]:
        yield self.chunk(DeltaMessage(), self.finish_reason)  # with tokens not yet sent

    def chunk(self, delta: DeltaMessage, finish_reason: str | None = None, *,
              logprobs: bool = True) -> ChatCompletionChunk:
        """One streamed chunk; with ``logprobs`` it carries the tokens not yet sent."""
        fresh = self.progress.logprobs[self._sent_logprobs:] if logprobs else []
        self._sent_logprobs += len(fresh)
        choice = ChunkChoice(index=self.index, delta=delta, finish_reason=finish_reason,
                             logprobs=self._choice_logprobs(fresh) if fresh else None)
        return ChatCompletionChunk(id=self.response_id, created=self.created,
                                   model=self.model, choices=[choice])

    def message(self) -> AssistantMessage:
        calls = [self._calls[i] for i in sorted(self._calls)]
        content = self.progress.content
        return AssistantMessage(content=content if content or not calls else None,
                                reasoning_content=self.progress.reasoning_content or None,
                                tool_calls=calls or None)

    @property
    def finish_reason(self) -> str:
        return self.progress.finish_reason or "stop"

    def _choice_logprobs(self, tokens: list[dict[str, Any]]) -> ChoiceLogprobs | None:
        if self.call.params.logprobs is None:
            return None
        return ChoiceLogprobs(content=[TokenLogprob.model_validate(t) for t in tokens])

    @property
    def num_output_tokens(self) -> int:  # type: ignore[override]
        return self.progress.num_output_tokens

    @property
    def num_cached_tokens(self) -> int:  # type: ignore[override]
        return self._num_cached_tokens


def _delta(piece: StreamPiece) -> DeltaMessage:
    calls = [_tool_call_delta(c) for c in piece.tool_call_chunks]
    return DeltaMessage(content=piece.content or None, tool_calls=calls or None,
                        reasoning_content=piece.reasoning_content or None)


def _tool_call_delta(chunk: dict[str, Any]) -> ToolCall:
    """A chat-layer tool-call chunk as an OpenAI delta (the first one carries id and name)."""
    is_first = chunk["id"] is not None
    return ToolCall(index=chunk["index"], id=chunk["id"], type="function" if is_first else None,
                    function=FunctionCall(name=chunk["name"], arguments=chunk["args"] or ""))
