"""One chat call: OpenAI-format messages + options → a backend call → text and tool calls.

:func:`prepare_chat` renders and tokenizes the prompt with the backend's tokenizer and builds
the ``SamplingParams`` (with the output grammar, as data, when tools or a response format are
given); :func:`run_deltas` / :func:`arun_deltas` run it as one
:class:`~agentrt.backends.call.Call` — alone, or, inside :func:`agentrt.session.agent_run`,
as the next call of that run's session, which keeps the context and appends only what the
new prompt adds; :class:`ChatProgress` turns the stream deltas into answer text, reasoning and
tool calls through one :class:`~agentrt.chat.tool_calls.ToolCallStream` in the model family's
tool-call format (:func:`~agentrt.chat.formats.detect_format`, from the chat template).
``ChatAgentRT``, ``AgentRT`` and ``agentrt serve`` are thin adapters over this module, on any
backend (an :class:`agentrt.Engine` is taken as its local backend).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentrt.agent.parsers.markers import MarkerTokenizer, marker_tokenizer
from agentrt.backends.call import Call, as_backend
from agentrt.chat.formats import (
    HERMES,
    Reasoning,
    ToolCallFormat,
    detect_format,
    detect_reasoning,
    reasoning_tags,
)
from agentrt.chat.grammar import (
    check_tool_names,
    normalize_tool_choice,
    output_structural_tag,
    response_schema,
)
from agentrt.chat.logprobs import token_logprobs
from agentrt.chat.template import encode_prompt, render_prompt
from agentrt.chat.tool_calls import InvalidToolCall, StreamPiece, ToolCall, ToolCallStream
from agentrt.core.options import RequestOptions
from agentrt.core.sampling_params import Grammar, SamplingParams
from agentrt.session import Session, current_scope

if TYPE_CHECKING:
    from agentrt.backends.base import Backend
    from agentrt.core.outputs import StreamDelta

__all__ = ["ChatCall", "ChatProgress", "arun_deltas", "prepare_chat", "run_deltas"]


@dataclass
class ChatCall:
    """Everything one backend call needs (and, once it runs, the call itself)."""

    backend: Backend
    prompt_ids: list[int]
    params: SamplingParams
    timeout: float | None = None
    request_id: str = field(default_factory=lambda: f"chat-{uuid.uuid4().hex[:16]}")
    session: Session | None = None
    """The session serving this call: the one the caller passed (``session=``), else the
    agent run's; None: a call of its own."""
    hook: Any = None
    """The run's hook for this call (partial tool execution), closed when it ends."""
    tool_format: ToolCallFormat = HERMES
    """How the model writes tool calls (what the grammar forces and the parser reads)."""
    reasoning: Reasoning = "none"
    """Whether the output may hold reasoning (``<think>`` or ``[THINK]``), or starts inside it."""
    can_call_tools: bool = True
    """False when the request has no tools or ``tool_choice="none"``: the output holds no
    calls, and text that looks like one (a Llama 3 JSON answer ``{"name": …}``) is the answer."""
    must_call_tools: bool = False
    """The grammar forces a call (``tool_choice`` required or one tool): output cut inside the
    call's opening tag is a truncated call, not answer text."""
    call: Call | None = None
    """The backend call, once started: its counters (cached / prefilled tokens)."""
    tools: tuple[dict[str, Any], ...] = ()
    """The request's tools (OpenAI format): their schemas type the values of formats that
    write them as text (Qwen3-Coder's XML parameters)."""
    markers: MarkerTokenizer | None = None
    """Set when the format's markers (if the call may call tools) or the reasoning tags are
    special tokens of the tokenizer (Mistral's ``[TOOL_CALLS]``, Magistral's ``[THINK]``): the
    output is decoded with special tokens and read through this, which drops all the others
    (and the hook of an agent run decodes with it)."""

    @contextmanager
    def deadline(self) -> Iterator[None]:
        """Abort the call after ``timeout`` seconds and raise ``TimeoutError``."""
        if self.timeout is None:
            yield
            return
        fired = threading.Event()

        def expire() -> None:
            fired.set()
            if self.call is not None:
                self.call.abort()

        timer = threading.Timer(self.timeout, expire)
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
        if fired.is_set():
            raise TimeoutError(f"the call took longer than timeout={self.timeout}s; aborted")


def prepare_chat(backend: Any, messages: Sequence[Mapping[str, Any]], *,
                 tools: Sequence[dict[str, Any]] = (), tool_choice: Any = None,
                 response_format: dict[str, Any] | None = None,
                 parallel_tool_calls: bool = False, constrained: bool = True,
                 stop: str | Sequence[str] = (), temperature: float = 0.0,
                 max_tokens: int | None = None, top_p: float = 1.0, top_k: int = 0,
                 seed: int | None = None, timeout: float | None = None,
                 request_id: str | None = None,
                 tool_format: str | ToolCallFormat | None = None,
                 chat_template: str | None = None,
                 chat_template_kwargs: Mapping[str, Any] | None = None,
                 logprobs: int | None = None) -> ChatCall:
    """Render, tokenize and parameterize one call on ``backend`` (a
    :class:`~agentrt.backends.base.Backend`, or an :class:`agentrt.Engine`: its local one).

    ``messages`` and ``tools`` are in OpenAI's chat format; ``tool_choice`` is ``"auto"``
    (default), ``"none"``, ``"required"`` / ``"any"``, a tool's name or OpenAI's dict form;
    ``response_format`` is OpenAI's ``json_object`` / ``json_schema`` form. With
    ``constrained`` (the default) tool calls and JSON answers are grammar-constrained.
    ``chat_template`` replaces the tokenizer's; ``chat_template_kwargs`` are variables the
    template reads (Qwen3's ``{"enable_thinking": False}``); ``tool_format`` (``"hermes"``,
    ``"llama3"``, ``"mistral"``) overrides the one read from the template; ``logprobs``
    (``SamplingParams.logprobs``) puts each token's log-probabilities on the stream deltas.
    Raises ``ValueError`` for input the call cannot honour.
    """
    backend = as_backend(backend)
    tokenizer = backend.tokenizer
    tools = list(tools)
    names = [t["function"]["name"] for t in tools]
    check_tool_names(names)
    choice = normalize_tool_choice(tool_choice, names)
    template = chat_template or tokenizer
    fmt = detect_format(template, tool_format)
    prompt = render_prompt(tokenizer, messages, tools,
                           system_note=_format_note(response_format), tool_format=fmt,
                           chat_template=chat_template, template_kwargs=chat_template_kwargs)
    reasoning = detect_reasoning(template, prompt)
    prompt_ids = encode_prompt(tokenizer, prompt, messages)
    grammar = None
    if constrained:
        tag = output_structural_tag(tools, choice, response_format,
                                    parallel_tool_calls=parallel_tool_calls, tool_format=fmt,
                                    reasoning=reasoning)
        grammar = _output_grammar(tag)
    can_call_tools = bool(tools) and choice != "none"
    if logprobs is not None and (can_call_tools or reasoning != "none"):
        raise ValueError("logprobs are given for plain answers: not with tools a call may "
                         "use, nor for a model that reasons first (as OpenAI's reasoning "
                         "models refuse them)")
    markers = marker_tokenizer(tokenizer, _kept_markers(fmt, reasoning, can_call_tools))
    params = SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k, seed=seed,
                            stop=(stop,) if isinstance(stop, str) else tuple(stop),
                            grammar=grammar,
                            skip_special_tokens=markers is None, logprobs=logprobs,
                            **({} if max_tokens is None else {"max_tokens": max_tokens}))
    call = ChatCall(backend, prompt_ids, params, timeout=timeout, tool_format=fmt,
                    reasoning=reasoning, can_call_tools=can_call_tools, markers=markers,
                    tools=tuple(tools), must_call_tools=grammar is not None and can_call_tools
                    and response_format is None and choice != "auto")
    if request_id is not None:
        call.request_id = request_id
    return call


def run_deltas(call: ChatCall) -> Iterator[StreamDelta]:
    """The stream deltas of ``call`` (closing early aborts it)."""
    with call.deadline():
        try:
            yield from _start(call).stream()
        finally:
            _close_hook(call)


async def arun_deltas(call: ChatCall) -> AsyncIterator[StreamDelta]:
    """Async twin of :func:`run_deltas`."""
    with call.deadline():
        stream = _start(call).astream()
        try:
            async for delta in stream:
                yield delta
        finally:
            await stream.aclose()
            _close_hook(call)


def _close_hook(call: ChatCall) -> None:
    if call.hook is not None:
        call.hook.close()


def _start(call: ChatCall) -> Call:
    """The backend call of ``call``: its own, or its session's next one (the caller's
    ``call.session``, else the agent run's).

    The run's hook (tools that start while a call is written) is made for the call's
    ``reasoning`` mode (what the model writes inside ``<think>`` starts no tool), its tool-call
    format and whether it may call tools at all; a factory may give no hook."""
    scope = current_scope()
    options = RequestOptions(request_id=call.request_id)
    if scope is not None and call.session is None:
        call.session = scope.session_for(call.backend, call.prompt_ids)
        if scope.hook_factory is not None:
            call.hook = scope.hook_factory(call.markers or call.backend.tokenizer,
                                           reasoning=call.reasoning, tool_format=call.tool_format,
                                           can_call_tools=call.can_call_tools)
        if call.hook is not None:
            options = options.updated({"hook": call.hook})
    call.call = Call(call.backend, call.prompt_ids, call.params, session=call.session,
                     options=options)
    return call.call


class ChatProgress:
    """Accumulates one call's deltas into answer text, reasoning and tool calls."""

    def __init__(self, call: ChatCall) -> None:
        self.call = call
        self.parser = ToolCallStream(call.tool_format, reasoning=call.reasoning,
                                     can_call=call.can_call_tools, tools=call.tools,
                                     must_call=call.must_call_tools)
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self.logprobs: list[dict[str, Any]] = []
        """With ``params.logprobs`` set: OpenAI's entry of each answer token so far
        (:func:`agentrt.chat.logprobs.token_logprobs`)."""
        self.num_output_tokens = 0
        self.engine_finish_reason: str | None = None
        """The engine's reason (``stop``, ``length``, ``abort``); see :attr:`finish_reason`."""

    def feed(self, delta: StreamDelta) -> StreamPiece:
        """Count the delta's tokens and parse its text (the last delta closes the parser)."""
        self.num_output_tokens += len(delta.token_ids)
        if delta.logprobs:
            self.logprobs += token_logprobs(self.call.backend.tokenizer, delta.token_ids,
                                            delta.logprobs, self.call.params.logprobs or 0)
        markers = self.call.markers
        piece = self.parser.feed(delta.text if markers is None else
                                 markers.strip_special(delta.text))
        if delta.finished:
            self.engine_finish_reason = delta.finish_reason
            tail = self.parser.close()
            piece.content += tail.content
            piece.reasoning_content += tail.reasoning_content
            piece.tool_call_chunks += tail.tool_call_chunks
        self._content.append(piece.content)
        self._reasoning.append(piece.reasoning_content)
        return piece

    @property
    def content(self) -> str:
        """The answer text so far (tool calls and reasoning removed)."""
        return "".join(self._content)

    @property
    def reasoning_content(self) -> str:
        """The reasoning so far (the text of ``<think>`` blocks)."""
        return "".join(self._reasoning)

    @property
    def tool_calls(self) -> list[ToolCall]:
        """The complete, valid tool calls so far."""
        return self.parser.tool_calls

    @property
    def invalid_tool_calls(self) -> list[InvalidToolCall]:
        """Calls that did not parse (e.g. cut off by ``max_tokens``), with their error."""
        return self.parser.invalid_tool_calls

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.call.prompt_ids)

    @property
    def finish_reason(self) -> str | None:
        """``stop``, ``length``, ``abort``, or ``tool_calls`` when it stopped after calls."""
        if self.parser.tool_calls and self.engine_finish_reason == "stop":
            return "tool_calls"
        return self.engine_finish_reason


def _kept_markers(fmt: ToolCallFormat, reasoning: Reasoning,
                  can_call_tools: bool) -> tuple[str, ...]:
    """What decoding must keep for the parser and the hook: the call markers (when calls can
    be made) and the reasoning tags."""
    tags = reasoning_tags(reasoning)
    kept = fmt.markers if can_call_tools else ()
    return kept if tags is None else (*kept, tags.open, tags.close)


def _output_grammar(tag: dict[str, Any] | None) -> Grammar | None:
    """The call's output grammar: the tools' / format's structural tag, else the agent run's
    (e.g. the ReAct format), else none."""
    if tag is not None:
        _check_xgrammar()
        return Grammar("structural_tag", json.dumps(tag))
    scope = current_scope()
    if scope is not None and scope.grammar:
        return Grammar("ebnf", scope.grammar)
    return None


def _format_note(response_format: dict[str, Any] | None) -> str | None:
    if response_format is None:
        return None
    schema = response_schema(response_format)
    if schema is None:
        return "Answer with a JSON object."
    return "Answer with a JSON object that matches this JSON schema:\n" + json.dumps(schema)


def _check_xgrammar() -> None:
    try:
        import xgrammar  # noqa: F401
    except ImportError as exc:
        raise ImportError("constrained tool calls need xgrammar: pip install "
                          "'agentrt[constrained]', or pass constrained=False") from exc
