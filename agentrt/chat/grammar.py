"""What the model may write, as xgrammar structural tags and JSON schemas.

With tools bound, decoding is constrained so that every tool call is written exactly as
the model family's :class:`~agentrt.chat.formats.ToolCallFormat` writes it (and as its
template shows it back), with arguments that match that tool's JSON schema:

- ``tool_choice="auto"``: free text; once a call starts it must become a call to one of the
  tools (then free text again). Hermes: a call starts at ``<tool_`` (small models like to
  imitate the tool's turn, ``<tool_response>``; in free text, ``<tool_`` only opens a call);
  Llama 3: at ``{"name": ``; Mistral: at ``[TOOL_CALLS]``, a list of calls (v11+: one call,
  ``[TOOL_CALLS]name[ARGS]{…}``, with a 9-alphanumeric id after ``[CALL_ID]`` where the
  template writes one); Qwen3-Coder: at ``<tool_call>``, ``<parameter=…>`` blocks that xgrammar
  checks against the schema (its ``qwen_xml`` style).
- ``"required"`` or one tool's name: nothing but calls (to that tool), at least one.
- ``"none"``: free text in which no call can start.

A template with ``<think>`` reasoning may reason first: an output that starts inside a
``<think>`` block (the prompt opened it) must close it before the answer; otherwise an
optional ``<think>…</think>`` block may come first, whatever the ``tool_choice``.

One call per message unless ``parallel_tool_calls=True`` (small models tend to repeat a call).
Structured output (``response_format``, OpenAI's ``json_schema`` / ``json_object`` forms)
constrains the answer to JSON (of the schema); with tools bound too, the answer is either
that JSON or tool calls.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from agentrt.chat.formats import HERMES, Reasoning, ToolCallFormat, reasoning_tags

__all__ = [
    "ToolChoice",
    "after_reasoning",
    "check_tool_names",
    "normalize_tool_choice",
    "output_structural_tag",
    "response_schema",
    "tool_call_format",
]

ToolChoice = str  # "auto" | "none" | "required" | the name of one bound tool
_MAX_JSON_WHITESPACE = 1  # NOTE: blocks runaway whitespace, still allows json.dumps spacing
# NOTE: in free text, `<tool_` can only open a call (never the tool's own `<tool_response>`)
_TRIGGER = "<tool_"
_NOT_IN_ANSWERS = ["<tool_", "</tool_"]


def check_tool_names(names: Sequence[str]) -> None:
    """A ``ValueError`` naming the tool names given more than once (a call names the tool it
    calls, so each tool needs its own name)."""
    if twice := sorted(name for name, n in Counter(names).items() if n > 1):
        raise ValueError(f"more than one tool is named {', '.join(map(repr, twice))}; "
                         "each tool needs its own name (a call names the tool it calls)")


def normalize_tool_choice(tool_choice: Any, tool_names: Sequence[str]) -> ToolChoice:
    """A LangChain / LlamaIndex / OpenAI ``tool_choice`` → ``"auto" | "none" | "required" |
    <tool name>``."""
    if tool_choice is None or tool_choice == "auto":
        return "auto"
    if tool_choice is False or tool_choice == "none":
        return "none"
    if not tool_names:
        raise ValueError(f"tool_choice={tool_choice!r} needs at least one bound tool")
    if tool_choice in ("any", "required"):
        return "required"
    if tool_choice is True:
        if len(tool_names) != 1:
            raise ValueError("tool_choice=True needs exactly one bound tool; "
                             f"the bound tools are: {', '.join(tool_names)}")
        return tool_names[0]
    name = tool_choice
    if isinstance(tool_choice, dict):
        function = tool_choice.get("function")
        name = (function.get("name") if isinstance(function, dict) else None) \
            or tool_choice.get("name")
    if not isinstance(name, str) or name not in tool_names:
        raise ValueError(f"tool_choice {tool_choice!r} does not name a bound tool; "
                         f"the bound tools are: {', '.join(tool_names)}")
    return name


def output_structural_tag(tools: Sequence[dict[str, Any]], tool_choice: ToolChoice,
                          response_format: dict[str, Any] | None = None, *,
                          parallel_tool_calls: bool = False,
                          tool_format: ToolCallFormat = HERMES,
                          reasoning: Reasoning = "none") -> dict[str, Any] | None:
    """The xgrammar structural tag for the whole answer (None: nothing to constrain)."""
    if not tools and response_format is None:
        return None
    options = {"parallel_tool_calls": parallel_tool_calls, "tool_format": tool_format}
    if response_format is None:
        fmt = tool_call_format(tools, tool_choice, **options)
    else:
        fmt = _json_format(response_schema(response_format))
        if tools and tool_choice != "none":
            calls_only = "required" if tool_choice == "auto" else tool_choice
            calls = tool_call_format(tools, calls_only, **options)
            fmt = calls if tool_choice != "auto" else {"type": "or", "elements": [calls, fmt]}
    return {"type": "structural_tag", "format": after_reasoning(fmt, reasoning)}


def response_schema(response_format: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON schema of an OpenAI ``response_format`` (None: any JSON object)."""
    kind = response_format.get("type")
    if kind == "json_object":
        return None
    if kind == "json_schema" and isinstance(response_format.get("json_schema"), dict):
        spec = response_format["json_schema"]
        schema = spec.get("schema", spec)
        if not isinstance(schema, dict):
            raise ValueError(f"response_format.json_schema.schema must be a JSON object, got "
                             f"{type(schema).__name__}")
        return schema
    raise ValueError("response_format must be {'type': 'json_object'} or {'type': "
                     f"'json_schema', 'json_schema': {{'schema': ...}}}}, got {response_format!r}")


def tool_call_format(tools: Sequence[dict[str, Any]], tool_choice: ToolChoice,
                     *, parallel_tool_calls: bool = False,
                     tool_format: ToolCallFormat = HERMES) -> dict[str, Any]:
    """The structural-tag ``format`` (see the module docstring for each choice)."""
    if tool_format.name == HERMES.name:
        return _hermes_format(tools, tool_choice, parallel_tool_calls)
    if tool_choice == "none":
        return {"type": "any_text", "excludes": _markers(tool_format)}
    functions = _chosen(tools, tool_choice)
    tags = [_call_tag(f, tool_format) for f in functions]
    calls = {"type": "tags_with_separator", "tags": tags, "separator": tool_format.separator,
             "at_least_one": True, "stop_after_first": not parallel_tool_calls}
    if tool_format.is_list:  # one list of calls: [TOOL_CALLS] [call, call]
        calls = {"type": "tag", "begin": tool_format.list_begin, "content": calls,
                 "end": tool_format.list_end}
    if tool_choice != "auto":
        return calls
    if tool_format.is_list:
        return {"type": "triggered_tags", "triggers": list(tool_format.open_tags),
                "tags": [calls], "stop_after_first": True}
    if not tool_format.bare_opens:  # the open tag begins each call: [TOOL_CALLS]name[ARGS]
        return {"type": "triggered_tags", "triggers": list(tool_format.open_tags), "tags": tags,
                "stop_after_first": not parallel_tool_calls}
    return {"type": "triggered_tags", "triggers": list(tool_format.bare_opens), "tags": tags,
            "excludes": list(tool_format.open_tags), "stop_after_first": not parallel_tool_calls}


def _hermes_format(tools: Sequence[dict[str, Any]], tool_choice: ToolChoice,
                   parallel_tool_calls: bool) -> dict[str, Any]:
    if tool_choice == "none":
        return {"type": "any_text", "excludes": _NOT_IN_ANSWERS}
    tags = [_call_tag(f, HERMES) for f in _chosen(tools, tool_choice)]
    if tool_choice == "auto":
        return {"type": "triggered_tags", "triggers": [_TRIGGER], "tags": tags,
                "excludes": ["</tool_"], "stop_after_first": not parallel_tool_calls}
    return {"type": "tags_with_separator", "tags": tags, "separator": "\n",
            "at_least_one": True, "stop_after_first": not parallel_tool_calls}


def _chosen(tools: Sequence[dict[str, Any]], tool_choice: ToolChoice) -> list[dict[str, Any]]:
    functions = [t["function"] for t in tools]
    if tool_choice not in ("auto", "required"):
        functions = [f for f in functions if f["name"] == tool_choice]
    return functions


def _markers(tool_format: ToolCallFormat) -> list[str]:
    return [*tool_format.open_tags, *tool_format.bare_opens]


def after_reasoning(fmt: dict[str, Any], reasoning: Reasoning) -> dict[str, Any]:
    """The structural-tag format ``fmt`` after the reasoning block of ``reasoning``'s syntax
    (``<think>`` or Magistral's ``[THINK]``): the rest of the block when the prompt opened
    it, else an optional whole block (in which a call marker is only text, as the parser
    reads it); ``fmt`` itself for ``"none"``."""
    tags = reasoning_tags(reasoning)
    if tags is None:
        return fmt
    think = {"type": "tag", "begin": "" if tags.is_open else tags.open,
             "content": {"type": "any_text"}, "end": tags.close + tags.after}
    if not tags.is_open:
        think = {"type": "optional", "content": think}
    return {"type": "sequence", "elements": [think, fmt]}


def _json_format(schema: dict[str, Any] | None) -> dict[str, Any]:
    json_schema = schema if schema is not None else {"type": "object"}
    return {"type": "json_schema", "json_schema": json_schema,
            "max_whitespace_cnt": _MAX_JSON_WHITESPACE}


def _call_tag(function: dict[str, Any], tool_format: ToolCallFormat) -> dict[str, Any]:
    schema = function.get("parameters") or {"type": "object", "properties": {}}
    content: dict[str, Any] = {"type": "json_schema", "json_schema": schema,
                               "max_whitespace_cnt": _MAX_JSON_WHITESPACE}
    if tool_format.is_xml:  # <parameter=key>value</parameter> blocks, the schema's values
        content["style"] = "qwen_xml"
    if tool_format.call_id_tag:  # [CALL_ID]<id>[ARGS]{arguments}
        content = {"type": "sequence", "elements": [
            {"type": "regex", "pattern": f"[A-Za-z0-9]{{{tool_format.call_id_len}}}"},
            {"type": "const_string", "value": tool_format.args_tag}, content]}
    return {"type": "tag", "begin": tool_format.call_prefix(function["name"]),
            "content": content, "end": tool_format.call_suffix}
