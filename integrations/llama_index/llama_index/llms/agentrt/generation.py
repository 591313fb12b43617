"""One AgentRT call: LlamaIndex messages + options → :mod:`agentrt.chat` → ``ChatResponse`` s.

:func:`prepare_call` merges the per-call options over the model's fields and hands messages,
tools and sampling options to :func:`agentrt.chat.prepare_chat`; the call runs through
:func:`~agentrt.chat.run_deltas` (through the agent run's session inside
:func:`agentrt.session.agent_run`); :class:`Progress` turns the shared
:class:`~agentrt.chat.ChatProgress` into streamed responses (text ``delta`` + the message so
far, tool calls included as they are written) or one final response — the last streamed
response *is* the final one. A reasoning model's ``<think>`` text streams as
``additional_kwargs["thinking_delta"]`` of each response (what LlamaIndex's agents put in
``AgentStream.thinking_delta``), never in ``delta``, and the message so far holds it as a
``ThinkingBlock``.

Inside an :func:`~llama_index.llms.agentrt.agent_session` only a ReAct agent's step follows
the ReAct grammar (:func:`~llama_index.llms.agentrt.react.step_grammar`); every other call
without tools or format answers freely, though the scope holds the agent's grammar.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole
from llama_index.llms.agentrt.messages import assistant_message, to_openai_messages
from llama_index.llms.agentrt.react import step_grammar

from agentrt.chat import ChatCall, ChatProgress, prepare_chat
from agentrt.chat.formats import detect_reasoning
from agentrt.core.sampling_params import Grammar
from agentrt.session import current_scope

if TYPE_CHECKING:
    from collections.abc import Sequence

    from llama_index.llms.agentrt.base import AgentRT

    from agentrt import StreamDelta
    from agentrt.backends import Backend

__all__ = ["Progress", "prepare_call", "prepare_raw"]

_SAMPLING = ("temperature", "max_tokens", "top_p", "top_k", "seed", "stop", "timeout",
             "chat_template_kwargs")
_BINDINGS = ("tools", "tool_choice", "parallel_tool_calls", "response_format")


def prepare_call(llm: AgentRT, backend: Backend, messages: Sequence[ChatMessage],
                 kwargs: dict[str, Any]) -> ChatCall:
    """Render, tokenize and parameterize one call (``kwargs``: per-call options)."""
    unknown = sorted(set(kwargs) - set(_SAMPLING + _BINDINGS))
    if unknown:
        raise ValueError(f"AgentRT got unsupported arguments {unknown}; it takes "
                         f"{sorted(_SAMPLING + _BINDINGS)}")
    options = {k: kwargs[k] if kwargs.get(k) is not None else getattr(llm, k)
               for k in _SAMPLING}
    options["stop"] = options["stop"] or ()
    call = prepare_chat(
        backend, to_openai_messages(messages), tools=kwargs.get("tools") or (),
        tool_choice=kwargs.get("tool_choice"), response_format=kwargs.get("response_format"),
        parallel_tool_calls=bool(kwargs.get("parallel_tool_calls")),
        constrained=llm.constrained, **options)
    return _with_step_grammar(call, messages, llm.constrained)


def _with_step_grammar(call: ChatCall, messages: Sequence[ChatMessage],
                       constrained: bool) -> ChatCall:
    """``call`` held to its ReAct agent's grammar, or to none: ``prepare_chat`` gives every
    call without tools or format the scope's grammar (see the module docs)."""
    scope = current_scope()
    scoped = Grammar("ebnf", scope.grammar) if scope is not None and scope.grammar else None
    if call.params.grammar is not None and call.params.grammar != scoped:
        return call  # NOTE: the call's own tools or response format
    ebnf = step_grammar(messages) if constrained else None
    grammar = Grammar("ebnf", ebnf) if ebnf else None
    if grammar == call.params.grammar:
        return call
    return dataclasses.replace(call, params=dataclasses.replace(call.params, grammar=grammar))


def prepare_raw(llm: AgentRT, backend: Backend, prompt: str, kwargs: dict[str, Any]) -> ChatCall:
    """``complete(prompt, formatted=True)``: ``prompt`` is the model's input as written (as
    Ollama's raw mode and LlamaCPP take it) — no chat template, the texts of special tokens
    in it are those tokens, nothing is added (a BOS token is the prompt's to write). The
    options are a chat call's."""
    call = prepare_call(llm, backend, [ChatMessage(role=MessageRole.USER, content="")], kwargs)
    tokenizer = backend.tokenizer
    return dataclasses.replace(call, prompt_ids=tokenizer.encode(prompt, add_special_tokens=False),
                               reasoning=detect_reasoning(tokenizer, prompt))


class Progress(ChatProgress):
    """A call's progress as LlamaIndex ``ChatResponse`` s."""

    def __init__(self, call: ChatCall, model_name: str) -> None:
        super().__init__(call)
        self.model_name = model_name
        self._partial: dict[int, dict[str, Any]] = {}  # index → {"id", "name", "args": str}

    def chunk(self, delta: StreamDelta) -> ChatResponse | None:
        """The streamed response after ``delta`` (None when it completed nothing)."""
        piece = self.feed(delta)
        for c in piece.tool_call_chunks:
            call = self._partial.setdefault(c["index"], {"id": c["id"], "name": None, "args": ""})
            call["name"] = call["name"] or c["name"]
            call["args"] += c["args"] or ""
        if delta.finished:
            return self.response(delta=piece.content, thinking_delta=piece.reasoning_content)
        if not piece:
            return None
        calls = [c for c in self._partial.values() if c["name"]]
        return ChatResponse(message=self._message(calls), delta=piece.content,
                            additional_kwargs=_thinking(piece.reasoning_content))

    def response(self, delta: str | None = None, thinking_delta: str = "") -> ChatResponse:
        """The whole answer (after the last delta), usage in ``raw`` and ``additional_kwargs``
        (with the last delta's reasoning, when streamed)."""
        usage = {"prompt_tokens": self.num_prompt_tokens,
                 "completion_tokens": self.num_output_tokens,
                 "total_tokens": self.num_prompt_tokens + self.num_output_tokens}
        raw = {"model": self.model_name, "usage": usage, "finish_reason": self.finish_reason,
               "invalid_tool_calls": self.invalid_tool_calls}
        return ChatResponse(message=self._message(self.tool_calls), delta=delta, raw=raw,
                            additional_kwargs={**usage, **_thinking(thinking_delta)})

    def _message(self, calls: list[dict[str, Any]]) -> ChatMessage:
        """The message so far: reasoning, text, tool calls."""
        return assistant_message(self.content, calls, self.reasoning_content)

    def annotate_session(self) -> None:
        """Inside an agent run, after the call: tell the engine which tool the paused request
        now waits for (its interception policy learns each tool's duration by name)."""
        scope = current_scope()
        if scope is not None and self.tool_calls:
            scope.annotate_last(self.tool_calls[0]["name"])


def _thinking(text: str) -> dict[str, Any]:
    """A response's ``additional_kwargs`` for a streamed reasoning piece (none: empty)."""
    return {"thinking_delta": text} if text else {}
