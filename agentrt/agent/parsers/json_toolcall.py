"""JSON tool calls (``<tool_call>{"name": …, "arguments": {…}}</tool_call>``), streamed by value.

The form used by the SmolLM2, Qwen and Hermes chat templates; :class:`Llama3ToolCallParser`
(``<|python_tag|>`` or a bare ``{"name"`` object, ``"parameters"``) and
:class:`MistralToolCallParser` (``[TOOL_CALLS] [{…}, {…}]``, one call per list item) read the
Llama 3.x and Mistral forms with the same machine. A character-level JSON state machine
(full JSON: strings with every escape including ``\\uXXXX`` and surrogate pairs, numbers, ``true``
/ ``false`` / ``null``, arrays, nested objects) emits ``ToolName`` as soon as the ``name`` string
closes and an ``argument`` piece as soon as each top-level argument value closes; string arguments
also stream as ``delta`` pieces cut after each non-word character, so a tool can check a query
that is still being written. ``CallEnd`` comes when the outer object closes (the closing tag is
not needed). Values equal ``json.loads`` (control characters inside strings are tolerated, as with
``strict=False``). Truncated or invalid JSON becomes a :class:`ParseError` and the parser looks
for the next opening tag. ``is_strict`` (partial execution) also refuses, as a
:class:`ParseError` the moment it is written, what is valid JSON but no valid call: arguments that
are not an object (``5``, ``"x"``, ``[1]``), a second name, a second arguments object, an argument
written twice (the tool has started on its first value) — a tool must never start on those; off,
such a call ends and its reader judges it (the chat layer's
final parse, :mod:`agentrt.chat.tool_calls`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from agentrt.agent.parsers.base import (
    BaseStreamParser,
    CallEnd,
    CallStart,
    Event,
    ParseError,
    Piece,
    ToolName,
)

__all__ = ["LLAMA32_OPENS", "JsonToolCallParser", "Llama3ToolCallParser",
           "MistralToolCallParser"]

_WHITESPACE = " \t\r\n"
_NUMBER_CHARS = frozenset("0123456789+-.eE")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?")
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_LITERALS = {"t": ("true", True), "f": ("false", False), "n": ("null", None)}
_HEX = frozenset("0123456789abcdefABCDEF")
_KINDS = {'"': "a string", "[": "an array", "t": "a boolean", "f": "a boolean", "n": "null",
          "-": "a number", **dict.fromkeys("0123456789", "a number")}

Role = Literal["root", "arguments", "other"]
# NOTE: Llama 3.2 models, decoding freely, may write the OpenAI tool's "type" key first
LLAMA32_OPENS = ('{"type": "function"', '{"type":"function"')


class _JsonError(Exception):
    index = 0  # position of the offending character in the chunk being fed


class _CallError(_JsonError):
    """Valid JSON that is no valid call (strict parsing only)."""


@dataclass
class _Frame:
    is_object: bool
    role: Role
    container: Any
    state: str  # object: key_or_end/key/colon/value/comma_or_end; array: value_or_end/...
    key: str | None = None


@dataclass
class _String:
    is_key: bool
    delta_key: str | None  # stream this value as deltas of argument `delta_key`
    chars: list[str] = field(default_factory=list)
    delta: list[str] = field(default_factory=list)
    escape: bool = False
    hex: str | None = None
    high: int | None = None  # pending high surrogate


class _JsonStream:
    """Parses one JSON object incrementally; collects events for the tool-call roles."""

    def __init__(self, name_keys: tuple[str, ...], argument_keys: tuple[str, ...],
                 is_strict: bool = False, root_role: Role = "root") -> None:
        self.name_keys, self.argument_keys = name_keys, argument_keys
        self.root_role = root_role  # "arguments": the object is a call's arguments alone
        self.is_strict = is_strict
        self.stack: list[_Frame] = []
        self.events: list[Event] = []
        self.string: _String | None = None
        self.number: list[str] | None = None
        self.literal: tuple[str, Any, int] | None = None
        self.root: dict | None = None
        self.offset = 0

    @property
    def is_done(self) -> bool:
        return self.root is not None and not self.stack

    def feed(self, text: str) -> int:
        """Consume text up to the end of the object; return how many characters were used."""
        for i, c in enumerate(text):
            if self.is_done:
                return i
            self.offset += 1
            try:
                self._char(c)
            except _JsonError as exc:
                exc.index = i
                raise
        return len(text)

    def _char(self, c: str) -> None:
        if self.string is not None:
            return self._string_char(c)
        if self.number is not None:
            if c in _NUMBER_CHARS:
                self.number.append(c)
                return
            self._end_number()
        if self.literal is not None:
            return self._literal_char(c)
        if c in _WHITESPACE:
            return
        if not self.stack:
            if self.root is not None or c != "{":
                what = "tool call" if self.root_role == "root" else "arguments object"
                raise _JsonError(f"expected '{{' to open the {what}, got {c!r}")
            return self._push(True)
        frame = self.stack[-1]
        state = frame.state
        if state in ("key_or_end", "key"):
            if c == '"':
                self.string = _String(is_key=True, delta_key=None)
            elif c == "}" and state == "key_or_end":
                self._pop()
            else:
                raise _JsonError(f"expected a string key, got {c!r}")
        elif state == "colon":
            if c != ":":
                raise _JsonError(f"expected ':' after key {frame.key!r}, got {c!r}")
            frame.state = "value"
        elif state == "comma_or_end":
            if c == ",":
                frame.state = "key" if frame.is_object else "value"
            elif c == ("}" if frame.is_object else "]"):
                self._pop()
            else:
                raise _JsonError(f"expected ',' or a closing bracket, got {c!r}")
        elif c == "]" and state == "value_or_end":
            self._pop()
        else:
            self._start_value(c, frame)

    def _start_value(self, c: str, frame: _Frame) -> None:
        if (self.is_strict and c != "{" and c in _KINDS and frame.role == "root"
                and frame.key in self.argument_keys):
            raise _CallError(f"the arguments must be a JSON object, got {_KINDS[c]}")
        if c == "{":
            self._push(True)
        elif c == "[":
            self._push(False)
        elif c == '"':
            delta_key = frame.key if frame.role == "arguments" else None
            self.string = _String(is_key=False, delta_key=delta_key)
        elif c == "-" or c.isdigit():
            self.number = [c]
        elif c in _LITERALS:
            word, value = _LITERALS[c]
            self.literal = (word, value, 1)
        else:
            raise _JsonError(f"unexpected character {c!r} where a value should start")

    def _push(self, is_object: bool) -> None:
        role: Role = "other"
        if not self.stack:
            role = self.root_role
        elif self.stack[-1].role == "root" and self.stack[-1].key in self.argument_keys:
            role = "arguments" if is_object else "other"
        container: Any = {} if is_object else []
        if not self.stack:
            self.root = container
        state = "key_or_end" if is_object else "value_or_end"
        self.stack.append(_Frame(is_object, role, container, state))

    def _pop(self) -> None:
        frame = self.stack.pop()
        if self.stack:
            self._value(frame.container)

    def _value(self, value: Any) -> None:
        frame = self.stack[-1]
        if not frame.is_object:
            frame.container.append(value)
            frame.state = "comma_or_end"
            return
        frame.container[frame.key] = value
        frame.state = "comma_or_end"
        if frame.role == "root" and frame.key in self.name_keys:
            if not isinstance(value, str):
                raise _JsonError(f"the tool name must be a string, got {value!r}")
            self.events.append(ToolName(value))
        elif frame.role == "arguments":
            self.events.append(Piece("argument", key=frame.key, value=value))

    def _string_char(self, c: str) -> None:
        s = self.string
        assert s is not None
        if s.hex is not None:
            if c not in _HEX:
                raise _JsonError(f"invalid \\u escape: {s.hex + c!r}")
            s.hex += c
            if len(s.hex) == 4:
                code, s.hex = int(s.hex, 16), None
                self._codepoint(s, code)
        elif s.escape:
            s.escape = False
            if c == "u":
                s.hex = ""
            elif c in _ESCAPES:
                self._add(s, _ESCAPES[c])
            else:
                raise _JsonError(f"invalid escape '\\{c}' in a string")
        elif c == "\\":
            s.escape = True
        elif c == '"':
            self._end_string(s)
        else:
            self._add(s, c)

    def _codepoint(self, s: _String, code: int) -> None:
        if 0xD800 <= code < 0xDC00:
            self._flush_high(s)
            s.high = code
        elif 0xDC00 <= code < 0xE000 and s.high is not None:
            pair = 0x10000 + ((s.high - 0xD800) << 10) + (code - 0xDC00)
            s.high = None
            self._add(s, chr(pair))
        else:
            self._add(s, chr(code))

    def _flush_high(self, s: _String) -> None:
        if s.high is not None:
            high, s.high = s.high, None
            self._add(s, chr(high))

    def _add(self, s: _String, ch: str) -> None:
        self._flush_high(s)
        s.chars.append(ch)
        if s.delta_key is None:
            return
        s.delta.append(ch)
        if not (ch.isalnum() or ch == "_"):
            self._emit_delta(s)

    def _emit_delta(self, s: _String) -> None:
        if s.delta:
            self.events.append(Piece("delta", "".join(s.delta), key=s.delta_key))
            s.delta = []

    def _end_string(self, s: _String) -> None:
        self._flush_high(s)
        self._emit_delta(s)
        self.string = None
        text = "".join(s.chars)
        if s.is_key:
            frame = self.stack[-1]
            if self.is_strict and frame.role == "root":
                _check_key(frame.container, text, self.name_keys, self.argument_keys)
            if self.is_strict and frame.role == "arguments" and text in frame.container:
                # NOTE: json.loads keeps the last value, but the tool already started on the first
                raise _CallError(f"it writes argument {text!r} twice")
            frame.key, frame.state = text, "colon"
        else:
            self._value(text)

    def _end_number(self) -> None:
        assert self.number is not None
        text, self.number = "".join(self.number), None
        match = _NUMBER.fullmatch(text)
        if not match:
            raise _JsonError(f"invalid number {text!r}")
        self._value(float(text) if match.group(1) or match.group(2) else int(text))

    def _literal_char(self, c: str) -> None:
        assert self.literal is not None
        word, value, n = self.literal
        if c != word[n]:
            raise _JsonError(f"invalid literal {word[:n] + c!r} (expected {word!r})")
        self.literal = (word, value, n + 1)
        if n + 1 == len(word):
            self.literal = None
            self._value(value)


class JsonToolCallParser(BaseStreamParser):
    """Streams ``<tool_call>{...}</tool_call>`` calls: name first, then each argument.

    ``open_tags`` open a call (or, with ``is_list``, a JSON list of calls) and are not part
    of the JSON; ``bare_opens`` open a call as the start of its JSON object. ``is_strict``:
    arguments that are not an object, a second name or a second arguments object are a
    :class:`ParseError` as soon as they are written (what a tool may start on); off, the call
    ends and its reader judges it.
    """

    syntax = "json_toolcall"

    def __init__(
        self,
        open_tag: str = "<tool_call>",
        *,
        name_keys: tuple[str, ...] = ("name",),
        argument_keys: tuple[str, ...] = ("arguments", "parameters"),
        open_tags: tuple[str, ...] = (),
        bare_opens: tuple[str, ...] = (),
        is_list: bool = False,
        is_strict: bool = False,
    ) -> None:
        super().__init__()
        self.is_strict = is_strict
        self.open_tag = open_tag
        self.open_tags = open_tags or (open_tag,)
        self.bare_opens, self.is_list = bare_opens, is_list
        self.name_keys, self.argument_keys = name_keys, argument_keys
        self._tail = ""
        self._json: _JsonStream | None = None
        self._list = ""  # "open": expect "[" | "next": expect "{" or "]" | "sep": "," or "]"

    @property
    def markers(self) -> tuple[str, ...]:
        return self.open_tags

    def _feed_text(self, text: str) -> list[Event]:
        events: list[Event] = []
        while text:
            if self._json is not None:
                text = self._feed_json(text, events)
            elif self._list:
                text = self._feed_list(text, events)
            else:
                text = self._find_open(text, events)
        return events

    def _feed_list(self, text: str, events: list[Event]) -> str:
        rest = text.lstrip(_WHITESPACE)
        if not rest:
            return ""
        c, state = rest[0], self._list
        if state == "open" and c == "[":
            self._list = "next"
            return rest[1:]
        if state == "next" and c == "{":
            self._list = "sep"
            return self._start_json(rest, events)
        if state == "sep" and c == ",":
            self._list = "next"
            return rest[1:]
        self._list = ""
        return rest[1:] if c == "]" and state != "open" else rest

    def _close(self) -> list[Event]:
        stream, self._json, self._tail = self._json, None, ""
        if stream is None:
            return []
        events = stream.events
        where = "before the tool call started" if stream.root is None else "inside its JSON"
        events.append(
            ParseError(
                f"truncated tool call: the output ended {where} after {stream.offset} "
                "characters (unclosed string, array or object)"
            )
        )
        return events

    def _find_open(self, text: str, events: list[Event]) -> str:
        data = self._tail + text
        found, marker = len(data), ""
        for tag in self.open_tags + self.bare_opens:
            i = data.find(tag)
            if i != -1 and (i < found or (i == found and len(tag) > len(marker))):
                found, marker = i, tag
        if not marker:
            suffixes = [_tag_prefix_suffix(data, t) for t in self.open_tags + self.bare_opens]
            self._tail = max(suffixes, key=len)
            return ""
        self._tail = ""
        if marker in self.bare_opens:
            return self._start_json(data[found:], events)
        rest = data[found + len(marker) :]
        if self.is_list:
            self._list = "open"
            return rest
        return self._start_json(rest, events)

    def _start_json(self, text: str, events: list[Event]) -> str:
        self._json = _JsonStream(self.name_keys, self.argument_keys, self.is_strict)
        events.append(CallStart(self.syntax))
        return text

    def _feed_json(self, text: str, events: list[Event]) -> str:
        stream = self._json
        assert stream is not None
        used = _feed_stream(stream, text, events)
        if isinstance(used, _JsonError):
            self._json, self._list = None, ""
            what = "tool call" if isinstance(used, _CallError) else "JSON in tool call"
            events.append(ParseError(f"invalid {what} at character {stream.offset}: {used}"))
            return text[used.index + 1 :]
        if not stream.is_done:
            return ""
        self._json = None
        root = stream.root or {}
        if not any(isinstance(root.get(k), str) for k in self.name_keys):
            events.append(ParseError("invalid tool call: no string 'name' in the JSON object"))
        else:
            events.append(CallEnd())
        return text[used:]


class Llama3ToolCallParser(JsonToolCallParser):
    """Llama 3.x JSON calls: ``<|python_tag|>{…}`` or a bare ``{"name": …, "parameters": …}``
    (several separated by ``;``); Llama 3.2's ``{"type": "function", "name": …}`` too."""

    syntax = "llama3_json"

    def __init__(self, *, is_strict: bool = False) -> None:
        super().__init__(open_tags=("<|python_tag|>",),
                         bare_opens=('{"name"', *LLAMA32_OPENS), is_strict=is_strict)


class MistralToolCallParser(JsonToolCallParser):
    """Mistral calls: ``[TOOL_CALLS] [{"name": …, "arguments": …}, …]``, a call per item."""

    syntax = "mistral_json"

    def __init__(self, *, is_strict: bool = False) -> None:
        super().__init__(open_tags=("[TOOL_CALLS]",), is_list=True, is_strict=is_strict)


def _feed_stream(stream: _JsonStream, text: str, events: list[Event]) -> int | _JsonError:
    """Feed ``text`` to ``stream``: the characters it used, or the error that ended it (the
    stream is then done with); its events move to ``events`` either way."""
    try:
        used = stream.feed(text)
    except _JsonError as exc:
        events += stream.events
        return exc
    events += stream.events
    stream.events = []
    return used


def _check_key(root: dict, key: str, name_keys: tuple[str, ...],
               argument_keys: tuple[str, ...]) -> None:
    """A root key that repeats the call's name or its arguments (strict parsing)."""
    if key in name_keys and any(k in root for k in name_keys):
        raise _CallError("it names its tool twice")
    if key in argument_keys and any(k in root for k in argument_keys):
        raise _CallError("more than one arguments object")


def _tag_prefix_suffix(data: str, tag: str) -> str:
    """The longest suffix of ``data`` that is a proper prefix of ``tag`` (a tag split mid-way)."""
    for n in range(min(len(tag) - 1, len(data)), 0, -1):
        if data.endswith(tag[:n]):
            return data[-n:]
    return ""
