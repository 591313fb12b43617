"""Fenced code blocks (```` ```python ```` … ```` ``` ````) as tool calls, one statement at a time.

A fence whose language maps to a tool opens a call (``CallStart`` + ``ToolName``); each complete
top-level statement inside it is emitted as a ``statement`` piece as soon as a later line proves
it complete (see :mod:`agentrt.agent.parsers.statements` for the dedent and lookahead rules); the
closing fence flushes the last statement and ends the call. Fences follow CommonMark: up to three
spaces of indentation (stripped from the content lines too), ```` ``` ```` or ``~~~`` runs of three
or more, closed by a run at least as long. Fences in other languages are skipped whole. Work is
done on complete lines only, so the events never depend on how the text was chunked.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from agentrt.agent.parsers.base import (
    BaseStreamParser,
    CallEnd,
    CallStart,
    Event,
    LineBuffer,
    ParseError,
    Piece,
    ToolName,
)
from agentrt.agent.parsers.statements import StatementSplitter, create_splitter

__all__ = ["DEFAULT_LANGUAGES", "FencedCodeParser"]

#: fence language → tool name
DEFAULT_LANGUAGES: Mapping[str, str] = {
    "python": "python_repl",
    "py": "python_repl",
    "python3": "python_repl",
    "sql": "sqlite",
    "sqlite": "sqlite",
}
_FAMILIES = {"python": "python", "py": "python", "python3": "python", "sql": "sql", "sqlite": "sql"}
_OPEN = re.compile(r"^( {0,3})(`{3,}|~{3,})\s*([^\s`]*)[^`]*$")
_CLOSE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*$")


@dataclass
class _Fence:
    marker: str
    indent: int
    language: str
    line_no: int
    splitter: StatementSplitter | None  # None: a fence in a language that is not a call


class FencedCodeParser(BaseStreamParser):
    """Streams the statements of fenced code blocks whose language maps to a tool."""

    syntax = "fenced_code"

    def __init__(self, languages: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self.languages = dict(DEFAULT_LANGUAGES if languages is None else languages)
        self._lines = LineBuffer()
        self._fence: _Fence | None = None
        self._line_no = 0

    def _feed_text(self, text: str) -> list[Event]:
        events: list[Event] = []
        for line in self._lines.push(text):
            events += self._line(line)
        return events

    def _close(self) -> list[Event]:
        rest = self._lines.take_rest()
        events = self._line(rest) if rest else []
        fence = self._fence
        if fence is not None and fence.splitter is not None:
            events.append(
                ParseError(
                    f"unclosed code fence: the ```{fence.language} block opened on line "
                    f"{fence.line_no} was not closed before the end of the output"
                )
            )
        self._fence = None
        return events

    def _line(self, line: str) -> list[Event]:
        self._line_no += 1
        if self._fence is None:
            return self._open(line)
        fence = self._fence
        close = _CLOSE.match(line.rstrip("\r\n"))
        if close and close.group(1)[0] == fence.marker[0] and len(close.group(1)) >= len(
            fence.marker
        ):
            self._fence = None
            if fence.splitter is None:
                return []
            return [Piece("statement", s) for s in fence.splitter.flush()] + [CallEnd()]
        if fence.splitter is None:
            return []
        content = _strip_indent(line, fence.indent)
        return [Piece("statement", s) for s in fence.splitter.push(content)]

    def _open(self, line: str) -> list[Event]:
        match = _OPEN.match(line.rstrip("\r\n"))
        if not match:
            return []
        indent, marker, language = len(match.group(1)), match.group(2), match.group(3).lower()
        tool = self.languages.get(language)
        splitter = create_splitter(_FAMILIES.get(language)) if tool else None
        self._fence = _Fence(marker, indent, language, self._line_no, splitter)
        return [CallStart(self.syntax), ToolName(tool)] if tool else []


def _strip_indent(line: str, indent: int) -> str:
    n = 0
    while n < indent and n < len(line) and line[n] == " ":
        n += 1
    return line[n:]
