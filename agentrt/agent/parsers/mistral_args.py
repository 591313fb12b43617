"""Mistral v11+ tool calls (``[TOOL_CALLS]name[ARGS]{…}``), streamed by value.

Magistral, Devstral, Mistral-Small-3.2 and Ministral 3 (tokenizers v11 and later) write each
call as ``[TOOL_CALLS]``, the tool's name, ``[ARGS]`` and the arguments as one JSON object;
v11 templates put the call's id in between (``name[CALL_ID]abcdefghi[ARGS]{…}``). The name is
known at ``[ARGS]`` (or ``[CALL_ID]``), so the tool can start there (``ToolName``); the
arguments object goes through :mod:`.json_toolcall`'s JSON machine (each argument when its
value closes, string arguments as ``delta`` pieces) and ``CallEnd`` comes when it closes.
A name that is not a tool name, a missing ``[ARGS]`` or arguments that are not a JSON object
are a :class:`ParseError` the moment they are written, and the parser looks for the next
``[TOOL_CALLS]``.
"""

from __future__ import annotations

import re

from agentrt.agent.parsers.base import (
    BaseStreamParser,
    CallEnd,
    CallStart,
    Event,
    ParseError,
    ToolName,
)
from agentrt.agent.parsers.json_toolcall import (
    _feed_stream,
    _JsonError,
    _JsonStream,
    _tag_prefix_suffix,
)

__all__ = ["MistralArgsToolCallParser"]

OPEN_TAG, ARGS_TAG, CALL_ID_TAG = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"
_NAME_CHARS = re.compile(r"[A-Za-z0-9_.:-]*")  # NOTE: OpenAI's names, plus "." and ":"
_ID_CHARS = re.compile(r"[A-Za-z0-9]*")
_MAX_NAME_LEN = 256


class MistralArgsToolCallParser(BaseStreamParser):
    """Streams ``[TOOL_CALLS]name[ARGS]{…}`` calls: the name at ``[ARGS]``, then each
    argument. Arguments are always read strictly (a JSON object, or a :class:`ParseError`);
    ``is_strict`` is accepted for the registry's JSON parsers' signature."""

    syntax = "mistral_args"

    def __init__(self, *, is_strict: bool = True) -> None:
        super().__init__()
        self.is_strict = is_strict
        self._state = "text"  # text | name | call_id | json
        self._held = ""  # text: a possible start of [TOOL_CALLS]; name / call_id: read so far
        self._json: _JsonStream | None = None

    @property
    def markers(self) -> tuple[str, ...]:
        return (OPEN_TAG, ARGS_TAG, CALL_ID_TAG)

    def _feed_text(self, text: str) -> list[Event]:
        events: list[Event] = []
        while text:
            if self._state == "text":
                text = self._find_open(text, events)
            elif self._state == "json":
                text = self._feed_json(text, events)
            else:
                text = self._feed_header(text, events)
        return events

    def _close(self) -> list[Event]:
        state, self._state, self._held, self._json = self._state, "text", "", None
        if state == "text":
            return []
        where = {"name": "in the tool name", "call_id": "in the call id",
                 "json": "inside its arguments"}[state]
        return [ParseError(f"truncated tool call: the output ended {where}")]

    def _find_open(self, text: str, events: list[Event]) -> str:
        data = self._held + text
        found = data.find(OPEN_TAG)
        if found == -1:
            self._held = _tag_prefix_suffix(data, OPEN_TAG)
            return ""
        self._state, self._held = "name", ""
        events.append(CallStart(self.syntax))
        return data[found + len(OPEN_TAG) :]

    def _feed_header(self, text: str, events: list[Event]) -> str:
        """The name (then the id): up to ``[ARGS]`` (or, after a name, ``[CALL_ID]``)."""
        data = self._held + text
        tags = (ARGS_TAG, CALL_ID_TAG) if self._state == "name" else (ARGS_TAG,)
        ends = [(i, tag) for tag in tags if (i := data.find(tag)) != -1]
        if not ends:
            keep = max(len(_tag_prefix_suffix(data, tag)) for tag in tags)
            self._held = data
            error = self._check(data[: len(data) - keep], complete=False)
            return self._fail(error, events) if error else ""
        i, tag = min(ends)
        value, rest = data[:i], data[i + len(tag) :]
        error = self._check(value, complete=True)
        if error:
            return self._fail(error, events, rest=data[i:])
        self._held = ""
        if self._state == "name":
            events.append(ToolName(value))
        if tag == CALL_ID_TAG:
            self._state = "call_id"
            return rest
        self._state = "json"
        self._json = _JsonStream((), (), is_strict=True, root_role="arguments")
        return rest

    def _check(self, value: str, *, complete: bool) -> str | None:
        """Why ``value`` (all of the name or id, or the start of it) is none (None: it is)."""
        what = "tool name" if self._state == "name" else "call id"
        end = self._valid_len(value)
        if end < len(value):
            return f"invalid tool call: {value[end]!r} in the {what} (expected {ARGS_TAG} after it)"
        if len(value) > _MAX_NAME_LEN:
            return f"invalid tool call: no {ARGS_TAG} after {_MAX_NAME_LEN} characters"
        if complete and not value:
            return f"invalid tool call: an empty {what}"
        return None

    def _valid_len(self, value: str) -> int:
        chars = _NAME_CHARS if self._state == "name" else _ID_CHARS
        match = chars.match(value)
        return match.end() if match else 0

    def _fail(self, message: str, events: list[Event], rest: str | None = None) -> str:
        """Report ``message``; look for the next call after the bad character (or at
        ``rest``)."""
        if rest is None:
            rest = self._held[self._valid_len(self._held) + 1 :]
        self._held, self._state = "", "text"
        events.append(ParseError(message))
        return rest

    def _feed_json(self, text: str, events: list[Event]) -> str:
        stream = self._json
        assert stream is not None
        used = _feed_stream(stream, text, events)
        if isinstance(used, _JsonError):
            self._json, self._state = None, "text"
            events.append(ParseError(f"invalid arguments at character {stream.offset}: {used}"))
            return text[used.index + 1 :]
        if not stream.is_done:
            return ""
        self._json, self._state = None, "text"
        events.append(CallEnd())
        return text[used:]
