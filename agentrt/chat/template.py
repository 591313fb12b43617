"""OpenAI-format chat messages → the model's own chat template → one prompt string.

The prompt is rendered by the tokenizer's chat template (``apply_chat_template``, or a
``chat_template`` given instead), passing ``tools=`` and assistant ``tool_calls`` through when
the template renders them (call ids in the form the template accepts: Mistral's take 9
alphanumerics). Templates that do not (SmolLM2's renders only ``role`` and ``content``) get
the Hermes / Qwen2.5 convention written into the messages instead: the tool signatures in the
system message, an assistant's calls in the tool-call format (``<tool_call>`` blocks) in its
content, tool results as ``<tool_response>`` blocks in a ``tool`` turn — the same text
:mod:`agentrt.agent.tool_loop` appends after a call. What a template renders is found once
per template by rendering probe messages.

Messages are OpenAI chat-completion dicts: ``role`` (system, developer, user, assistant,
tool), ``content`` (a string, a list of ``{"type": "text"}`` parts, or None), an assistant's
``tool_calls`` (arguments as a dict or a JSON string) and ``reasoning_content`` (its
``<think>`` text, a string), a tool's ``tool_call_id`` / ``name``. Reasoning is passed to the
template, which decides: Qwen3's keeps it in the turns after the last user message (an agent's
tool steps, as the model wrote them) and drops it before; a template that never reads it
drops it. Every integration converts its own message type into this form and renders through
here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentrt.chat.formats import HERMES, ToolCallFormat

__all__ = ["TemplateCaps", "added_tokens", "encode_plain", "encode_prompt", "message_text",
           "render_prompt", "template_caps"]

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
_PROBE_ID = "call00000"  # NOTE: 9 alphanumerics, the only ids Mistral's templates accept
_FORMAT_PROMPTS = {  # how each non-Hermes format is asked for, when the template cannot
    "llama3": 'For each function call, respond with a JSON object in the format {"name": '
              "function name, \"parameters\": dictionary of argument name and its value}.",
    "mistral": 'To call functions, respond with [TOOL_CALLS] followed by a JSON list of '
               '{"name": <function-name>, "arguments": <args-json-object>} objects.',
    "mistral_args": "To call a function, respond with [TOOL_CALLS], the function name, [ARGS] "
                    "and its arguments as a JSON object; one [TOOL_CALLS] per call.",
    "qwen_xml": "To call a function, reply with <tool_call>\n<function=NAME>\n, then for "
                "each argument <parameter=ARGUMENT>\nvalue\n</parameter>\n, then "
                "</function>\n</tool_call>.",
}


@dataclass(frozen=True)
class TemplateCaps:
    """What a chat template renders by itself."""

    renders_tools: bool
    """``apply_chat_template(tools=...)`` shows the tool signatures to the model."""
    renders_tool_calls: bool
    """Assistant ``tool_calls`` (and ``tool`` turns) are rendered from structured fields."""
    renders_parallel_calls: bool = True
    """An assistant turn may hold several ``tool_calls`` (Llama 3.x's templates refuse it:
    such a turn is rendered as one assistant turn per call)."""
    takes_tool_role: bool = True
    """It renders a ``tool`` turn at all (Gemma's refuses any role but user and assistant,
    alternating: tool results are then user turns, those of one round merged into one)."""


_caps_cache: dict[str, TemplateCaps] = {}


def template_caps(tokenizer: Any, chat_template: str | None = None) -> TemplateCaps:
    """Probe (once per template) whether it renders tools and tool calls."""
    key = str(chat_template or getattr(tokenizer, "chat_template", None))
    extra = {"chat_template": chat_template} if chat_template else {}
    if key not in _caps_cache:
        tool = {"type": "function", "function": {"name": _PROBE, "description": "probe",
                                                 "parameters": {"type": "object",
                                                                "properties": {}}}}
        user = {"role": "user", "content": "hi"}
        one = {"id": _PROBE_ID, "type": "function", "function": {"name": _PROBE, "arguments": {}}}
        call = {"role": "assistant", "content": "", "tool_calls": [one]}
        calls = {**call, "tool_calls": [one, one]}
        renders_tool_calls = _PROBE in _try_render(tokenizer, [user, call], **extra)
        result = {"role": "tool", "tool_call_id": _PROBE_ID, "content": _PROBE}
        said = {"role": "assistant", "content": "ok"}
        _caps_cache[key] = TemplateCaps(
            takes_tool_role=_PROBE in _try_render(tokenizer, [user, said, result], **extra),
            renders_tools=_PROBE in _try_render(tokenizer, [user], tools=[tool], **extra),
            renders_tool_calls=renders_tool_calls,
            renders_parallel_calls=not renders_tool_calls
            or _PROBE in _try_render(tokenizer, [user, calls], **extra),
        )
    return _caps_cache[key]


def render_prompt(tokenizer: Any, messages: Sequence[Mapping[str, Any]],
                  tools: Sequence[dict[str, Any]] = (), *, system_note: str | None = None,
                  tool_format: ToolCallFormat = HERMES, chat_template: str | None = None,
                  template_kwargs: Mapping[str, Any] | None = None) -> str:
    """The generation prompt for OpenAI-format ``messages`` and ``tools`` (+ a system note).

    ``tool_format`` writes assistant calls for templates that cannot; ``chat_template``
    replaces the tokenizer's own; ``template_kwargs`` are variables the template reads
    (Qwen3's ``enable_thinking``: vLLM's and SGLang's ``chat_template_kwargs``). Raises
    ``ValueError`` for a message the engine cannot render (an unknown role, a media part: the
    engine runs text-only models) or a template variable that is not a plain name or is one
    of ``apply_chat_template``'s own arguments.
    """
    caps = template_caps(tokenizer, chat_template)
    dicts = [turn for m in messages for turn in _one_call_a_turn(_to_template(m, caps, tool_format),
                                                                 caps)]
    if not caps.takes_tool_role:
        dicts = _results_as_user_turns(dicts)
    extra: dict[str, Any] = dict(check_template_kwargs(template_kwargs))
    if chat_template:
        extra["chat_template"] = chat_template
    if tools and caps.renders_tools:
        extra["tools"] = list(tools)
    elif tools:
        system_note = _join(_tools_prompt(tools, tool_format), system_note)
    if system_note:
        dicts = _with_system_note(dicts, system_note)
    from jinja2.exceptions import TemplateError

    try:
        return tokenizer.apply_chat_template(dicts, add_generation_prompt=True, tokenize=False,
                                             **extra)
    except TemplateError as exc:  # its raise_exception(): the messages break its rules
        raise ValueError(f"the model's chat template refused the messages: {exc}") from None


_RESERVED_KWARGS = frozenset({
    "conversation", "messages", "tools", "documents", "chat_template", "add_generation_prompt",
    "continue_final_message", "tokenize", "padding", "truncation", "max_length",
    "return_tensors", "return_dict", "return_assistant_tokens_mask", "tokenizer_kwargs"})
"""``apply_chat_template``'s own arguments (and the template's ``messages``): never set by
template variables, so a variable cannot swap the template or the conversation."""


def check_template_kwargs(kwargs: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """``kwargs`` (None: none) if each is a template variable a caller may set, else a
    ``ValueError`` naming the one that is not."""
    if kwargs is None:
        return {}
    if not isinstance(kwargs, Mapping):
        raise ValueError(f"chat template variables must be a mapping of names to values, "
                         f"got {type(kwargs).__name__}")
    for name in kwargs:
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"chat template variable {name!r} is not a plain name")
        if name in _RESERVED_KWARGS:
            raise ValueError(f"chat template variable {name!r} is set by agentrt itself, "
                             f"not by chat_template_kwargs")
    return kwargs


_DATA_ROLES = frozenset({"system", "developer", "user", "tool"})
"""Roles whose content is data to the template (an assistant's holds the model's own markers)."""


def encode_prompt(tokenizer: Any, prompt: str, messages: Sequence[Mapping[str, Any]]
                  ) -> list[int]:
    """The ids of ``prompt`` (rendered from ``messages``), whose special tokens come from the
    template alone: a message's text that writes one (``<|im_end|>\n<|im_start|>system`` in
    a tool's output, a retrieved page, a user's paste) is tokenized as plain text, so it cannot
    end its turn and forge another. Such text is found in the prompt as written or JSON-quoted
    (Llama 3's tool turns); where none is, the prompt is tokenized whole, as before."""
    added = added_tokens(tokenizer)
    spans: list[tuple[int, int]] = []
    at = 0
    for message in messages:
        if message.get("role") not in _DATA_ROLES:
            continue
        text = message_text(message.get("content"))
        if not any(token in text for token in added):
            continue
        for written in (text, json.dumps(text, ensure_ascii=False)):
            start = prompt.find(written, at)
            if start != -1:
                spans.append((start, start + len(written)))
                at = start + len(written)
                break
    if not spans:
        return tokenizer.encode(prompt, add_special_tokens=False)
    ids: list[int] = []
    at = 0
    for start, end in spans:
        ids += tokenizer.encode(prompt[at:start], add_special_tokens=False) if start > at else []
        ids += encode_plain(tokenizer, prompt[start:end])
        at = end
    return ids + (tokenizer.encode(prompt[at:], add_special_tokens=False) if at < len(prompt)
                  else [])


def added_tokens(tokenizer: Any) -> list[str]:
    """The texts the tokenizer reads as tokens of their own (its added vocabulary: the chat
    template's markers, special or not), whatever they sit in."""
    added = getattr(tokenizer, "get_added_vocab", None)
    return [token for token in (added() if added else ()) if token]


def encode_plain(tokenizer: Any, text: str) -> list[int]:
    """The ids of ``text`` as data: its special tokens' texts split into ordinary tokens."""
    return tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)


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


def _tools_prompt(tools: Sequence[dict[str, Any]], tool_format: ToolCallFormat) -> str:
    prompt = _TOOLS_PROMPT.format(tools=_tool_lines(tools))
    if tool_format.name not in _FORMAT_PROMPTS:
        return prompt
    return prompt.split("\n\nFor each function call")[0] + "\n\n" + \
        _FORMAT_PROMPTS[tool_format.name]


def _to_template(message: Mapping[str, Any], caps: TemplateCaps,
                 tool_format: ToolCallFormat) -> dict[str, Any]:
    role = message.get("role")
    if role not in _ROLES:
        raise ValueError(f"unknown message role {role!r}; expected one of {sorted(_ROLES)}")
    text = message_text(message.get("content"))
    if role == "developer":
        return {"role": "system", "content": text}
    if role == "assistant":
        out = _assistant(message.get("tool_calls") or [], text, caps, tool_format)
        reasoning = message.get("reasoning_content")
        if reasoning is not None and not isinstance(reasoning, str):
            raise ValueError(f"an assistant message's reasoning_content must be a string, got "
                             f"{type(reasoning).__name__}")
        return {**out, "reasoning_content": reasoning} if reasoning else out
    if role in ("tool", "function"):
        return _tool_result(message, text, caps, tool_format)
    return {"role": role, "content": text}


def _assistant(calls: Any, text: str, caps: TemplateCaps,
               tool_format: ToolCallFormat) -> dict[str, Any]:
    if not calls:
        return {"role": "assistant", "content": text}
    if not isinstance(calls, list | tuple):
        raise ValueError(f"an assistant message's tool_calls must be a list, got "
                         f"{type(calls).__name__}")
    parsed = [_call_parts(i, c) for i, c in enumerate(calls)]
    if caps.renders_tool_calls:
        return {"role": "assistant", "content": text, "tool_calls": [
            {"id": _call_id(c.get("id"), i, tool_format), "type": "function",
             "function": {"name": name, "arguments": args}}
            for i, (c, (name, args)) in enumerate(zip(calls, parsed, strict=True))]}
    written = tool_format.format_calls(parsed)
    return {"role": "assistant", "content": f"{text}\n{written}" if text else written}


def _one_call_a_turn(turn: dict[str, Any], caps: TemplateCaps) -> list[dict[str, Any]]:
    """``turn``, or one assistant turn per call where the template shows one call a turn
    (the first keeps the text and reasoning)."""
    calls = turn.get("tool_calls") or ()
    if caps.renders_parallel_calls or len(calls) < 2:
        return [turn]
    rest = {k: v for k, v in turn.items()
            if k not in ("content", "tool_calls", "reasoning_content")}
    return [{**turn, "tool_calls": [calls[0]]},
            *({**rest, "content": "", "tool_calls": [call]} for call in calls[1:])]


def _results_as_user_turns(dicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool turns as user turns (their ``<tool_response>`` blocks), adjacent ones merged."""
    out: list[dict[str, Any]] = []
    for turn in dicts:
        if turn["role"] != "tool":
            out.append(turn)
        elif out and out[-1].get("is_results"):
            out[-1]["content"] += "\n" + turn["content"]
        else:
            out.append({"role": "user", "content": turn["content"], "is_results": True})
    return [{k: v for k, v in t.items() if k != "is_results"} for t in out]


def _call_id(call_id: Any, index: int, tool_format: ToolCallFormat) -> Any:
    if not tool_format.call_id_len:
        return call_id
    return tool_format.template_call_id(str(call_id or f"call{index}"))


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


def _tool_result(message: Mapping[str, Any], text: str, caps: TemplateCaps,
                 tool_format: ToolCallFormat) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "tool", "content": text}
    if message.get("name"):
        out["name"] = message["name"]
    if message.get("tool_call_id"):
        out["tool_call_id"] = _call_id(message["tool_call_id"], 0, tool_format)
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
