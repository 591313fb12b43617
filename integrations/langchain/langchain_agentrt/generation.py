"""One ChatAgentRT call: LangChain messages + options → :mod:`agentrt.chat` → AIMessage / chunks.

:func:`prepare_call` checks LangChain's per-call options and hands the messages, tools and
sampling options to :func:`agentrt.chat.prepare_chat`; :func:`~agentrt.chat.run_deltas` runs
the call (through the agent run's session inside ``agentrt.Executor``); :class:`Progress`
turns the shared :class:`~agentrt.chat.ChatProgress` into LangChain chunks or one message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGenerationChunk
from langchain_core.utils.function_calling import convert_to_openai_tool

from agentrt.chat import ChatCall, ChatProgress, StreamPiece, arun_deltas, prepare_chat, run_deltas
from agentrt.core.fields import did_you_mean
from agentrt.session import Session
from langchain_agentrt.messages import to_openai_messages

if TYPE_CHECKING:
    from agentrt import StreamDelta
    from agentrt.backends import Backend
    from langchain_agentrt.chat_models import ChatAgentRT

__all__ = ["Progress", "arun_deltas", "check_kwargs", "prepare_call", "run_deltas"]

_SAMPLING = ("temperature", "max_tokens", "top_p", "top_k", "seed", "chat_template_kwargs")
_BINDINGS = ("tools", "tool_choice", "parallel_tool_calls", "response_format")
# strict: constrained decoding is always strict; stream_usage: the last chunk always has usage
_IGNORED = ("stream", "strict", "stream_usage")
_KNOWN = frozenset(_SAMPLING + _BINDINGS + _IGNORED + ("timeout", "model", "logprobs",
                                                        "top_logprobs", "session",
                                                        "max_completion_tokens"))


def prepare_call(model: ChatAgentRT, backend: Backend, messages: list[BaseMessage],
                 stop: list[str] | None, kwargs: dict[str, Any]) -> ChatCall:
    """Render, tokenize and parameterize one call (``kwargs``: per-call options, bindings)."""
    check_kwargs(model, kwargs)
    kwargs = _max_tokens_alias(kwargs)
    # NOTE: an option given as None is not given (the model's own value), as in OpenAI's API
    options = {k: getattr(model, k) if kwargs.get(k) is None else kwargs[k] for k in _SAMPLING}
    stops = stop if stop is not None else model.stop
    if isinstance(stops, str):  # NOTE: one stop string, as OpenAI's API takes it
        stops = [stops]
    options["logprobs"] = _num_logprobs(
        model.logprobs if kwargs.get("logprobs") is None else kwargs["logprobs"],
        model.top_logprobs if kwargs.get("top_logprobs") is None else kwargs["top_logprobs"])
    call = prepare_chat(
        backend, to_openai_messages(messages),
        tools=[convert_to_openai_tool(t) for t in kwargs.get("tools") or ()],
        tool_choice=kwargs.get("tool_choice"), response_format=kwargs.get("response_format"),
        parallel_tool_calls=bool(kwargs.get("parallel_tool_calls")),
        constrained=model.constrained, stop=stops or (),
        timeout=model.timeout if kwargs.get("timeout") is None else kwargs["timeout"], **options)
    call.session = _session(kwargs.get("session"))
    return call


def _session(session: Any) -> Session | None:
    """The call's ``session=`` (an :class:`agentrt.Session`; None: none), checked; a session
    serving another call (two parallel calls of one agent) leaves this one on its own."""
    if session is None:
        return None
    if not isinstance(session, Session):
        raise TypeError(f"session= takes an agentrt.Session, got {type(session).__name__}")
    return None if session.busy else session


class Progress(ChatProgress):
    """A call's progress as LangChain chunks or one final message."""

    def __init__(self, call: ChatCall, model_name: str) -> None:
        super().__init__(call)
        self.model_name = model_name
        self._sent = 0  # of self.logprobs, the entries a chunk carried

    def chunk(self, delta: StreamDelta) -> ChatGenerationChunk | None:
        """The LangChain chunk for ``delta`` (None when it completed nothing)."""
        piece: StreamPiece = self.feed(delta)
        chunks: Any = piece.tool_call_chunks
        extra = _reasoning(piece.reasoning_content)
        if not delta.finished:
            if not piece:
                return None
            return ChatGenerationChunk(message=AIMessageChunk(
                content=piece.content, tool_call_chunks=chunks, additional_kwargs=extra,
                response_metadata=self._fresh_logprobs()))
        metadata = {**self.metadata(), **self._fresh_logprobs()}
        message = AIMessageChunk(content=piece.content, tool_call_chunks=chunks,
                                 usage_metadata=self.usage(), response_metadata=metadata,
                                 chunk_position="last", additional_kwargs=extra)
        return ChatGenerationChunk(message=message,
                                   generation_info={"finish_reason": self.finish_reason})

    def message(self) -> AIMessage:
        """The whole answer (after the last delta)."""
        calls: Any = self.tool_calls
        invalid: Any = self.invalid_tool_calls
        metadata = self.metadata()
        if self.call.params.logprobs is not None:
            metadata["logprobs"] = {"content": self.logprobs}
        return AIMessage(content=self.content, tool_calls=calls, invalid_tool_calls=invalid,
                         usage_metadata=self.usage(), response_metadata=metadata,
                         additional_kwargs=_reasoning(self.reasoning_content))

    def _fresh_logprobs(self) -> dict[str, Any]:
        """``{"logprobs": {"content": [...]}}`` with the entries no chunk carried yet
        (LangChain's chunk merge concatenates them), or nothing without logprobs."""
        if self.call.params.logprobs is None:
            return {}
        fresh, self._sent = self.logprobs[self._sent:], len(self.logprobs)
        return {"logprobs": {"content": fresh}} if fresh else {}

    def usage(self) -> UsageMetadata:
        """The call's token counts; ``input_token_details["cache_read"]``: prompt tokens the
        backend did not compute (its prefix cache, the agent run's session), as
        ``ChatOpenAI`` reports OpenAI's ``cached_tokens``."""
        backend_call = self.call.call
        cached = backend_call.num_cached_tokens if backend_call is not None else 0
        return UsageMetadata(input_tokens=self.num_prompt_tokens,
                             output_tokens=self.num_output_tokens,
                             total_tokens=self.num_prompt_tokens + self.num_output_tokens,
                             input_token_details={
                                 "cache_read": min(cached, self.num_prompt_tokens)})

    def metadata(self) -> dict[str, Any]:
        """``response_metadata``: the same for the message and the last chunk, with the token
        usage in ``ChatOpenAI``'s form (also the ``llm_output`` that ``on_llm_end`` reads)."""
        return {"model_name": self.model_name, "model_provider": "agentrt",
                "finish_reason": self.finish_reason, "token_usage": {
                    "prompt_tokens": self.num_prompt_tokens,
                    "completion_tokens": self.num_output_tokens,
                    "total_tokens": self.num_prompt_tokens + self.num_output_tokens}}


def _num_logprobs(logprobs: bool | None, top: int | None) -> int | None:
    """``SamplingParams.logprobs`` for ChatOpenAI's ``logprobs`` / ``top_logprobs``."""
    if not logprobs:
        if top:
            raise ValueError("top_logprobs needs logprobs=True (as in ChatOpenAI)")
        return None
    return top or 0


def _max_tokens_alias(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with ``max_completion_tokens`` (``ChatOpenAI``'s name) as ``max_tokens``."""
    alias = kwargs.get("max_completion_tokens")
    if alias is None:
        return kwargs
    given = kwargs.get("max_tokens")
    if given is not None and given != alias:
        raise ValueError(f"ChatAgentRT got max_tokens={given} and max_completion_tokens="
                         f"{alias}: two names of one option; give one")
    return {**kwargs, "max_tokens": alias}


def _reasoning(text: str) -> dict[str, Any]:
    """``additional_kwargs`` carrying the model's reasoning (``<think>`` text), if any."""
    return {"reasoning_content": text} if text else {}


def check_kwargs(model: ChatAgentRT, kwargs: dict[str, Any]) -> None:
    """A ``ValueError`` for a per-call option ChatAgentRT does not take (with the closest
    one it does) or another model's name; needs no engine (it runs before the load)."""
    unknown = sorted(set(kwargs) - _KNOWN)
    if unknown:
        hints = ", ".join(f"{name!r}{did_you_mean(name, _KNOWN)}" for name in unknown)
        raise ValueError(f"ChatAgentRT got unsupported arguments {hints}; it takes "
                         f"{sorted(_KNOWN)}")
    requested = kwargs.get("model")
    if requested is not None and requested != model.resolved_model_name:
        raise ValueError(f"ChatAgentRT runs {model.resolved_model_name!r} and cannot switch "
                         f"to model={requested!r} per call; create another ChatAgentRT")
