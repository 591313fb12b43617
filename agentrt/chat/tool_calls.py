"""Model text ↔ tool calls, in the model family's format (:mod:`.formats`), plus reasoning.

:func:`format_tool_call` writes a call exactly as the constrained grammar makes the model
write it (and as the history shows it back). :class:`ToolCallStream` splits streamed output
into answer text, reasoning text (``<think>`` or Magistral's ``[THINK]`` blocks, when the
template has them) and tool calls. JSON is parsed by agentrt's own streaming parser
(:class:`~agentrt.agent.parsers.json_toolcall.JsonToolCallParser`), fed one character at a
time inside a call so the end of the call is known exactly; its events become tool-call
chunks whose ``args`` strings concatenate to the JSON of the arguments — string arguments
stream as they are written. A whole answer goes through the same class, so a streamed
message adds up to the whole one, wherever the stream was split.

Calls and chunks are plain dicts with LangChain's keys (``ToolCall``, ``ToolCallChunk``,
``InvalidToolCall`` are TypedDicts of exactly these), which every integration maps from.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentrt.agent.parsers.base import BaseStreamParser, CallEnd, ParseError, Piece, ToolName
from agentrt.agent.parsers.json_toolcall import JsonToolCallParser
from agentrt.agent.parsers.mistral_args import MistralArgsToolCallParser
from agentrt.agent.parsers.qwen_xml import QwenXmlToolCallParser, tool_schemas
from agentrt.chat.formats import HERMES, Reasoning, ToolCallFormat, reasoning_tags

__all__ = ["CLOSE_TAG", "OPEN_TAG", "StreamPiece", "ToolCallStream", "format_tool_call",
           "new_call_id"]

OPEN_TAG, CLOSE_TAG = HERMES.open_tags[0], HERMES.close_tag
ToolCall = dict[str, Any]
"""``{"name": str, "args": dict, "id": str, "type": "tool_call"}``."""
ToolCallChunk = dict[str, Any]
"""``{"name": str | None, "args": str (a piece of the arguments JSON), "id": str | None,
"index": int, "type": "tool_call_chunk"}`` — the id and name come with a call's first chunk."""
InvalidToolCall = dict[str, Any]
"""``{"name": str | None, "args": str (the raw text), "id": str, "error": str,
"type": "invalid_tool_call"}``."""
_WHITESPACE = " \t\r\n"
_JSON_LIST_OPEN = '[{"name"'
"""Llama 3: parallel calls written as one JSON list (free decoding), read as Mistral's list."""


def format_tool_call(name: str, args: dict[str, Any],
                     tool_format: ToolCallFormat = HERMES) -> str:
    """One call as the model writes it (Hermes: ``<tool_call>\\n{json}\\n</tool_call>``)."""
    return tool_format.format_calls([(name, args)])


def new_call_id() -> str:
    """A fresh id in OpenAI's ``call_…`` form."""
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass
class StreamPiece:
    """What one :meth:`ToolCallStream.feed` produced: answer text, reasoning, call chunks."""

    content: str = ""
    tool_call_chunks: list[ToolCallChunk] = field(default_factory=list)
    reasoning_content: str = ""

    def __bool__(self) -> bool:
        return bool(self.content or self.tool_call_chunks or self.reasoning_content)


@dataclass
class _Call:
    index: int
    id: str = field(default_factory=new_call_id)
    parser: BaseStreamParser = field(default_factory=JsonToolCallParser)
    name: str | None = None
    args: dict[str, Any] = field(default_factory=dict)
    raw: list[str] = field(default_factory=list)
    open_key: str | None = None  # a string argument being streamed
    is_announced: bool = False  # a chunk with the call's id went out
    state: str = "json"  # json → closing (after the object) | error (until </tool_call>)
    error: str | None = None
    tail: str = ""


class ToolCallStream:
    """Splits model output into answer text, reasoning and tool calls, incrementally.

    ``reasoning``: ``"detect"`` reads ``<think>…</think>`` as reasoning, ``"open"`` starts
    inside such a block (the prompt opened it), ``"detect_mistral"`` / ``"open_mistral"`` the
    same with ``[THINK]…[/THINK]``, ``"none"`` (default) has no reasoning syntax.
    ``can_call=False`` (a request with no tools, or ``tool_choice="none"``) reads no calls:
    what looks like one is answer text. ``tools`` (OpenAI tool dicts) type the parameters of
    XML calls (Qwen3-Coder): a string parameter stays a string and streams as it is written.
    """

    def __init__(self, tool_format: ToolCallFormat = HERMES, *,
                 reasoning: Reasoning = "none", can_call: bool = True,
                 tools: Sequence[dict[str, Any]] = (), must_call: bool = False) -> None:
        self.format = tool_format
        self._must_call = must_call and can_call
        """The grammar forces a call: output cut inside its opening tag is a truncated call,
        not answer text."""
        self._schemas = tool_schemas(tools)
        self.tool_calls: list[ToolCall] = []
        self.invalid_tool_calls: list[InvalidToolCall] = []
        self._bare_opens = tool_format.bare_opens + tool_format.loose_opens
        self._list_opens = (_JSON_LIST_OPEN,) if tool_format.bare_opens and \
            not tool_format.is_list else ()
        self._markers = tool_format.open_tags + self._bare_opens + self._list_opens \
            if can_call else ()
        self._in_list = tool_format.is_list
        """Calls are read as a JSON list (``,`` between, ``]`` after): Mistral's, or a Llama 3
        list once its ``[{"name"`` was read."""
        tags = reasoning_tags(reasoning)
        self._think = ("", "") if tags is None else (tags.open, tags.close)
        if tags is not None:
            self._markers += (tags.open,)
        is_open = tags is not None and tags.is_open
        self._pending = ""  # text that may be the start of a marker
        self._call: _Call | None = None
        self._num_calls = 0
        self._mode = "reasoning" if is_open else "text"  # | list_open | list_next
        self._skip = "\n" if is_open else ""  # leading characters to drop
        self._after_call = False
        """A call's close tag was the last thing read: whitespace from here is held back, and
        dropped if another call or the end follows (the line break between parallel calls is
        no answer text)."""

    def feed(self, text: str) -> StreamPiece:
        """Consume the next piece of output; return what it completed."""
        out = StreamPiece()
        while text:
            if self._call is not None:
                text = self._feed_call(text, out)
            elif self._skip:
                text = self._skip_leading(text)
            elif self._mode == "reasoning":
                text = self._feed_reasoning(text, out)
            elif self._mode != "text":
                text = self._feed_list(text)
            else:
                text = self._feed_text(text, out)
        return out

    def close(self) -> StreamPiece:
        """End of output: flush held-back text; a call still open is invalid (truncated)."""
        out = StreamPiece()
        cut_in_open_tag = self._cut_in_forced_open_tag()
        if self._mode == "reasoning":
            out.reasoning_content = self._pending
        elif not cut_in_open_tag and not (self._after_call and self._pending.isspace()):
            out.content = self._pending
        self._pending = ""
        call = self._call
        if call is not None and call.state == "json":
            for event in call.parser.close():
                self._on_event(call, event, out)
        if self._call is not None:
            self._end_call(self._call)
        elif self._mode in ("list_open", "list_next") or cut_in_open_tag:
            # Mistral's list cut before a call, or a forced call cut inside its opening tag
            self._mode, self._call = "text", _Call(self._num_calls)
            self._num_calls += 1
            self._call.error = "truncated tool call: the output ended before the tool call started"
            self._end_call(self._call)
        return out

    def _cut_in_forced_open_tag(self) -> bool:
        """The output ended in the first part of a call's opening tag, and a call was forced."""
        if not (self._must_call and self._mode == "text" and self._num_calls == 0
                and self._call is None):
            return False
        pending = self._pending.lstrip(_WHITESPACE)
        opens = [m for m in self._markers if m != self._think[0]]
        return bool(pending) and any(m.startswith(pending) for m in opens)

    # --- outside a call ----------------------------------------------------------------------
    def _skip_leading(self, text: str) -> str:
        rest = text.lstrip(self._skip)
        if rest:
            self._skip = ""
        return rest

    def _feed_text(self, text: str, out: StreamPiece) -> str:
        data = self._pending + text
        found, marker = _find_first(data, self._markers)
        if marker is None:
            keep = max((_partial_tag_len(data, m) for m in self._markers), default=0)
            if self._after_call and not data[: len(data) - keep].strip(_WHITESPACE):
                keep = len(data)  # only whitespace since a call: what follows decides
            out.content += data[: len(data) - keep]
            self._after_call = self._after_call and keep == len(data)
            self._pending = data[len(data) - keep :]
            return ""
        if not (self._after_call and not data[:found].strip(_WHITESPACE)):
            out.content += data[:found]
        self._after_call = False
        self._pending = ""
        rest = data[found + len(marker) :]
        if marker == self._think[0]:
            self._mode, self._skip = "reasoning", "\n"
            return rest
        if marker in self._bare_opens:
            self._start_call()
            return marker + rest
        if marker in self._list_opens:
            self._in_list, self._mode = True, "list_open"
            return marker + rest
        if self.format.is_list:
            self._mode = "list_open"
            return rest
        self._start_call()
        return rest

    def _feed_reasoning(self, text: str, out: StreamPiece) -> str:
        """Inside ``<think>``: reasoning text until ``</think>`` (newlines around it dropped)."""
        close = self._think[1]
        data = self._pending + text
        found = data.find(close)
        if found == -1:
            keep = _partial_tag_len(data, close)
            body = data[: len(data) - keep]
            held = len(body) - len(body.rstrip("\n")) + keep  # newlines before a </think>
            out.reasoning_content += data[: len(data) - held]
            self._pending = data[len(data) - held :]
            return ""
        out.reasoning_content += data[:found].rstrip("\n")
        self._pending = ""
        self._mode, self._skip = "text", "\n"
        return data[found + len(close) :]

    def _feed_list(self, text: str) -> str:
        """Mistral: ``[`` after the open tag, then ``{`` starts each call (a ``{`` right after
        the tag: one call without its list); else answer text."""
        rest = text.lstrip(_WHITESPACE)
        if not rest:
            return ""
        expected = "[" if self._mode == "list_open" else "{"
        if self._mode == "list_open" and rest[0] == "{":  # one call written without its list
            self._mode = "text"
            self._start_call()
            return rest
        if rest[0] == expected:
            self._mode = "list_next"
            if expected == "[":
                return rest[1:]
            self._mode = "text"
            self._start_call()
            return rest
        is_end = rest[0] == "]" and self._mode == "list_next"  # an empty (or closed) list
        self._mode = "text"
        return rest[1:] if is_end else rest

    def _start_call(self) -> None:
        if self.format.args_tag:  # Mistral v11+: name[ARGS]{arguments}
            self._call = _Call(self._num_calls, parser=MistralArgsToolCallParser())
            self._call.parser.feed(self.format.open_tags[0])
        elif self.format.is_xml:  # Qwen3-Coder: <function=name><parameter=key>value…
            self._call = _Call(self._num_calls, parser=QwenXmlToolCallParser(
                schemas=self._schemas))
            self._call.parser.feed(self.format.open_tags[0])
        else:
            self._call = _Call(self._num_calls)
            self._call.parser.feed(OPEN_TAG)
        self._num_calls += 1

    # --- inside a call -----------------------------------------------------------------------
    def _feed_call(self, text: str, out: StreamPiece) -> str:
        call = self._call
        assert call is not None
        for i, c in enumerate(text):
            if call.state == "json":
                call.raw.append(c)
                for event in call.parser.feed(c):
                    self._on_event(call, event, out)
                if call.state == "error" and not self.format.close_tag:
                    self._end_call(call)  # no close tag to wait for: the rest is answer text
                    return text[i + 1 :]
            elif call.state == "closing":
                rest = self._closing(call, c, text[i + 1 :])
                if rest is not None:
                    return rest
            else:
                call.raw.append(c)
                if c == ">" and "".join(call.raw).endswith(CLOSE_TAG):
                    del call.raw[-len(CLOSE_TAG) :]
                    self._end_call(call)
                    self._after_call = True
                    return text[i + 1 :]
        return ""

    def _closing(self, call: _Call, c: str, rest: str) -> str | None:
        """After the JSON object: swallow the close tag (Hermes), a ``;`` (Llama 3), a ``,``
        or ``]`` (Mistral's list); anything else is answer text."""
        call.tail += c
        stripped = call.tail.lstrip()
        if not stripped:
            return None
        fmt = self.format
        if fmt.close_tag:
            if stripped == fmt.close_tag:
                self._end_call(call)
                self._after_call = True
                return rest
            if fmt.close_tag.startswith(stripped):
                return None
        elif self._in_list and stripped in (",", "]"):
            self._end_call(call)
            self._mode = "list_next" if stripped == "," else "text"
            self._after_call = stripped == "]"  # the list's end is the calls' close tag
            return rest
        elif stripped == ";" and fmt.separator.strip() == ";":
            self._end_call(call)
            self._skip = _WHITESPACE
            return rest
        self._end_call(call)
        return stripped + rest

    def _on_event(self, call: _Call, event: Any, out: StreamPiece) -> None:
        if isinstance(event, ToolName):
            if call.name is None:  # a second name makes the call invalid (at its end)
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
            call.state = "closing"
            call.error, written = (None, "") if self.format.args_tag or self.format.is_xml \
                else _check_call("".join(call.raw))
            if call.error is None:
                self._emit(out, call, "}" if call.args else "{}")
            elif written and not call.args and call.open_key is None:
                self._emit(out, call, written)  # NOTE: so merged chunks hold no call {} either
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
        if call.state == "closing" and call.name is not None and call.error is None:
            self.tool_calls.append({"name": call.name, "args": call.args, "id": call.id,
                                    "type": "tool_call"})
            return
        error = call.error or "the tool call has no name"
        self.invalid_tool_calls.append({"name": call.name, "args": "".join(call.raw).strip(),
                                        "id": call.id, "error": error,
                                        "type": "invalid_tool_call"})


class _Object(list):
    """A JSON object's (key, value) pairs, in order (duplicates kept)."""


_JSON_TYPES = {str: "a string", list: "an array", int: "a number", float: "a number",
               bool: "a boolean", type(None): "null"}


def _check_call(raw: str) -> tuple[str | None, str]:
    """Why a call object that parsed is still not a call (None: it is one): its arguments
    are not an object, or it names its tool (or gives its arguments) twice, or by ``""``;
    and arguments that are not an object as JSON text (what their chunk streams)."""
    try:
        root = json.loads(raw, strict=False, object_pairs_hook=_Object)
    except ValueError as exc:  # pragma: no cover - the streaming parser accepted it
        return f"invalid JSON in tool call: {exc}", ""
    keys = [key for key, _ in root]
    if keys.count("name") > 1:
        return "invalid tool call: it names its tool twice", ""
    if dict(root)["name"] == "":
        return "invalid tool call: an empty tool name", ""
    arguments = [value for key, value in root if key in ("arguments", "parameters")]
    if len(arguments) > 1:
        return "invalid tool call: more than one arguments object", ""
    if arguments and not isinstance(arguments[0], _Object):
        kind = _JSON_TYPES.get(type(arguments[0]), "not an object")
        plain = json.loads(raw, strict=False)  # the value without _Object pairs
        written = json.dumps(plain.get("arguments", plain.get("parameters")), ensure_ascii=False)
        return f"invalid tool call: the arguments must be a JSON object, got {kind}", written
    return None, ""


def _find_first(data: str, markers: tuple[str, ...]) -> tuple[int, str | None]:
    """The earliest marker in ``data`` (the longest at a tie) and where it starts."""
    best, found = len(data), None
    for marker in markers:
        i = data.find(marker)
        if i != -1 and (i < best or (i == best and found is not None
                                      and len(marker) > len(found))):
            best, found = i, marker
    return best, found


def _partial_tag_len(data: str, tag: str) -> int:
    """Length of the longest suffix of ``data`` that is a proper prefix of ``tag``."""
    for n in range(min(len(tag) - 1, len(data)), 0, -1):
        if data.endswith(tag[:n]):
            return n
    return 0
