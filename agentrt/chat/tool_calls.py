"""Model text ↔ tool calls in the ``<tool_call>{"name": …, "arguments": {…}}</tool_call>`` form.

:func:`format_tool_call` writes a call exactly as the constrained grammar makes the model
write it (and as the history shows it back). :class:`ToolCallStream` splits streamed output
into answer text and tool calls. JSON is parsed by agentrt's own streaming parser
(:class:`~agentrt.agent.parsers.json_toolcall.JsonToolCallParser`), fed one character at a
time inside a call so the end of the call is known exactly; its events become tool-call
chunks whose ``args`` strings concatenate to the JSON of the arguments — string arguments
stream as they are written. A whole answer goes through the same class, so a streamed
message adds up to the whole one.

Calls and chunks are plain dicts with LangChain's keys (``ToolCall``, ``ToolCallChunk``,
``InvalidToolCall`` are TypedDicts of exactly these), which every integration maps from.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from agentrt.agent.parsers.base import CallEnd, ParseError, Piece, ToolName
from agentrt.agent.parsers.json_toolcall import JsonToolCallParser

__all__ = ["CLOSE_TAG", "OPEN_TAG", "StreamPiece", "ToolCallStream", "format_tool_call",
           "new_call_id"]

OPEN_TAG, CLOSE_TAG = "<tool_call>", "</tool_call>"
ToolCall = dict[str, Any]
"""``{"name": str, "args": dict, "id": str, "type": "tool_call"}``."""
ToolCallChunk = dict[str, Any]
"""``{"name": str | None, "args": str (a piece of the arguments JSON), "id": str | None,
"index": int, "type": "tool_call_chunk"}`` — the id and name come with a call's first chunk."""
InvalidToolCall = dict[str, Any]
"""``{"name": str | None, "args": str (the raw text), "id": str, "error": str,
"type": "invalid_tool_call"}``."""


def format_tool_call(name: str, args: dict[str, Any]) -> str:
    """One call as the model writes it: ``<tool_call>\\n{json}\\n</tool_call>``."""
    payload = json.dumps({"name": name, "arguments": args}, ensure_ascii=False)
    return f"{OPEN_TAG}\n{payload}\n{CLOSE_TAG}"


def new_call_id() -> str:
    """A fresh id in OpenAI's ``call_…`` form."""
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass
class StreamPiece:
    """What one :meth:`ToolCallStream.feed` produced: answer text and call chunks."""

    content: str = ""
    tool_call_chunks: list[ToolCallChunk] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.content or self.tool_call_chunks)


@dataclass
class _Call:
    index: int
    id: str = field(default_factory=new_call_id)
    parser: JsonToolCallParser = field(default_factory=JsonToolCallParser)
    name: str | None = None
    args: dict[str, Any] = field(default_factory=dict)
    raw: list[str] = field(default_factory=list)
    open_key: str | None = None  # a string argument being streamed
    is_announced: bool = False  # a chunk with the call's id went out
    state: str = "json"  # json → closing (after the object) | error (until </tool_call>)
    error: str | None = None
    tail: str = ""


class ToolCallStream:
    """Splits model output into answer text and tool calls, incrementally."""

    def __init__(self) -> None:
        self.tool_calls: list[ToolCall] = []
        self.invalid_tool_calls: list[InvalidToolCall] = []
        self._pending = ""  # text that may be the start of OPEN_TAG
        self._call: _Call | None = None
        self._num_calls = 0

    def feed(self, text: str) -> StreamPiece:
        """Consume the next piece of output; return what it completed."""
        out = StreamPiece()
        while text:
            text = self._feed_text(text, out) if self._call is None else self._feed_call(text, out)
        return out

    def close(self) -> StreamPiece:
        """End of output: flush held-back text; a call still open is invalid (truncated)."""
        out = StreamPiece(content=self._pending)
        self._pending = ""
        call = self._call
        if call is not None and call.state == "json":
            for event in call.parser.close():
                self._on_event(call, event, out)
        if self._call is not None:
            self._end_call(self._call)
        return out

    # --- outside a call ----------------------------------------------------------------------
    def _feed_text(self, text: str, out: StreamPiece) -> str:
        data = self._pending + text
        found = data.find(OPEN_TAG)
        if found == -1:
            keep = _partial_tag_len(data, OPEN_TAG)
            out.content += data[: len(data) - keep]
            self._pending = data[len(data) - keep :]
            return ""
        out.content += data[:found]
        self._pending = ""
        self._call = _Call(self._num_calls)
        self._num_calls += 1
        self._call.parser.feed(OPEN_TAG)
        return data[found + len(OPEN_TAG) :]

    # --- inside a call -----------------------------------------------------------------------
    def _feed_call(self, text: str, out: StreamPiece) -> str:
        call = self._call
        assert call is not None
        for i, c in enumerate(text):
            if call.state == "json":
                call.raw.append(c)
                for event in call.parser.feed(c):
                    self._on_event(call, event, out)
            elif call.state == "closing":
                rest = self._closing(call, c, text[i + 1 :])
                if rest is not None:
                    return rest
            else:
                call.raw.append(c)
                if c == ">" and "".join(call.raw).endswith(CLOSE_TAG):
                    del call.raw[-len(CLOSE_TAG) :]
                    self._end_call(call)
                    return text[i + 1 :]
        return ""

    def _closing(self, call: _Call, c: str, rest: str) -> str | None:
        """After the JSON object: swallow ``</tool_call>``; anything else is answer text."""
        call.tail += c
        stripped = call.tail.lstrip()
        if stripped == CLOSE_TAG:
            self._end_call(call)
            return rest
        if stripped and not CLOSE_TAG.startswith(stripped):
            self._end_call(call)
            return stripped + rest
        return None

    def _on_event(self, call: _Call, event: Any, out: StreamPiece) -> None:
        if isinstance(event, ToolName):
            call.name = event.name
            self._emit(out, call, "", name=event.name)
        elif isinstance(event, Piece) and event.kind == "delta":
            if call.open_key != event.key:
                self._emit(out, call, self._separator(call) + json.dumps(event.key) + ': "')
                call.open_key = event.key
            self._emit(out, call, json.dumps(event.text, ensure_ascii=False)[1:-1])
        elif isinstance(event, Piece) and event.kind == "argument":
            self._on_argument(call, event, out)
        elif isinstance(event, CallEnd):
            self._emit(out, call, "}" if call.args else "{}")
            call.state = "closing"
        elif isinstance(event, ParseError):
            call.state, call.error = "error", event.message

    def _on_argument(self, call: _Call, event: Piece, out: StreamPiece) -> None:
        assert event.key is not None
        if call.open_key == event.key:
            self._emit(out, call, '"')
            call.open_key = None
        else:
            value = json.dumps(event.value, ensure_ascii=False)
            self._emit(out, call, self._separator(call) + json.dumps(event.key) + ": " + value)
        call.args[event.key] = event.value

    @staticmethod
    def _separator(call: _Call) -> str:
        return ", " if call.args or call.open_key else "{"

    @staticmethod
    def _emit(out: StreamPiece, call: _Call, args: str, *, name: str | None = None) -> None:
        chunks = out.tool_call_chunks
        if chunks and chunks[-1]["index"] == call.index:  # one chunk per call per feed
            last = chunks[-1]
            last["args"] = (last["args"] or "") + args
            last["name"] = last["name"] or name
        else:
            call_id = None if call.is_announced else call.id
            chunks.append({"name": name, "args": args, "id": call_id, "index": call.index,
                           "type": "tool_call_chunk"})
            call.is_announced = True

    def _end_call(self, call: _Call) -> None:
        self._call = None
        if call.state == "closing" and call.name is not None:
            self.tool_calls.append({"name": call.name, "args": call.args, "id": call.id,
                                    "type": "tool_call"})
            return
        error = call.error or "the tool call has no name"
        self.invalid_tool_calls.append({"name": call.name, "args": "".join(call.raw).strip(),
                                        "id": call.id, "error": error,
                                        "type": "invalid_tool_call"})


def _partial_tag_len(data: str, tag: str) -> int:
    """Length of the longest suffix of ``data`` that is a proper prefix of ``tag``."""
    for n in range(min(len(tag) - 1, len(data)), 0, -1):
        if data.endswith(tag[:n]):
            return n
    return 0
