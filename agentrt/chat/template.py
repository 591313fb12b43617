"""OpenAI-format chat messages → the model's own chat template → one prompt string.

The prompt is rendered by the tokenizer's chat template (``apply_chat_template``), passing
``tools=`` and assistant ``tool_calls`` through when the template renders them. Templates that
do not (SmolLM2's renders only ``role`` and ``content``) get the Hermes / Qwen2.5 convention
written into the messages instead: the tool signatures in the system message, an assistant's
calls as ``<tool_call>`` blocks in its content, tool results as ``<tool_response>`` blocks in
a ``tool`` turn — the same text :mod:`agentrt.agent.tool_loop` appends after a call. What a
template renders is found once per template by rendering probe messages.

Messages are OpenAI chat-completion dicts: ``role`` (system, developer, user, assistant,
tool), ``content`` (a string, a list of ``{"type": "text"}`` parts, or None), an assistant's
``tool_calls`` (arguments as a dict or a JSON string), a tool's ``tool_call_id`` / ``name``.
Every integration converts its own message type into this form and renders through here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentrt.chat.tool_calls import format_tool_call

__all__ = ["TemplateCaps", "message_text", "render_prompt", "template_caps"]

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
_SKIPPED_PARTS = frozenset({"tool_use", "tool_call", "tool_call_chunk", "invalid_tool_call",
                            "thinking", "reasoning", "redacted_thinking"})
_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
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


def render_prompt(tokenizer: Any, messages: Sequence[Mapping[str, Any]],
                  tools: Sequence[dict[str, Any]] = (), *, system_note: str | None = None
                  ) -> str:
    """The generation prompt for OpenAI-format ``messages`` and ``tools`` (+ a system note).

    Raises ``ValueError`` for a message the engine cannot render (an unknown role, a media
    part: the engine runs text-only models).
    """
    caps = template_caps(tokenizer)
    dicts = [_to_template(m, caps) for m in messages]
    extra: dict[str, Any] = {}
    if tools and caps.renders_tools:
        extra["tools"] = list(tools)
    elif tools:
        system_note = _join(_TOOLS_PROMPT.format(tools=_tool_lines(tools)), system_note)
    if system_note:
        dicts = _with_system_note(dicts, system_note)
    return tokenizer.apply_chat_template(dicts, add_generation_prompt=True, tokenize=False,
                                         **extra)


def message_text(content: Any) -> str:
    """The text of a message's ``content`` (string, parts, or None); raises on media parts."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list | tuple):
        raise ValueError(f"message content must be a string, a list of parts or null, "
                         f"got {type(content).__name__}")
    parts: list[str] = []
    for part in content:
        if isinstance(part, str):
            parts.append(part)
        elif not isinstance(part, Mapping):
            raise ValueError(f"a content part must be an object, got {type(part).__name__}")
        elif part.get("type") == "text":
            parts.append(_text_part(part))
        elif part.get("type") not in _SKIPPED_PARTS:
            raise ValueError(f"agentrt runs text-only models; cannot send a "
                             f"{part.get('type')!r} content part")
    return "".join(parts)


def _text_part(part: Mapping[str, Any]) -> str:
    text = part.get("text") or ""
    if not isinstance(text, str):
        raise ValueError(f"a text content part's text must be a string, got "
                         f"{type(text).__name__}")
    return text


def _to_template(message: Mapping[str, Any], caps: TemplateCaps) -> dict[str, Any]:
    role = message.get("role")
    if role not in _ROLES:
        raise ValueError(f"unknown message role {role!r}; expected one of {sorted(_ROLES)}")
    text = message_text(message.get("content"))
    if role == "developer":
        return {"role": "system", "content": text}
    if role == "assistant":
        return _assistant(message.get("tool_calls") or [], text, caps)
    if role in ("tool", "function"):
        return _tool_result(message, text, caps)
    return {"role": role, "content": text}


def _assistant(calls: Any, text: str, caps: TemplateCaps) -> dict[str, Any]:
    if not calls:
        return {"role": "assistant", "content": text}
    if not isinstance(calls, list | tuple):
        raise ValueError(f"an assistant message's tool_calls must be a list, got "
                         f"{type(calls).__name__}")
    parsed = [_call_parts(i, c) for i, c in enumerate(calls)]
    if caps.renders_tool_calls:
        return {"role": "assistant", "content": text, "tool_calls": [
            {"id": c.get("id"), "type": "function",
             "function": {"name": name, "arguments": args}}
            for c, (name, args) in zip(calls, parsed, strict=True)]}
    blocks = [format_tool_call(name, args) for name, args in parsed]
    return {"role": "assistant", "content": "\n".join([text, *blocks] if text else blocks)}


def _call_parts(index: int, call: Any) -> tuple[str, dict[str, Any]]:
    """``(name, arguments)`` of an assistant's ``tool_calls[index]``; ``ValueError`` for an
    entry that is not ``{"function": {"name": str, "arguments": str | dict | None}}``."""
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping):
        raise ValueError(f"tool_calls[{index}] must be an object with a 'function' object, "
                         f"got {_short(call)}")
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"tool_calls[{index}].function.name must be a non-empty string, "
                         f"got {_short(name)}")
    return name, _arguments(function.get("arguments"))


def _arguments(arguments: Any) -> dict[str, Any]:
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as exc:
            raise ValueError(f"tool call arguments are not valid JSON: "
                             f"{_short(arguments)}") from exc
    if not isinstance(arguments, dict):
        raise ValueError(f"tool call arguments must be a JSON object, got {_short(arguments)}")
    return arguments


def _tool_result(message: Mapping[str, Any], text: str, caps: TemplateCaps) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "tool", "content": text}
    if message.get("name"):
        out["name"] = message["name"]
    if message.get("tool_call_id"):
        out["tool_call_id"] = message["tool_call_id"]
    if not caps.renders_tool_calls:
        out["content"] = f"<tool_response>\n{text}\n</tool_response>"
    return out


def _short(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 80 else shown[:77] + "..."


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
