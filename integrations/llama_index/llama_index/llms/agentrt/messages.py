"""LlamaIndex messages ↔ the OpenAI-format dicts of :mod:`agentrt.chat`, and tool calls.

Rendering (chat template, tool blocks for templates without tool support) is the shared
chat layer's; this module only maps LlamaIndex's ``ChatMessage`` onto OpenAI's roles and
fields, and builds the assistant message of an answer. An answer's tool calls are
``ToolCallBlock`` s in ``message.blocks`` (what LlamaIndex 0.14's agents and memory read)
and, for code that checks the older convention, OpenAI-format dicts in
``message.additional_kwargs["tool_calls"]``. A streamed call is a block whose
``tool_kwargs`` is the partial JSON of its arguments so far.

A reasoning model's ``<think>`` text is a ``ThinkingBlock`` before the answer's blocks (as
LlamaIndex's own integrations for reasoning models give it), and also
``additional_kwargs["reasoning_content"]``; it is never text or a tool call. Sent back in a
history, an assistant message's reasoning (its ``ThinkingBlock`` s, else
``reasoning_content``) goes to the chat template with its text and tool calls, as a LangChain
``AIMessage``'s does: the template decides (Qwen3's keeps it in the tool steps after the last
user message and drops it before; SmolLM2's never shows it).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from json import JSONDecodeError
from typing import Any

from llama_index.core.base.llms.types import (
    CachePoint,
    ChatMessage,
    MessageRole,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
)
from llama_index.core.llms.llm import ToolSelection
from llama_index.core.llms.utils import parse_partial_json

from agentrt.chat import message_text

__all__ = ["assistant_message", "keep_first_call", "to_openai_messages", "tool_selections"]

_ROLES = {MessageRole.CHATBOT: "assistant", MessageRole.MODEL: "assistant",
          MessageRole.FUNCTION: "tool"}
_NOT_CONTENT = (ToolCallBlock, ThinkingBlock, CachePoint)


def to_openai_messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """OpenAI chat-format dicts for LlamaIndex ``messages``."""
    return [_to_dict(m) for m in messages]


def assistant_message(content: str, calls: Sequence[dict[str, Any]],
                      reasoning: str = "") -> ChatMessage:
    """The assistant message of an answer: its reasoning (``<think>`` text), its text and its
    tool calls (``{"name", "args", "id"}``; ``args`` a dict, or the partial JSON string of a
    call still being written)."""
    blocks: list[Any] = [ThinkingBlock(content=reasoning)] if reasoning else []
    blocks += [TextBlock(text=content)] if content or not calls else []
    blocks += [ToolCallBlock(tool_call_id=c["id"], tool_name=c["name"], tool_kwargs=c["args"])
               for c in calls]
    extra: dict[str, Any] = {"tool_calls": [_openai_call(c) for c in calls]} if calls else {}
    if reasoning:
        extra["reasoning_content"] = reasoning
    return ChatMessage(role=MessageRole.ASSISTANT, blocks=blocks, additional_kwargs=extra)


def tool_selections(message: ChatMessage) -> list[ToolSelection]:
    """The tool calls of an assistant message (partial arguments parsed as far as they go)."""
    return [ToolSelection(tool_id=c["id"] or "", tool_name=c["function"]["name"],
                          tool_kwargs=_arguments(c["function"]["arguments"]))
            for c in _calls(message)]


def keep_first_call(message: ChatMessage) -> None:
    """Drop every tool call of ``message`` after the first (in place)."""
    calls = [b for b in message.blocks if isinstance(b, ToolCallBlock)]
    dropped = {id(b) for b in calls[1:]}
    message.blocks = [b for b in message.blocks if id(b) not in dropped]
    if message.additional_kwargs.get("tool_calls"):
        message.additional_kwargs["tool_calls"] = message.additional_kwargs["tool_calls"][:1]


def _to_dict(message: ChatMessage) -> dict[str, Any]:
    """The OpenAI-format dict of ``message`` (an assistant's reasoning as
    ``reasoning_content``: see the module docs)."""
    role = _ROLES.get(message.role, message.role.value)
    text = message_text([_part(b) for b in message.blocks if not isinstance(b, _NOT_CONTENT)])
    if role == "assistant":
        thinking = [b.content for b in message.blocks
                    if isinstance(b, ThinkingBlock) and b.content]
        reasoning = ("\n\n".join(thinking) if thinking  # another integration's blocks
                     else message.additional_kwargs.get("reasoning_content"))
        out = {"role": role, "content": text, "tool_calls": _calls(message)}
        # NOTE: text only: another integration's odd field is left out
        return {**out, "reasoning_content": reasoning} if isinstance(reasoning, str) else out
    if role == "tool":
        extra = message.additional_kwargs
        return {"role": role, "content": text, "tool_call_id": extra.get("tool_call_id"),
                "name": extra.get("name")}
    return {"role": role, "content": text}


def _part(block: Any) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    return {"type": block.block_type}  # NOTE: message_text rejects media: text-only engine


def _calls(message: ChatMessage) -> list[dict[str, Any]]:
    """OpenAI-format calls: from the message's ``ToolCallBlock`` s, else (messages built by
    hand or by other integrations) from ``additional_kwargs["tool_calls"]``."""
    blocks = [b for b in message.blocks if isinstance(b, ToolCallBlock)]
    if blocks:
        return [_openai_call({"id": b.tool_call_id, "name": b.tool_name, "args": b.tool_kwargs})
                for b in blocks]
    return [_as_dict(c) for c in message.additional_kwargs.get("tool_calls") or ()]


def _openai_call(call: dict[str, Any]) -> dict[str, Any]:
    args = call["args"]
    arguments = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    return {"id": call["id"], "type": "function",
            "function": {"name": call["name"], "arguments": arguments}}


def _as_dict(call: Any) -> dict[str, Any]:
    return call if isinstance(call, dict) else call.model_dump()  # e.g. OpenAI's objects


def _arguments(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, dict):
        return arguments
    try:
        parsed = parse_partial_json(arguments or "{}")
    except (ValueError, TypeError, JSONDecodeError):
        return {}
    return parsed if isinstance(parsed, dict) else {}
