"""One ChatAgentRT call: messages + options → engine request → AIMessage / chunks.

:func:`prepare_call` renders and tokenizes the prompt and builds the ``SamplingParams``
(with the grammar processor when tools or a response format are bound); :func:`run_deltas` /
:func:`arun_deltas` run it — as a fresh engine request, or, inside :func:`agentrt.session.agent_run`
(``agentrt.Executor``), as the next call of that run's session, which keeps the request's KV
and appends only what the new prompt adds; :class:`Progress` turns the stream deltas into
LangChain chunks, or one message, through one :class:`~langchain_agentrt.tool_calls.ToolCallStream`.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGenerationChunk
from langchain_core.utils.function_calling import convert_to_openai_tool

from agentrt import SamplingParams
from agentrt.session import Session, current_scope
from langchain_agentrt.grammar import normalize_tool_choice, output_structural_tag, response_schema
from langchain_agentrt.messages import render_prompt
from langchain_agentrt.tool_calls import StreamPiece, ToolCallStream

if TYPE_CHECKING:
    from agentrt import Engine, StreamDelta
    from langchain_agentrt.chat_models import ChatAgentRT

__all__ = ["Call", "Progress", "arun_deltas", "prepare_call", "run_deltas"]

_SAMPLING = ("temperature", "max_tokens", "top_p", "top_k", "seed")
_BINDINGS = ("tools", "tool_choice", "parallel_tool_calls", "response_format")
_IGNORED = ("stream", "strict")  # strict: constrained decoding is always strict
_KNOWN = frozenset(_SAMPLING + _BINDINGS + _IGNORED + ("timeout", "model"))


@dataclass
class Call:
    """Everything one engine request needs."""

    engine: Engine
    prompt_ids: list[int]
    params: SamplingParams
    model_name: str
    timeout: float | None = None
    request_id: str = field(default_factory=lambda: f"lc-{uuid.uuid4().hex[:16]}")
    session: Session | None = None
    """The agent-run session serving this call (None: a request of its own)."""
    hook: Any = None
    """The run's engine hook for this call (partial tool execution), closed when it ends."""

    @contextmanager
    def deadline(self) -> Iterator[None]:
        """Abort the request after ``timeout`` seconds and raise ``TimeoutError``."""
        if self.timeout is None:
            yield
            return
        fired = threading.Event()

        def expire() -> None:
            fired.set()
            session = self.session
            self.engine.abort(session.request_id or "" if session else self.request_id)

        timer = threading.Timer(self.timeout, expire)
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
        if fired.is_set():
            raise TimeoutError(f"the call took longer than timeout={self.timeout}s; aborted")


def prepare_call(model: ChatAgentRT, engine: Engine, messages: list[BaseMessage],
                 stop: list[str] | None, kwargs: dict[str, Any]) -> Call:
    """Render, tokenize and parameterize one call (``kwargs``: per-call options, bindings)."""
    _check_kwargs(model, kwargs)
    tools = [convert_to_openai_tool(t) for t in kwargs.get("tools") or ()]
    choice = normalize_tool_choice(kwargs.get("tool_choice"),
                                   [t["function"]["name"] for t in tools])
    response_format = kwargs.get("response_format")
    prompt = render_prompt(engine.tokenizer, messages, tools,
                           system_note=_format_note(response_format))
    prompt_ids = engine.tokenizer.encode(prompt, add_special_tokens=False)
    processor = None
    if model.constrained:
        tag = output_structural_tag(tools, choice, response_format,
                                    parallel_tool_calls=bool(kwargs.get("parallel_tool_calls")))
        processor = _grammar_processor(engine, tag) if tag is not None else None
    scope = current_scope()
    if processor is None and model.constrained and scope is not None and scope.grammar \
            and not tools and response_format is None:
        processor = _ebnf_processor(engine, scope.grammar)  # e.g. the ReAct format
    options = {k: kwargs.get(k, getattr(model, k)) for k in _SAMPLING}
    if options["max_tokens"] is None:
        del options["max_tokens"]
    stops = stop if stop is not None else model.stop
    params = SamplingParams(**options, stop=tuple(stops or ()), logits_processor=processor)
    return Call(engine, prompt_ids, params, model.resolved_model_name,
                timeout=kwargs.get("timeout", model.timeout))


def run_deltas(call: Call) -> Iterator[StreamDelta]:
    """The stream deltas of ``call`` (closing early aborts it)."""
    with call.deadline():
        try:
            yield from _start(call, is_async=False)
        finally:
            _close_hook(call)


async def arun_deltas(call: Call) -> AsyncIterator[StreamDelta]:
    """Async twin of :func:`run_deltas`."""
    with call.deadline():
        try:
            async for delta in _start(call, is_async=True):
                yield delta
        finally:
            _close_hook(call)


def _close_hook(call: Call) -> None:
    if call.hook is not None:
        call.hook.close()


def _start(call: Call, *, is_async: bool) -> Any:
    scope = current_scope()
    if scope is None:
        start = call.engine.astream if is_async else call.engine.stream
        return start(call.prompt_ids, call.params, request_id=call.request_id)
    call.session = scope.session_for(call.engine, call.prompt_ids)
    start = call.session.astream if is_async else call.session.stream
    if scope.hook_factory is None:
        return start(call.prompt_ids, call.params)
    call.hook = scope.hook_factory(call.engine.tokenizer)
    return start(call.prompt_ids, call.params, hook=call.hook)


class Progress:
    """Accumulates one call's deltas into LangChain chunks or one final message."""

    def __init__(self, call: Call) -> None:
        self.call = call
        self.parser = ToolCallStream()
        self.content: list[str] = []
        self.num_output_tokens = 0
        self.finish_reason: str | None = None

    def feed(self, delta: StreamDelta) -> StreamPiece:
        """Count the delta's tokens and parse its text (the last delta closes the parser)."""
        self.num_output_tokens += len(delta.token_ids)
        piece = self.parser.feed(delta.text)
        if delta.finished:
            self.finish_reason = delta.finish_reason
            tail = self.parser.close()
            piece.content += tail.content
            piece.tool_call_chunks += tail.tool_call_chunks
        self.content.append(piece.content)
        return piece

    def chunk(self, delta: StreamDelta) -> ChatGenerationChunk | None:
        """The LangChain chunk for ``delta`` (None when it completed nothing)."""
        piece = self.feed(delta)
        if not delta.finished:
            if not piece:
                return None
            return ChatGenerationChunk(message=AIMessageChunk(
                content=piece.content, tool_call_chunks=piece.tool_call_chunks))
        message = AIMessageChunk(content=piece.content, tool_call_chunks=piece.tool_call_chunks,
                                 usage_metadata=self.usage(), response_metadata=self.metadata(),
                                 chunk_position="last")
        return ChatGenerationChunk(message=message,
                                   generation_info={"finish_reason": self._finish_reason()})

    def message(self) -> AIMessage:
        """The whole answer (after the last delta)."""
        return AIMessage(content="".join(self.content), tool_calls=self.parser.tool_calls,
                         invalid_tool_calls=self.parser.invalid_tool_calls,
                         usage_metadata=self.usage(), response_metadata=self.metadata())

    def usage(self) -> UsageMetadata:
        num_input = len(self.call.prompt_ids)
        return UsageMetadata(input_tokens=num_input, output_tokens=self.num_output_tokens,
                             total_tokens=num_input + self.num_output_tokens)

    def metadata(self) -> dict[str, Any]:
        return {"model_name": self.call.model_name, "model_provider": "agentrt",
                "finish_reason": self._finish_reason()}

    def _finish_reason(self) -> str | None:
        if self.parser.tool_calls and self.finish_reason == "stop":
            return "tool_calls"
        return self.finish_reason


def _check_kwargs(model: ChatAgentRT, kwargs: dict[str, Any]) -> None:
    unknown = sorted(set(kwargs) - _KNOWN)
    if unknown:
        raise ValueError(f"ChatAgentRT got unsupported arguments {unknown}; it takes "
                         f"{sorted(_KNOWN)}")
    requested = kwargs.get("model")
    if requested is not None and requested != model.resolved_model_name:
        raise ValueError(f"ChatAgentRT runs {model.resolved_model_name!r} and cannot switch "
                         f"to model={requested!r} per call; create another ChatAgentRT")


def _format_note(response_format: dict[str, Any] | None) -> str | None:
    if response_format is None:
        return None
    schema = response_schema(response_format)
    if schema is None:
        return "Answer with a JSON object."
    return "Answer with a JSON object that matches this JSON schema:\n" + json.dumps(schema)


def _ebnf_processor(engine: Engine, grammar: str) -> Any:
    from agentrt.constrained import get_grammar_backend

    return get_grammar_backend(engine).ebnf(grammar)


def _grammar_processor(engine: Engine, tag: dict[str, Any]) -> Any:
    try:
        from agentrt.constrained import get_grammar_backend
    except ImportError as exc:
        raise ImportError("constrained tool calls need xgrammar: pip install 'agentrt[langchain]'"
                          ", or pass ChatAgentRT(constrained=False)") from exc
    try:
        return get_grammar_backend(engine).structural_tag(tag)
    except RuntimeError as exc:  # xgrammar's errors on schemas it cannot compile
        raise ValueError(f"cannot build the output grammar for these tools / format: {exc}") \
            from exc
