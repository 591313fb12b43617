"""The OpenAI wire format: pydantic models of the requests agentrt serves and its answers.

Requests accept what OpenAI's clients send (unknown fields that cannot change the answer are
ignored, as OpenAI-compatible servers do) and reject, with a 400 naming the field, values
agentrt cannot honour: ``n`` outside 1-16, ``best_of`` above 1, the legacy endpoint's
``logprobs`` (chat serves ``logprobs`` / ``top_logprobs`` for plain answers), ``echo``,
penalties, ``logit_bias``, vLLM's and SGLang's sampling extras and OpenAI's ``functions``
(:mod:`agentrt.server.neutral`), a ``seed`` outside the signed 64-bit range (vLLM's rule),
more or longer ``stop`` strings than :mod:`agentrt.server.limits` allows, text that is not
valid Unicode (a lone surrogate escape, anywhere in the body), and malformed message shapes
(a content part without a ``type`` or with non-text ``text``, an assistant ``tool_calls``
entry without a ``function`` name or with ``arguments`` neither a JSON string nor an
object). The endpoints check ``max_tokens`` against the context once the prompt is tokenized
(:func:`agentrt.server.errors.check_context`). Two defaults differ from OpenAI's, on purpose
for a local deterministic runtime: ``temperature`` defaults to 0 (greedy), and
``parallel_tool_calls`` to false (small models tend to repeat a call). Without
``max_tokens`` a chat answer may run to the end of the context (OpenAI's rule); a legacy
completion stops after 16 tokens (also OpenAI's rule).

Answers are plain models dumped as they are, except the streamed ``delta`` objects, which
leave out unset fields exactly as OpenAI's chunks do.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_serializer

from agentrt.chat.grammar import check_tool_names
from agentrt.core.sampling_params import check_seed
from agentrt.server.choices import MAX_CHOICES
from agentrt.server.limits import check_stop, check_text
from agentrt.server.logprobs import ChoiceLogprobs, CompletionLogprobs, TokenLogprob, TopLogprob
from agentrt.server.neutral import ChatExtras, EngineExtras, check_neutral
from agentrt.server.sampling_extras import VLLMSampling

__all__ = [
    "AssistantMessage",
    "ChatChoice",
    "ChatCompletion",
    "ChatCompletionChunk",
    "ChatCompletionRequest",
    "ChatMessage",
    "ChoiceLogprobs",
    "ChunkChoice",
    "Completion",
    "CompletionChoice",
    "CompletionRequest",
    "ContentPart",
    "DeltaMessage",
    "FunctionCall",
    "FunctionSpec",
    "MessageFunctionCall",
    "MessageToolCall",
    "ModelCard",
    "ModelList",
    "PromptTokensDetails",
    "StreamOptions",
    "TokenLogprob",
    "ToolCall",
    "ToolSpec",
    "TopLogprob",
    "Usage",
]

# --- requests ----------------------------------------------------------------------------------
class StreamOptions(BaseModel):
    include_usage: bool = False
    """Send a last chunk with ``usage`` (and no choices) before ``[DONE]``."""
    continuous_usage_stats: bool = False
    """vLLM's usage in every chunk: refused (only the last chunk has it)."""

    @field_validator("continuous_usage_stats")
    @classmethod
    def _supported(cls, value: Any, info: Any) -> Any:
        return check_neutral(info.field_name, value)


class _SamplingRequest(VLLMSampling, EngineExtras):
    """Fields the chat and the legacy completion requests share."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    """A name from ``/v1/models`` (case-insensitive, an ``org/`` prefix is ignored);
    omitted = the served model."""
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=-1)
    """vLLM's extension: keep the k likeliest tokens (0 or -1 = off, as vLLM and SGLang
    write it)."""
    seed: int | None = None
    """Seed of the sampler (signed 64-bit); with ``temperature`` > 0, the same seed and
    request give the same answer."""
    stop: str | list[str] | None = None
    n: int = Field(1, ge=1, le=MAX_CHOICES)
    """How many choices to generate for the prompt (each its own answer, ``index`` 0..n-1;
    :mod:`agentrt.server.choices`)."""
    logprobs: Any = None
    top_logprobs: int | None = None
    logit_bias: dict[str, float] | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    user: str | None = None

    @field_validator("logit_bias", "presence_penalty", "frequency_penalty")
    @classmethod
    def _supported(cls, value: Any, info: Any) -> Any:
        return check_neutral(info.field_name, value)

    @field_validator("logprobs", "top_logprobs")
    @classmethod
    def _logprobs_supported(cls, value: Any, info: Any) -> Any:
        return check_neutral(info.field_name, value)

    @field_validator("seed")
    @classmethod
    def _seed_in_range(cls, value: int | None) -> int | None:
        check_seed(value)
        return value

    @field_validator("stop")
    @classmethod
    def _few_stops(cls, value: str | list[str] | None) -> str | list[str] | None:
        return check_stop(value)

    @field_validator("*", mode="before")
    @classmethod
    def _valid_text(cls, value: Any, info: Any) -> Any:
        return check_text(value, info.field_name)

    @field_validator("temperature", "top_p", "top_k", "n", mode="before")
    @classmethod
    def _null_is_default(cls, value: Any, info: Any) -> Any:
        return cls.model_fields[info.field_name].default if value is None else value

    @field_validator("top_k")
    @classmethod
    def _minus_one_is_off(cls, value: int) -> int:
        return max(value, 0)

    @property
    def stops(self) -> tuple[str, ...]:
        """``stop`` as a tuple of non-empty strings."""
        stop = [self.stop] if isinstance(self.stop, str) else self.stop or []
        return tuple(s for s in stop if s)

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


class ContentPart(BaseModel):
    """One part of a message's ``content`` list (only ``text`` parts reach the model)."""

    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None


class MessageFunctionCall(BaseModel):
    """The function of an earlier assistant tool call."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1)
    arguments: str | dict[str, Any] | None = None
    """A JSON object as a string (OpenAI's form) or as an object; None = no arguments."""


class MessageToolCall(BaseModel):
    """One entry of an assistant message's ``tool_calls``."""

    model_config = ConfigDict(extra="allow")

    id: str | None = None
    type: Literal["function"] = "function"
    function: MessageFunctionCall


class ChatMessage(BaseModel):
    """One message of the conversation, passed on to :func:`agentrt.chat.prepare_chat`."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[MessageToolCall] | None = None
    tool_call_id: str | None = None


class FunctionSpec(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    """The arguments' JSON schema; decoding is constrained to it."""


class ToolSpec(BaseModel):
    """A tool the model may call (OpenAI's ``{"type": "function", "function": {...}}``)."""

    type: Literal["function"] = "function"
    function: FunctionSpec


class ChatCompletionRequest(_SamplingRequest, ChatExtras):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[ToolSpec] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    """OpenAI's newer name of ``max_tokens``; wins when both are given."""
    logprobs: bool | None = None
    """Return each answer token's log-probability (``choices[].logprobs.content``)."""
    top_logprobs: int | None = Field(None, ge=0, le=20)
    """With ``logprobs``: also this many likeliest alternatives per token (0-20)."""

    @field_validator("logprobs", "top_logprobs")
    @classmethod
    def _logprobs_supported(cls, value: Any, info: Any) -> Any:
        return value  # NOTE: chat serves them (the legacy endpoint refuses its own form)

    @field_validator("tools")
    @classmethod
    def _named_once(cls, value: list[ToolSpec] | None) -> list[ToolSpec] | None:
        check_tool_names([tool.function.name for tool in value or ()])
        return value

    @property
    def num_logprobs(self) -> int | None:
        """The engine's ``SamplingParams.logprobs`` (alternatives per token), None = none;
        ``top_logprobs`` without ``logprobs`` is a ``ValueError``, as OpenAI answers it."""
        if not self.logprobs:
            if self.top_logprobs:
                raise ValueError("top_logprobs needs logprobs: true")
            return None
        return self.top_logprobs or 0
    chat_template_kwargs: dict[str, Any] | None = None
    """vLLM's and SGLang's extension: variables the chat template reads (Qwen3's
    ``{"enable_thinking": false}``); apply_chat_template's own arguments are a 400."""

    @property
    def output_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    @property
    def output_format(self) -> dict[str, Any] | None:
        """``response_format`` for the chat layer (``{"type": "text"}`` = None)."""
        fmt = self.response_format
        return None if not fmt or fmt.get("type") == "text" else fmt


class CompletionRequest(_SamplingRequest):
    """``POST /v1/completions`` (the legacy text completion API)."""

    prompt: str | list[str] | list[int] | list[list[int]] = Field(min_length=1)
    max_tokens: int = Field(16, ge=1)
    best_of: int | None = None
    echo: bool = False
    suffix: str | None = None
    logprobs: int | None = Field(None, ge=0, le=20)
    """The likeliest alternatives to return per token (0-20; ``choices[].logprobs``)."""

    @field_validator("logprobs", "top_logprobs")
    @classmethod
    def _logprobs_supported(cls, value: Any, info: Any) -> Any:
        if info.field_name == "top_logprobs":  # NOTE: chat's field; here logprobs is the int
            return check_neutral(info.field_name, value)
        return value

    @field_validator("best_of", "echo", "suffix")
    @classmethod
    def _supported_here(cls, value: Any, info: Any) -> Any:
        return check_neutral(info.field_name, value)

    @property
    def prompts(self) -> list[str | list[int]]:
        """The prompts of the request: one text or token-id list each."""
        p = self.prompt
        if isinstance(p, str) or isinstance(p[0], int):
            return [p]  # type: ignore[list-item]
        return list(p)  # type: ignore[arg-type]


# --- answers ------------------------------------------------------------------------------------
class _Sparse(BaseModel):
    """Dumped without its unset (None) fields, as OpenAI's stream deltas are."""

    @model_serializer(mode="wrap")
    def _drop_none(self, handler: Any) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None}


class PromptTokensDetails(BaseModel):
    cached_tokens: int
    """Of the prompt's tokens, those served from the prefix cache (not computed)."""


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails

    @classmethod
    def of(cls, num_prompt_tokens: int, num_output_tokens: int, num_cached_tokens: int
           ) -> Usage:
        return cls(prompt_tokens=num_prompt_tokens, completion_tokens=num_output_tokens,
                   total_tokens=num_prompt_tokens + num_output_tokens,
                   prompt_tokens_details=PromptTokensDetails(cached_tokens=num_cached_tokens))


class FunctionCall(_Sparse):
    name: str | None = None
    arguments: str | None = None
    """The arguments as a JSON string (a fragment of it in a stream delta)."""


class ToolCall(_Sparse):
    index: int | None = None
    """Only in stream deltas: which call of the message the fragment belongs to."""
    id: str | None = None
    type: Literal["function"] | None = None
    function: FunctionCall


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    reasoning_content: str | None = None
    """The model's reasoning (its ``<think>`` block); left out when there is none."""
    tool_calls: list[ToolCall] | None = None

    @model_serializer(mode="wrap")
    def _drop_no_reasoning(self, handler: Any) -> dict[str, Any]:
        out = handler(self)
        if out.get("reasoning_content") is None:
            out.pop("reasoning_content", None)
        return out


class ChatChoice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: str | None
    logprobs: ChoiceLogprobs | None = None


def _created() -> int:
    return int(time.time())


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=_created)
    model: str
    choices: list[ChatChoice]
    usage: Usage


class DeltaMessage(_Sparse):
    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None


class ChunkChoice(BaseModel):
    index: int = 0
    delta: DeltaMessage
    finish_reason: str | None = None
    logprobs: ChoiceLogprobs | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None


class CompletionChoice(BaseModel):
    index: int = 0
    text: str
    finish_reason: str | None = None
    logprobs: CompletionLogprobs | None = None


class Completion(BaseModel):
    """A whole answer, or (``usage`` None but in the last) one chunk of a streamed one."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(default_factory=_created)
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=_created)
    owned_by: str = "agentrt"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
