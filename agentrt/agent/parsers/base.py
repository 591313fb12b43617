"""The streaming-parser interface: model output in, tool-call events out.

One parser per output *syntax* (fenced code, JSON tool call, ReAct text), not per tool [Conveyor].
A parser is fed the decoded output as it streams — ``str`` chunks, or raw ``bytes`` chunks that may
split a multi-byte UTF-8 character anywhere — and returns the events that the new text completes.
Events depend only on the text, never on where it was split: that invariant is what lets the
runtime hand a piece to a tool the moment it is complete, and it is checked by property tests.
Malformed output never raises: it becomes a :class:`ParseError` event.
"""

from __future__ import annotations

import codecs
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

__all__ = [
    "BaseStreamParser",
    "CallEnd",
    "CallStart",
    "Event",
    "FinalAnswer",
    "ParseError",
    "Piece",
    "PieceKind",
    "ToolName",
]

PieceKind = Literal["statement", "delta", "argument", "input"]


@dataclass(frozen=True)
class CallStart:
    """A tool-call marker was seen (an opening fence, ``<tool_call>``, an ``Action:`` line)."""

    syntax: str


@dataclass(frozen=True)
class ToolName:
    """The called tool is known (fence language mapped to a tool, JSON ``name``, ReAct action)."""

    name: str


@dataclass(frozen=True)
class Piece:
    """A completed piece of a call, ready for the tool.

    ``statement``: one complete top-level statement of a code block (``text``).
    ``delta``: the next part of a string argument ``key``, cut after a non-word character, so that
    a tool can look at a long argument (SQL, code) while it is still being written.
    ``argument``: argument ``key`` is complete with its decoded JSON ``value``.
    ``input``: the whole free-text input of a ReAct action (``text``).
    """

    kind: PieceKind
    text: str = ""
    key: str | None = None
    value: Any = None


@dataclass(frozen=True)
class CallEnd:
    """The call is complete: nothing more will be fed to it."""


@dataclass(frozen=True)
class FinalAnswer:
    """A ReAct ``Final Answer:`` (emitted at the end of the stream)."""

    text: str


@dataclass(frozen=True)
class ParseError:
    """The output is malformed (unclosed fence, truncated or invalid JSON, ...)."""

    message: str


Event = CallStart | ToolName | Piece | CallEnd | FinalAnswer | ParseError


class BaseStreamParser(ABC):
    """Incremental parser of one output syntax.

    The runtime calls :meth:`feed` with each newly decoded chunk and :meth:`close` once at the
    end of the stream; both return the events completed by that input, in order.
    """

    syntax: ClassVar[str]

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.is_closed = False

    @property
    def markers(self) -> tuple[str, ...]:
        """Literal markers this parser must see to open a call (a tokenizer may hold them as
        special tokens, which decoding must then keep; see :mod:`.markers`)."""
        return ()

    def feed(self, chunk: str | bytes) -> list[Event]:
        """Parse the next chunk of output; ``bytes`` may end inside a UTF-8 character."""
        if self.is_closed:
            raise RuntimeError("feed() after close()")
        if isinstance(chunk, bytes | bytearray):
            text = self._decoder.decode(bytes(chunk))
        else:
            text = self._decoder.decode(b"", final=True) + chunk
        return self._feed_text(text) if text else []

    def close(self) -> list[Event]:
        """End of stream: flush what is pending and report anything left unclosed."""
        if self.is_closed:
            return []
        tail = self._decoder.decode(b"", final=True)
        events = self._feed_text(tail) if tail else []
        self.is_closed = True
        return events + self._close()

    @abstractmethod
    def _feed_text(self, text: str) -> list[Event]: ...

    @abstractmethod
    def _close(self) -> list[Event]: ...


class LineBuffer:
    """Cuts a stream of text into complete lines (each ending with ``\\n``)."""

    def __init__(self) -> None:
        self.partial = ""

    def push(self, text: str) -> list[str]:
        """Add text; return the lines it completes."""
        data = self.partial + text
        cut = data.rfind("\n") + 1
        self.partial = data[cut:]
        return [line + "\n" for line in data[: cut - 1].split("\n")] if cut else []

    def take_rest(self) -> str:
        """Return and clear the unfinished last line."""
        rest, self.partial = self.partial, ""
        return rest
