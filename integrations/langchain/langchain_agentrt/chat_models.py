"""ChatAgentRT: a LangChain chat model on agentrt — its in-process engine by default, or any
backend (``backend=get_backend("sglang", url=...)``: an SGLang server or router).

Messages are rendered with the model's own chat template (:mod:`agentrt.chat.template`),
tokenized once and submitted as token ids, so ``usage_metadata`` counts exactly the
request's prompt and output tokens. Tool calls are written in the ``<tool_call>`` JSON form
and, when tools are bound, decoding is grammar-constrained (:mod:`agentrt.chat.grammar`,
xgrammar) so that every call names a bound tool with arguments matching its schema.
``invoke`` and ``stream`` share one output parser (:mod:`agentrt.chat.tool_calls`): a
streamed message adds up to the invoked one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any, Literal

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.language_models.base import LangSmithParams
from langchain_core.load import dumpd
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.runnables.config import ensure_config
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import AliasChoices, ConfigDict, Field

from agentrt import env
from agentrt.backends import Backend, as_backend
from agentrt.chat import ChatCall, normalize_tool_choice
from langchain_agentrt.generation import (
    Progress,
    arun_deltas,
    check_kwargs,
    prepare_call,
    run_deltas,
)
from langchain_agentrt.structured import structured_output

__all__ = ["ChatAgentRT"]


class ChatAgentRT(BaseChatModel):
    """Chat model on agentrt (default: a local engine on the embedded SmolLM2-135M-Instruct).

    >>> llm = ChatAgentRT(max_tokens=64)               # shares one engine per process
    >>> llm.invoke("What is the capital of France?").content
    >>> llm.bind_tools([get_weather], tool_choice="any").invoke("Weather in Paris?").tool_calls

    Pass ``backend=`` to run elsewhere (``get_backend("sglang", url=...)``) or ``engine=`` to
    use an engine you built; otherwise all instances with the same ``model`` and
    ``engine_kwargs`` share one engine, loaded on the first call.
    """

    # NOTE: extra="forbid": a misspelt option (``max_token=``) is an error, not ignored
    model_config = ConfigDict(populate_by_name=True, arbitrary_types_allowed=True,
                              protected_namespaces=(), extra="forbid")

    model_name: str | None = Field(default_factory=env.default_model, alias="model")
    """Local Hugging Face folder or ``.gguf`` file; default ``$AGENTRT_MODEL``, else (None)
    agentrt's embedded default model."""
    backend: Any = Field(default=None, exclude=True)
    """An :class:`agentrt.backends.Backend` to run on (e.g. an SGLang server); None = the
    local engine (``engine``, or the shared engine of ``model``)."""
    engine: Any = Field(default=None, exclude=True)
    """An :class:`agentrt.Engine` to run on; None = the shared engine of ``model``."""
    engine_kwargs: dict[str, Any] = Field(default_factory=dict)
    """``EngineConfig`` options for the shared engine (``dtype``, ``kv_cache_gb``, ...)."""
    temperature: float = 0.0
    """0 = greedy (deterministic)."""
    max_tokens: int | None = Field(
        default=None, validation_alias=AliasChoices("max_tokens", "max_completion_tokens"))
    """Most tokens to generate per call; None = the engine's default (256). Also given as
    ``max_completion_tokens`` (``ChatOpenAI``'s name), here and per call."""
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    """Seed of the sampling generator (used when ``temperature > 0``)."""
    stop: list[str] | None = Field(default=None, alias="stop_sequences")
    """Strings that end generation (not included in the output)."""
    timeout: float | None = None
    """Seconds one call may take; the request is then aborted and ``TimeoutError`` raised."""
    max_retries: int = 0
    """Accepted for LangChain's standard parameters; a local engine has nothing to retry."""
    api_key: Any = Field(default=None, exclude=True, repr=False)
    """Accepted for LangChain's standard parameters (and code written for hosted models);
    agentrt needs no key."""
    streaming: bool = False
    """Stream by default (``invoke`` goes through ``_stream``)."""
    constrained: bool = True
    """Grammar-constrain tool calls and structured output (needs ``xgrammar``)."""
    logprobs: bool | None = None
    """Return each answer token's log-probability in ``response_metadata["logprobs"]``
    (``{"content": [{"token", "logprob", "bytes", "top_logprobs"}]}``, as ``ChatOpenAI``);
    also per call. For plain answers: with tools bound, or a model that reasons first, a
    ``ValueError``."""
    top_logprobs: int | None = None
    """With ``logprobs``: also this many likeliest alternatives per token."""
    sessions: Any = Field(default=None, exclude=True)
    """An :class:`agentrt.SessionTable`: each LangGraph thread (``thread_id`` in
    ``config["configurable"]``, e.g. of ``create_react_agent`` or a graph built by hand)
    keeps its KV there between its calls, so a call prefills only what the thread added;
    None (default): no thread sessions. A call's own ``session=`` takes precedence."""
    chat_template_kwargs: dict[str, Any] | None = None
    """Variables the model's chat template reads, as vLLM's and SGLang's
    ``chat_template_kwargs`` (Qwen3: ``{"enable_thinking": False}``); also per call."""

    # --- LangChain metadata --------------------------------------------------------------------
    @property
    def _llm_type(self) -> str:
        return "agentrt"

    # --- serialization (langchain_core.load) ---------------------------------------------------
    @classmethod
    def is_lc_serializable(cls) -> bool:
        """True: ``dumpd`` / ``dumps`` write the constructor options (what callbacks receive
        as ``serialized["kwargs"]``), and ``load(..., valid_namespaces=["langchain_agentrt"],
        allowed_objects=[ChatAgentRT])`` rebuilds the model from them."""
        return True

    @classmethod
    def get_lc_namespace(cls) -> list[str]:
        """``["langchain_agentrt", "chat_models"]``: the module ``load`` imports."""
        return ["langchain_agentrt", "chat_models"]

    @property
    def lc_attributes(self) -> dict[str, Any]:
        """Written even at their defaults: ``model_name`` (None = the embedded default model,
        whatever ``$AGENTRT_MODEL`` the loader has; with ``engine=``, the engine's model) and
        ``temperature``. An ``engine`` or ``backend`` (a running resource) is written as
        LangChain's ``not_implemented``: ``load`` refuses it, naming its class, or with
        ``ignore_unserializable_fields=True`` runs the shared engine of ``model_name``. The
        ``api_key`` is never written."""
        attributes: dict[str, Any] = {"model_name": self.model_name,
                                      "temperature": self.temperature}
        if self.engine is not None:
            attributes.update(model_name=self.engine.config.model, engine=self.engine)
        if self.backend is not None:
            attributes["backend"] = self.backend
        return attributes

    @property
    def _serialized(self) -> dict[str, Any]:
        # NOTE: BaseChatModel caches this per instance: a model_copy(update=...) or an assigned
        # option then reached callbacks and the LLM cache key with the old options
        return dumpd(self)

    def _get_llm_string(self, stop: list[str] | None = None, **kwargs: Any) -> str:
        # NOTE: the serialized form leaves the backend out: the model it serves keys the cache
        return f"{super()._get_llm_string(stop=stop, **kwargs)}---{self.resolved_model_name}"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.resolved_model_name, "temperature": self.temperature,
                "max_tokens": self.max_tokens, "top_p": self.top_p, "top_k": self.top_k,
                "seed": self.seed, "constrained": self.constrained,
                # NOTE: all that changes the answer: LangChain's LLM cache keys on these
                "logprobs": self.logprobs, "top_logprobs": self.top_logprobs,
                "chat_template_kwargs": self.chat_template_kwargs,
                "engine_kwargs": self.engine_kwargs}

    def _get_invocation_params(self, stop: list[str] | None = None,
                               **kwargs: Any) -> dict[str, Any]:
        # NOTE: the call's stop strings as it runs them (LangChain's cache keys on these)
        return super()._get_invocation_params(stop=self.stop if stop is None else stop,
                                              **kwargs)

    @property
    def resolved_model_name(self) -> str:
        """The model's name as reported in ``response_metadata["model_name"]``."""
        from agentrt import DEFAULT_MODEL

        if self.backend is not None:
            return self.backend.model_name
        if self.engine is not None:
            return self.engine.config.model or DEFAULT_MODEL
        return self.model_name or DEFAULT_MODEL

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        params = LangSmithParams(ls_provider="agentrt", ls_model_type="chat",
                                 ls_model_name=kwargs.get("model") or self.resolved_model_name,
                                 ls_temperature=kwargs.get("temperature", self.temperature))
        max_tokens = kwargs.get("max_tokens", kwargs.get("max_completion_tokens",
                                                          self.max_tokens))
        if max_tokens is not None:
            params["ls_max_tokens"] = max_tokens
        if stop or self.stop:
            params["ls_stop"] = stop or self.stop
        return params

    # --- copies --------------------------------------------------------------------------------
    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> ChatAgentRT:
        """A deep copy that shares the engine or backend and the session table (running
        resources, not values)."""
        memo = {} if memo is None else memo
        for resource in (self.engine, self.backend, self.sessions):
            memo.setdefault(id(resource), resource)
        return super().__deepcopy__(memo)

    def __getstate__(self) -> dict[Any, Any]:
        if self.engine is not None or self.backend is not None:
            raise TypeError("a ChatAgentRT with engine= or backend= cannot be pickled (a running "
                            "resource); pickle one made with model=: it loads that model's "
                            "shared engine where it is unpickled")
        return super().__getstate__()

    # --- token counting ------------------------------------------------------------------------
    def get_token_ids(self, text: str) -> list[int]:
        """The ids of ``text`` in the model's own tokenizer (no special tokens added)."""
        if self.custom_get_token_ids is not None:
            return self.custom_get_token_ids(text)
        return self.get_backend().tokenizer.encode(text, add_special_tokens=False)

    def get_num_tokens_from_messages(self, messages: list[BaseMessage],
                                     tools: Sequence[Any] | None = None) -> int:
        """The prompt length of ``messages`` (with ``tools`` bound) as the model sees it: the
        chat template rendered and tokenized, equal to ``usage_metadata["input_tokens"]``."""
        if not messages:
            return 0
        call = self._prepare(list(messages), None, {"tools": list(tools or ())})
        return len(call.prompt_ids)

    # --- tools and structured output -----------------------------------------------------------
    def bind_tools(self, tools: Sequence[dict[str, Any] | type | Callable | BaseTool], *,
                   tool_choice: str | dict | bool | None = None,
                   parallel_tool_calls: bool | None = None, strict: bool | None = None,
                   **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind tools (anything ``convert_to_openai_tool`` accepts).

        ``tool_choice``: ``"auto"`` (default), ``"any"`` / ``"required"`` (must call a tool),
        a tool's name (must call that tool), or ``"none"``. With ``constrained=True`` these
        are enforced by the grammar, and so are the argument schemas (``strict`` is always
        on). ``parallel_tool_calls=True`` allows several calls in one message.
        """
        formatted = [convert_to_openai_tool(t) for t in tools]
        names = [t["function"]["name"] for t in formatted]
        choice = normalize_tool_choice(tool_choice, names)
        if parallel_tool_calls is not None:
            kwargs["parallel_tool_calls"] = parallel_tool_calls
        return super().bind(tools=formatted, tool_choice=choice, **kwargs)

    def with_structured_output(
        self, schema: dict[str, Any] | type | None = None, *, include_raw: bool = False,
        method: Literal["function_calling", "json_schema", "json_mode"] = "json_schema",
        strict: bool | None = None, **kwargs: Any,
    ) -> Runnable[LanguageModelInput, dict | Any]:
        """Answers parsed into ``schema``: as grammar-constrained JSON (``json_schema``, the
        default, as ``ChatOpenAI``'s), through a forced tool call (``function_calling``; a
        small model answers worse: the 135M model named the country, not its capital), or
        ``json_mode`` (any JSON object, and ``schema`` may be None: a dict).
        A call or JSON that did not parse is an ``OutputParserException`` (with
        ``include_raw=True``: in ``parsing_error``)."""
        if kwargs:
            raise ValueError(f"unsupported arguments: {sorted(kwargs)}")
        return structured_output(self, schema, method, include_raw=include_raw)

    # --- generation ----------------------------------------------------------------------------
    def get_backend(self) -> Backend:
        """The backend this model runs on (``backend``; else the local one of ``engine`` or
        of the shared engine of ``model``, loaded on first use)."""
        if self.backend is not None:
            return self.backend
        if self.engine is not None:
            return as_backend(self.engine)
        from agentrt.chat import get_shared_engine

        return as_backend(get_shared_engine(self.model_name, **self.engine_kwargs))

    def _prepare(self, messages: list[BaseMessage], stop: list[str] | None,
                 kwargs: dict[str, Any]) -> ChatCall:
        check_kwargs(self, kwargs)  # NOTE: before the engine loads (seconds), not after
        backend = self.get_backend()
        if self.sessions is not None and kwargs.get("session") is None:
            thread_id = _thread_id()
            if thread_id is not None:
                kwargs = {**kwargs, "session": self.sessions.get(thread_id, backend)}
        return prepare_call(self, backend, messages, stop, kwargs)

    async def _aprepare(self, messages: list[BaseMessage], stop: list[str] | None,
                        kwargs: dict[str, Any]) -> ChatCall:
        """:meth:`_prepare` off the event loop: a first call loads the engine (seconds), and
        the caller's deadlines (``asyncio.wait_for``) must fire meanwhile."""
        check_kwargs(self, kwargs)
        return await asyncio.to_thread(self._prepare, messages, stop, kwargs)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> ChatResult:
        call = self._prepare(messages, stop, kwargs)
        progress = Progress(call, self.resolved_model_name)
        for delta in run_deltas(call):
            progress.feed(delta)
        return _result(progress.message())

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: AsyncCallbackManagerForLLMRun | None = None,
                         **kwargs: Any) -> ChatResult:
        call = await self._aprepare(messages, stop, kwargs)
        progress = Progress(call, self.resolved_model_name)
        async for delta in arun_deltas(call):
            progress.feed(delta)
        return _result(progress.message())

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None,
                **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        call = self._prepare(messages, stop, kwargs)
        progress = Progress(call, self.resolved_model_name)
        for delta in run_deltas(call):
            chunk = progress.chunk(delta)
            if chunk is not None:
                if run_manager:
                    run_manager.on_llm_new_token(chunk.text, chunk=chunk)
                yield chunk

    async def _astream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                       run_manager: AsyncCallbackManagerForLLMRun | None = None,
                       **kwargs: Any) -> AsyncIterator[ChatGenerationChunk]:
        call = await self._aprepare(messages, stop, kwargs)
        progress = Progress(call, self.resolved_model_name)
        async for delta in arun_deltas(call):
            chunk = progress.chunk(delta)
            if chunk is not None:
                if run_manager:
                    await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
                yield chunk

    def _combine_llm_outputs(self, llm_outputs: list[dict[str, Any] | None], /
                             ) -> dict[str, Any]:
        """One ``llm_output`` for a batch (``generate``): token usage summed."""
        usage: dict[str, int] = {}
        for output in llm_outputs:
            for key, count in ((output or {}).get("token_usage") or {}).items():
                usage[key] = usage.get(key, 0) + count
        return {"token_usage": usage, "model_name": self.resolved_model_name}


def _thread_id() -> str | None:
    """The LangGraph thread this call runs in (``config["configurable"]["thread_id"]``, as
    LangGraph hands each node's config to the runnables it calls), if any."""
    thread_id = ensure_config().get("configurable", {}).get("thread_id")
    return None if thread_id is None else str(thread_id)


def _result(message: AIMessage) -> ChatResult:
    """One message as LangChain's result; ``llm_output`` (what ``on_llm_end`` handlers read)
    carries the token usage and model name, as ``ChatOpenAI``'s does."""
    metadata = message.response_metadata
    info = {"finish_reason": metadata.get("finish_reason")}
    llm_output = {"token_usage": metadata["token_usage"], "model_name": metadata["model_name"]}
    return ChatResult(generations=[ChatGeneration(message=message, generation_info=info)],
                      llm_output=llm_output)
