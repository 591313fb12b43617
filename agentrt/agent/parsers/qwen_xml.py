"""Qwen3-Coder's XML tool calls, streamed by value.

Qwen3-Coder writes a call as ``<tool_call>``, ``<function=NAME>``, one ``<parameter=KEY>``
block per argument holding the value as text, then ``</function>`` and ``</tool_call>``::

    <tool_call>
    <function=search>
    <parameter=query>
    café prices
    </parameter>
    </function>
    </tool_call>

The template writes one newline after ``<parameter=KEY>`` and one before ``</parameter>``;
they are not part of the value. ``ToolName`` comes at the ``>`` of ``<function=NAME>`` (the
tool may start there), an ``argument`` piece at each ``</parameter>`` and ``CallEnd`` at
``</function>``. A value is a string as written when the tool's JSON schema says so
(``schemas``: tool name → its parameters schema, :func:`tool_schemas` of the tools — the chat
layer's final parse and the partial-execution hook type values the same way) — then it also
streams as ``delta`` pieces cut after each non-word character; otherwise it is read as JSON
(``3``, ``true``, ``[1, 2]``), and as the string written when it is not JSON. Anything else
where a tag should be, a parameter given twice, or output that ends inside a call is a
:class:`ParseError` as it is written, and the parser looks for the next ``<tool_call>``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from agentrt.agent.parsers.base import (
    BaseStreamParser,
    CallEnd,
    CallStart,
    Event,
    ParseError,
    Piece,
    ToolName,
)
from agentrt.agent.parsers.json_toolcall import _tag_prefix_suffix

__all__ = ["QwenXmlToolCallParser", "tool_schemas"]

OPEN_TAG = "<tool_call>"
FUNCTION, END_FUNCTION = "<function=", "</function>"
PARAMETER, END_PARAMETER = "<parameter=", "</parameter>"
_NAME_CHARS = re.compile(r"[A-Za-z0-9_.:-]*")  # NOTE: OpenAI's names, plus "." and ":"
_KEY_CHARS = re.compile(r"[^<>\n]*")
_MAX_NAME_LEN = 256
_WHITESPACE = " \t\r\n"
_PYTHON_LITERALS = {"True": True, "False": False, "None": None}  # the template's `|string`


def tool_schemas(tools: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Tool name → its parameters' JSON schema, from OpenAI tool dicts (``Tool.spec()``)."""
    return {t["function"]["name"]: t["function"].get("parameters") or {} for t in tools}


class QwenXmlToolCallParser(BaseStreamParser):
    """Streams ``<tool_call><function=NAME><parameter=KEY>value</parameter>…`` calls: the name
    first, then each parameter. Calls are always read strictly; ``is_strict`` is accepted for
    the JSON parsers' signature."""

    syntax = "qwen_xml"

    def __init__(self, *, is_strict: bool = True,
                 schemas: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        super().__init__()
        self.is_strict = is_strict
        self.schemas = dict(schemas or {})
        self._state = "text"  # text | function | name | body | key | value
        self._held = ""  # text that may be the start of the next tag, or a name / key so far
        self._name = ""
        self._key = ""
        self._keys: set[str] = set()
        self._value: list[str] = []
        self._delta: list[str] | None = None  # None: the value is not streamed
        self._is_first = True  # the value's first character (a newline there is dropped)
        self._newline = False  # a newline held back: dropped when </parameter> follows

    @property
    def markers(self) -> tuple[str, ...]:
        return (OPEN_TAG,)

    def _feed_text(self, text: str) -> list[Event]:
        events: list[Event] = []
        while text:
            data, self._held = self._held + text, ""
            text = getattr(self, f"_in_{self._state}")(data, events)
        return events

    def _close(self) -> list[Event]:
        state, self._state, self._held = self._state, "text", ""
        if state == "text":
            return []
        return [ParseError(f"truncated tool call: the output ended in its {state}")]

    # --- one method per state: consume ``data``, return what is left for the next state ---
    def _in_text(self, data: str, events: list[Event]) -> str:
        found = data.find(OPEN_TAG)
        if found == -1:
            self._held = _tag_prefix_suffix(data, OPEN_TAG)
            return ""
        events.append(CallStart(self.syntax))
        self._state, self._keys = "function", set()
        return data[found + len(OPEN_TAG) :]

    def _in_function(self, data: str, events: list[Event]) -> str:
        return self._expect(data, {FUNCTION: "name"}, events)

    def _in_body(self, data: str, events: list[Event]) -> str:
        rest = self._expect(data, {PARAMETER: "key", END_FUNCTION: "end"}, events)
        if self._state == "end":
            self._state = "text"
            events.append(CallEnd())
        return rest

    def _expect(self, data: str, tags: dict[str, str], events: list[Event]) -> str:
        """Whitespace, then one of ``tags`` (→ its next state); else a ParseError."""
        stripped = data.lstrip(_WHITESPACE)
        for tag, state in tags.items():
            if stripped.startswith(tag):
                self._state = state
                return stripped[len(tag) :]
            if tag.startswith(stripped):
                self._held = stripped
                return ""
        wanted = " or ".join(f"{t}…>" if t.endswith("=") else t for t in tags)
        return self._fail(f"invalid tool call: expected {wanted}, got {stripped[0]!r}", events,
                          stripped[1:])

    def _in_name(self, data: str, events: list[Event]) -> str:
        name, rest = self._read_name(data, _NAME_CHARS, "tool name", events)
        if rest is None or self._state == "text":
            return rest or ""
        self._name, self._state = name, "body"
        events.append(ToolName(name))
        return rest

    def _in_key(self, data: str, events: list[Event]) -> str:
        key, rest = self._read_name(data, _KEY_CHARS, "parameter name", events)
        if rest is None or self._state == "text":
            return rest or ""
        if key in self._keys:
            return self._fail(f"invalid tool call: parameter {key!r} given twice", events, rest)
        self._keys.add(key)
        self._key, self._state, self._value = key, "value", []
        self._is_first, self._newline = True, False
        self._delta = [] if self._type(key) == "string" else None
        return rest

    def _read_name(self, data: str, chars: re.Pattern[str], what: str,
                   events: list[Event]) -> tuple[str, str | None]:
        """A name up to ``>``: (name, the text after ``>``); (…, None) until ``>`` comes."""
        end = data.find(">")
        value = data if end == -1 else data[:end]
        match = chars.match(value)
        valid = match.end() if match else 0
        if valid < len(value) or len(value) > _MAX_NAME_LEN or (end != -1 and not value):
            bad = repr(value[valid]) if valid < len(value) else "no '>'" if value else "nothing"
            return "", self._fail(f"invalid tool call: {bad} in the {what}", events,
                                  data[valid + 1 :])
        if end == -1:
            self._held = data
            return "", None
        return value, data[end + 1 :]

    def _in_value(self, data: str, events: list[Event]) -> str:
        found = data.find(END_PARAMETER)
        body = data if found == -1 else data[:found]
        if found == -1:
            self._held = _tag_prefix_suffix(data, END_PARAMETER)
            body = data[: len(data) - len(self._held)]
        for c in body:
            self._value_char(c, events)
        if found == -1:
            return ""
        self._emit_delta(events)
        text = "".join(self._value)
        events.append(Piece("argument", key=self._key, value=self._decode(self._key, text)))
        self._state = "body"
        return data[found + len(END_PARAMETER) :]

    # --- values --------------------------------------------------------------------------------
    def _value_char(self, c: str, events: list[Event]) -> None:
        is_first, self._is_first = self._is_first, False
        if is_first and c == "\n":
            return
        if self._newline:
            self._newline = False
            self._add("\n", events)
        if c == "\n":
            self._newline = True
        else:
            self._add(c, events)

    def _add(self, c: str, events: list[Event]) -> None:
        self._value.append(c)
        if self._delta is None:
            return
        self._delta.append(c)
        if not (c.isalnum() or c == "_"):
            self._emit_delta(events)

    def _emit_delta(self, events: list[Event]) -> None:
        if self._delta:
            events.append(Piece("delta", "".join(self._delta), key=self._key))
            self._delta = []

    def _type(self, key: str) -> Any:
        schema = self.schemas.get(self._name) or {}
        return ((schema.get("properties") or {}).get(key) or {}).get("type")

    def _decode(self, key: str, text: str) -> Any:
        """The value of ``text``: a string for a string parameter, else JSON when it is."""
        if self._type(key) == "string":
            return text
        try:
            return json.loads(text, parse_constant=_refuse)
        except ValueError:
            return _PYTHON_LITERALS.get(text.strip(), text)

    def _fail(self, message: str, events: list[Event], rest: str) -> str:
        self._held, self._state = "", "text"
        events.append(ParseError(message))
        return rest


def _refuse(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")  # NOTE: NaN, Infinity stay strings
