"""AgentRT: a LlamaIndex ``FunctionCallingLLM`` on agentrt — its in-process engine by
default, or any backend (``backend=get_backend("sglang", url=...)``: an SGLang server).

The LlamaIndex twin of ``langchain_agentrt.ChatAgentRT``, over the same chat layer
(:mod:`agentrt.chat`): messages are rendered with the model's own chat template, tool calls
are written in the ``<tool_call>`` JSON form and — with tools bound and ``constrained=True``
— grammar-constrained so that every call names a given tool with arguments that match its
schema (``tool_required=True`` or a ``tool_choice`` name forces a call). ``chat`` and
``stream_chat`` share one output parser, so a streamed answer adds up to the whole one and
the last streamed response carries the complete tool calls. A reasoning model's ``<think>``
text is a ``ThinkingBlock`` before the answer in ``message.blocks`` (also
``additional_kwargs["reasoning_content"]``) and streams as each response's
``additional_kwargs["thinking_delta"]``; it is never answer text or a tool call. Inside
:func:`~llama_index.llms.agentrt.agent_session` (or :func:`agentrt.session.agent_run`) an
agent's calls continue one engine request whose KV is kept across tool calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from llama_index.core.base.llms.generic_utils import (
    astream_chat_response_to_completion_response,
    chat_response_to_completion_response,
    stream_chat_response_to_completion_response,
)
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
)
from llama_index.core.bridge.pydantic import ConfigDict, Field, field_validator
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import ToolSelection
from llama_index.core.types import PydanticProgramMode
from llama_index.llms.agentrt.generation import Progress, prepare_call, prepare_raw
from llama_index.llms.agentrt.messages import keep_first_call, tool_selections

from agentrt import DEFAULT_MODEL, SamplingParams, env
from agentrt.backends import as_backend
from agentrt.chat import arun_deltas, get_shared_engine, run_deltas

if TYPE_CHECKING:
    from llama_index.core.bridge.pydantic import BaseModel
    from llama_index.core.prompts import BasePromptTemplate
    from llama_index.core.tools.types import BaseTool
    from llama_index.core.types import BasePydanticProgram

    from agentrt import Engine
    from agentrt.backends import Backend

__all__ = ["AgentRT"]

_DEFAULT_MAX_TOKENS = SamplingParams().max_tokens


class AgentRT(FunctionCallingLLM):
    """LLM on agentrt (default: a local engine on the embedded SmolLM2-135M-Instruct).

    >>> llm = AgentRT(max_tokens=64)                  # shares one engine per process
    >>> llm.complete("What is the capital of France?").text
    >>> llm.chat_with_tools([calculator], user_msg="17 * 23?", tool_required=True)

    Pass ``backend=`` to run elsewhere (``get_backend("sglang", url=...)``) or ``engine=`` to
    use an engine you built; otherwise all instances with the same ``model`` and
    ``engine_kwargs`` share one engine, loaded on first use. Copies (``copy.deepcopy``,
    ``model_copy(deep=True)``) share the engine or backend; only one made with ``model=``
    pickles (it loads that model's shared engine where it is unpickled).
    """

    # NOTE: extra="forbid": a misspelt option (``max_token=``) is an error, not ignored
    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(
        default_factory=env.default_model,
        description="Local Hugging Face folder or .gguf file; default $AGENTRT_MODEL, else "
                    "(None) agentrt's embedded default model.")
    backend: Any = Field(default=None, exclude=True,
                         description="An agentrt Backend to run on (e.g. an SGLang server); "
                                     "None = the local engine.")
    engine: Any = Field(default=None, exclude=True,
                        description="An agentrt.Engine to run on; None = the shared engine.")
    engine_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="EngineConfig options of the shared engine.")
    temperature: float = Field(default=0.0, ge=0.0, description="0 = greedy (deterministic).")
    max_tokens: int | None = Field(
        default=None, gt=0, description="Most tokens to generate per call; None = 256.")
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = Field(default=None, description="Seed used when temperature > 0.")
    stop: list[str] | None = Field(
        default=None, description="Strings that end generation (one str: one stop string).")
    timeout: float | None = Field(
        default=None, description="Seconds one call may take (then aborted, TimeoutError).")
    constrained: bool = Field(
        default=True, description="Grammar-constrain tool calls (needs xgrammar).")
    chat_template_kwargs: dict[str, Any] | None = Field(
        default=None, description="Variables the chat template reads, as vLLM's "
        "chat_template_kwargs (Qwen3: {'enable_thinking': False}); also per call.")
    context_window: int | None = Field(
        default=None, gt=0, description="Tokens of prompt + output; None = the engine's limit "
        "(a larger value is reported as the engine's: it cannot hold more).")

    @classmethod
    def class_name(cls) -> str:
        return "AgentRT_llm"

    @field_validator("stop", mode="before")
    @classmethod
    def _one_stop_string(cls, stop: Any) -> Any:
        return [stop] if isinstance(stop, str) else stop

    # --- copies --------------------------------------------------------------------------------
    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> AgentRT:
        """A deep copy that shares the engine or backend (a running resource, not a value)."""
        memo = {} if memo is None else memo
        for resource in (self.engine, self.backend):
            memo.setdefault(id(resource), resource)
        return super().__deepcopy__(memo)

    def __getstate__(self) -> dict[Any, Any]:
        if self.engine is not None or self.backend is not None:
            raise TypeError("an AgentRT with engine= or backend= cannot be pickled (a running "
                            "resource); pickle one made with model=: it loads that model's "
                            "shared engine where it is unpickled")
        # NOTE: LlamaIndex's __getstate__ deletes what does not pickle from the state it gets,
        # which pydantic shares with the model: give it a copy's, so this one keeps its own
        return super(AgentRT, self.model_copy()).__getstate__()

    # --- metadata ------------------------------------------------------------------------------
    @property
    def metadata(self) -> LLMMetadata:
        """Chat and function-calling model; the context window is the engine's (loads it), or
        ``context_window`` where that is smaller."""
        limit = self.get_backend().max_model_len
        return LLMMetadata(
            context_window=min(self.context_window or limit, limit),
            num_output=self.max_tokens or _DEFAULT_MAX_TOKENS, is_chat_model=True,
            is_function_calling_model=True, model_name=self.model_name)

    @property
    def model_name(self) -> str:
        """The model's name, as reported in ``metadata`` and ``raw["model"]``."""
        if self.backend is not None:
            return self.backend.model_name
        if self.engine is not None:
            return self.engine.config.model or DEFAULT_MODEL
        return self.model or DEFAULT_MODEL

    def get_engine(self) -> Engine:
        """The local engine this LLM runs on (the shared one of ``model``, loaded on first
        use); ``ValueError`` when it runs on another backend."""
        if self.backend is not None:
            raise ValueError(f"this AgentRT runs on the {self.backend.name!r} backend, not a "
                             "local engine; use get_backend()")
        if self.engine is not None:
            return self.engine
        return get_shared_engine(self.model, **self.engine_kwargs)

    def get_backend(self) -> Backend:
        """The backend this LLM runs on (``backend``; else the local engine's)."""
        return self.backend if self.backend is not None else as_backend(self.get_engine())

    # --- chat ----------------------------------------------------------------------------------
    def _progress(self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]) -> Progress:
        call = prepare_call(self, self.get_backend(), messages, kwargs)
        return Progress(call, self.model_name)

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self._run(self._progress(messages, kwargs))

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return await self._arun(self._progress(messages, kwargs))

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        return self._stream(self._progress(messages, kwargs))

    @llm_chat_callback()
    async def astream_chat(self, messages: Sequence[ChatMessage],
                           **kwargs: Any) -> ChatResponseAsyncGen:
        return self._astream(self._progress(messages, kwargs))

    # NOTE: undecorated, so that a completion, which runs them too, is one LLM event
    # (completion), not two (completion + chat: token counters counted it twice)
    def _run(self, progress: Progress) -> ChatResponse:
        for delta in run_deltas(progress.call):
            progress.feed(delta)
        progress.annotate_session()
        return progress.response()

    async def _arun(self, progress: Progress) -> ChatResponse:
        async for delta in arun_deltas(progress.call):
            progress.feed(delta)
        progress.annotate_session()
        return progress.response()

    def _stream(self, progress: Progress) -> ChatResponseGen:
        for delta in run_deltas(progress.call):
            response = progress.chunk(delta)
            if response is not None:
                yield response
        progress.annotate_session()

    async def _astream(self, progress: Progress) -> ChatResponseAsyncGen:
        async for delta in arun_deltas(progress.call):
            response = progress.chunk(delta)
            if response is not None:
                yield response
        progress.annotate_session()

    # --- completion: a one-message chat, or the raw prompt ---------------------------------------
    def _completion(self, prompt: str, formatted: bool, kwargs: dict[str, Any]) -> Progress:
        """The call of ``prompt``: one user message in the chat template; with ``formatted``
        the model's input as written (see :func:`~.generation.prepare_raw`)."""
        if not formatted:
            return self._progress([ChatMessage(role=MessageRole.USER, content=prompt)], kwargs)
        return Progress(prepare_raw(self, self.get_backend(), prompt, kwargs), self.model_name)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        """The answer to ``prompt``; ``formatted=True``: ``prompt`` is already in the model's
        chat format (no template applied, its special-token texts are those tokens)."""
        response = self._run(self._completion(prompt, formatted, kwargs))
        return chat_response_to_completion_response(response)

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False,
                        **kwargs: Any) -> CompletionResponse:
        response = await self._arun(self._completion(prompt, formatted, kwargs))
        return chat_response_to_completion_response(response)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False,
                        **kwargs: Any) -> CompletionResponseGen:
        chunks = self._stream(self._completion(prompt, formatted, kwargs))
        return stream_chat_response_to_completion_response(chunks)

    @llm_completion_callback()
    async def astream_complete(self, prompt: str, formatted: bool = False,
                               **kwargs: Any) -> CompletionResponseAsyncGen:
        chunks = self._astream(self._completion(prompt, formatted, kwargs))
        return astream_chat_response_to_completion_response(chunks)

    # --- tools ---------------------------------------------------------------------------------
    def _prepare_chat_with_tools(
        self, tools: Sequence[BaseTool], user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None, verbose: bool = False,
        allow_parallel_tool_calls: bool = False, tool_required: bool = False,
        tool_choice: str | dict[str, Any] | None = None, **kwargs: Any,
    ) -> dict[str, Any]:
        """The ``chat`` arguments for a call with ``tools``.

        ``tool_choice``: ``"auto"``, ``"none"``, ``"required"``, a tool's name or OpenAI's
        dict form; when None, ``tool_required`` picks ``"required"`` over ``"auto"``. With
        ``constrained=True`` the choice and the argument schemas are enforced by the grammar.
        """
        specs = [t.metadata.to_openai_tool(skip_length_check=True) for t in tools]
        messages = list(chat_history or [])
        if isinstance(user_msg, str):
            user_msg = ChatMessage(role=MessageRole.USER, content=user_msg)
        if user_msg is not None:
            messages.append(user_msg)
        if tool_choice is None and specs:
            tool_choice = "required" if tool_required else "auto"
        return {"messages": messages, "tools": specs, "tool_choice": tool_choice,
                "parallel_tool_calls": allow_parallel_tool_calls, **kwargs}

    def _validate_chat_with_tools_response(
        self, response: ChatResponse, tools: Sequence[BaseTool],
        allow_parallel_tool_calls: bool = False, **kwargs: Any,
    ) -> ChatResponse:
        """One call per answer unless parallel calls are allowed (the grammar already stops
        after one when constrained)."""
        if not allow_parallel_tool_calls:
            keep_first_call(response.message)
        return response

    def get_tool_calls_from_response(self, response: ChatResponse,
                                     error_on_no_tool_call: bool = True,
                                     **kwargs: Any) -> list[ToolSelection]:
        """The tool calls of ``response`` (of a streamed one: as far as they are written)."""
        calls = tool_selections(response.message)
        if not calls and error_on_no_tool_call:
            invalid = (response.raw or {}).get("invalid_tool_calls") or []
            detail = f"; invalid calls: {invalid}" if invalid else ""
            raise ValueError(f"Expected at least one tool call, but got 0 tool calls{detail}.")
        return calls

    # --- structured output, streamed -----------------------------------------------------------
    def _structured_stream_call(self, output_cls: type[BaseModel], prompt: BasePromptTemplate,
                                llm_kwargs: dict[str, Any] | None = None,
                                **prompt_args: Any) -> Any:
        """``stream_structured_predict``'s program, held to its tool (see :meth:`_program`)."""
        return self._program(output_cls, prompt).stream_call(llm_kwargs=llm_kwargs,
                                                             **prompt_args)

    async def _structured_astream_call(self, output_cls: type[BaseModel],
                                       prompt: BasePromptTemplate,
                                       llm_kwargs: dict[str, Any] | None = None,
                                       **prompt_args: Any) -> Any:
        return await self._program(output_cls, prompt).astream_call(llm_kwargs=llm_kwargs,
                                                                    **prompt_args)

    def _program(self, output_cls: type[BaseModel],
                 prompt: BasePromptTemplate) -> BasePydanticProgram:
        """The structured-output program of ``pydantic_program_mode``; a function-calling one
        must call its tool (``tool_choice="required"``): LlamaIndex's streamed program leaves
        ``tool_required`` out of its call, and a model free to answer in prose streams an
        empty object."""
        from llama_index.core.program.utils import get_program_for_llm

        mode = self.pydantic_program_mode
        forced = ({"tool_choice": "required"}
                  if mode in (PydanticProgramMode.DEFAULT, PydanticProgramMode.FUNCTION) else {})
        return get_program_for_llm(output_cls, prompt, self, pydantic_program_mode=mode,
                                   **forced)
