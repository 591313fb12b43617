"""LangChain messages → OpenAI-format message dicts, rendered by :mod:`agentrt.chat.template`.

The chat template, the Hermes tool convention for templates without tool support, and the
probing of what a template renders all live in the shared chat layer; this module only maps
LangChain's message classes onto OpenAI's roles and fields.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from agentrt.chat import message_text
from agentrt.chat import render_prompt as _render_dicts

__all__ = ["render_prompt", "to_openai_messages"]


def render_prompt(tokenizer: Any, messages: Sequence[BaseMessage],
                  tools: Sequence[dict[str, Any]] = (), *, system_note: str | None = None
                  ) -> str:
    """The generation prompt for LangChain ``messages`` (OpenAI-format ``tools``)."""
    return _render_dicts(tokenizer, to_openai_messages(messages), tools,
                         system_note=system_note)


def to_openai_messages(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """OpenAI chat-format dicts for LangChain ``messages``."""
    return [_to_dict(m) for m in messages]


def _to_dict(message: BaseMessage) -> dict[str, Any]:
    text = message_text(message.content)
    if isinstance(message, SystemMessage):
        return {"role": "system", "content": text}
    if isinstance(message, HumanMessage):
        return {"role": "user", "content": text}
    if isinstance(message, AIMessage):
        out = {"role": "assistant", "content": text, "tool_calls": [
            {"id": c.get("id"), "type": "function",
             "function": {"name": c["name"], "arguments": c["args"]}}
            for c in message.tool_calls]}
        return _with_reasoning(out, message.additional_kwargs.get("reasoning_content"))
    if isinstance(message, ToolMessage):
        return {"role": "tool", "content": text, "name": message.name,
                "tool_call_id": message.tool_call_id}
    if isinstance(message, FunctionMessage):
        return {"role": "tool", "content": text, "name": message.name}
    if isinstance(message, ChatMessage):
        return {"role": message.role, "content": text}
    raise ValueError(f"ChatAgentRT cannot render a {type(message).__name__}")


def _with_reasoning(message: dict[str, Any], reasoning: Any) -> dict[str, Any]:
    """``message`` with its ``reasoning_content`` when that is text (the chat template decides
    what to show: :mod:`agentrt.chat.template`); another provider's odd field is left out."""
    return {**message, "reasoning_content": reasoning} if isinstance(reasoning, str) else message
