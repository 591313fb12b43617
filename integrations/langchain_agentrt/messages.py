"""LangChain messages → the model's own chat template → one prompt string.

The prompt is rendered by the tokenizer's chat template (``apply_chat_template``), passing
``tools=`` and assistant ``tool_calls`` through when the template renders them. Templates that
do not (SmolLM2's renders only ``role`` and ``content``) get the Hermes / Qwen2.5 convention
written into the messages instead: the tool signatures in the system message, an assistant's
calls as ``<tool_call>`` blocks in its content, tool results as ``<tool_response>`` blocks in
a ``tool`` turn — the same text :mod:`agentrt.agent.tool_loop` appends after a call. What a
template renders is found once per template by rendering probe messages.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
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

from langchain_agentrt.tool_calls import format_tool_call

__all__ = ["TemplateCaps", "render_prompt", "template_caps", "to_chat_dicts"]

_TOOLS_PROMPT = """# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{tools}
</tools>

For each function call, return a json object with function name and arguments within \
<tool_call></tool_call> XML tags:
<tool_call>
{{"name": <function-name>, "arguments": <args-json-object>}}
</tool_call>"""
_SKIPPED_BLOCKS = frozenset({"tool_use", "tool_call", "tool_call_chunk", "invalid_tool_call",
                             "thinking", "reasoning", "redacted_thinking"})
_PROBE = "agentrt_probe_tool"


@dataclass(frozen=True)
class TemplateCaps:
    """What a chat template renders by itself."""

    renders_tools: bool
    """``apply_chat_template(tools=...)`` shows the tool signatures to the model."""
    renders_tool_calls: bool
    """Assistant ``tool_calls`` (and ``tool`` turns) are rendered from structured fields."""


_caps_cache: dict[str, TemplateCaps] = {}


def template_caps(tokenizer: Any) -> TemplateCaps:
    """Probe (once per template) whether it renders tools and tool calls."""
    key = str(getattr(tokenizer, "chat_template", None))
    if key not in _caps_cache:
        tool = {"type": "function", "function": {"name": _PROBE, "description": "probe",
                                                 "parameters": {"type": "object",
                                                                "properties": {}}}}
        user = {"role": "user", "content": "hi"}
        call = {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c0", "type": "function", "function": {"name": _PROBE, "arguments": {}}}]}
        _caps_cache[key] = TemplateCaps(
            renders_tools=_PROBE in _try_render(tokenizer, [user], tools=[tool]),
            renders_tool_calls=_PROBE in _try_render(tokenizer, [user, call]),
        )
    return _caps_cache[key]


def render_prompt(tokenizer: Any, messages: Sequence[BaseMessage],
                  tools: Sequence[dict[str, Any]] = (), *, system_note: str | None = None
                  ) -> str:
    """The generation prompt for ``messages`` (OpenAI-format ``tools``, optional note)."""
    caps = template_caps(tokenizer)
    dicts = to_chat_dicts(messages, caps)
    extra: dict[str, Any] = {}
    if tools and caps.renders_tools:
        extra["tools"] = list(tools)
    elif tools:
        system_note = _join(_TOOLS_PROMPT.format(tools=_tool_lines(tools)), system_note)
    if system_note:
        dicts = _with_system_note(dicts, system_note)
    return tokenizer.apply_chat_template(dicts, add_generation_prompt=True, tokenize=False,
                                         **extra)


def to_chat_dicts(messages: Sequence[BaseMessage], caps: TemplateCaps) -> list[dict[str, Any]]:
    """Chat-template messages (``role``, ``content``, ``tool_calls``, ...) for ``messages``."""
    return [_to_dict(m, caps) for m in messages]


def _to_dict(message: BaseMessage, caps: TemplateCaps) -> dict[str, Any]:
    text = _text(message)
    if isinstance(message, SystemMessage):
        return {"role": "system", "content": text}
    if isinstance(message, HumanMessage):
        return {"role": "user", "content": text}
    if isinstance(message, AIMessage):
        return _assistant(message, text, caps)
    if isinstance(message, ToolMessage | FunctionMessage):
        return _tool_result(message, text, caps)
    if isinstance(message, ChatMessage):
        return {"role": message.role, "content": text}
    raise ValueError(f"ChatAgentRT cannot render a {type(message).__name__}")


def _assistant(message: AIMessage, text: str, caps: TemplateCaps) -> dict[str, Any]:
    calls = message.tool_calls
    if not calls:
        return {"role": "assistant", "content": text}
    if caps.renders_tool_calls:
        return {"role": "assistant", "content": text, "tool_calls": [
            {"id": c.get("id"), "type": "function",
             "function": {"name": c["name"], "arguments": c["args"]}} for c in calls]}
    blocks = [format_tool_call(c["name"], c["args"]) for c in calls]
    return {"role": "assistant", "content": "\n".join([text, *blocks] if text else blocks)}


def _tool_result(message: ToolMessage | FunctionMessage, text: str,
                 caps: TemplateCaps) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "tool", "content": text}
    if message.name:
        out["name"] = message.name
    if isinstance(message, ToolMessage):
        out["tool_call_id"] = message.tool_call_id
    if not caps.renders_tool_calls:
        out["content"] = f"<tool_response>\n{text}\n</tool_response>"
    return out


def _text(message: BaseMessage) -> str:
    """The text of a message; raises on media blocks (the engine runs text-only models)."""
    content = message.content
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif block.get("type") == "text":
            parts.append(block.get("text", ""))
        elif block.get("type") not in _SKIPPED_BLOCKS:
            raise ValueError(f"ChatAgentRT runs text-only models; cannot send a "
                             f"{block.get('type')!r} content block")
    return "".join(parts)


def _tool_lines(tools: Sequence[dict[str, Any]]) -> str:
    return "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)


def _with_system_note(dicts: list[dict[str, Any]], note: str) -> list[dict[str, Any]]:
    if dicts and dicts[0]["role"] == "system":
        return [{**dicts[0], "content": _join(dicts[0]["content"], note)}, *dicts[1:]]
    return [{"role": "system", "content": note}, *dicts]


def _join(first: str | None, second: str | None) -> str:
    return "\n\n".join(p for p in (first, second) if p)


def _try_render(tokenizer: Any, messages: list[dict[str, Any]], **kwargs: Any) -> str:
    try:
        return tokenizer.apply_chat_template(messages, tokenize=False, **kwargs)
    except Exception:  # noqa: BLE001 - a template that rejects the probe does not render it
        return ""
