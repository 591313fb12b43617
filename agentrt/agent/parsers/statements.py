"""Statement splitters: source text in, complete top-level statements out, as early as possible.

The Python splitter closes a statement on the first line that proves it complete: a simple
statement at the end of its logical line (brackets, triple-quoted strings and backslash
continuations closed); a compound statement (``if``/``for``/``def``/``class``/``try``/``with``/
``match``…) only at the next line that starts in column 0 (the dedent rule), unless that line is
``else``/``elif``/``except``/``finally`` (lookahead); decorators wait for their ``def``/``class``.
Blank and comment lines never close a block. The SQL splitter closes a statement at a ``;`` that
:func:`sqlite3.complete_statement` accepts. Both work line by line or on arbitrary chunks, and the
result never depends on how the text was chunked.
"""

from __future__ import annotations

import re
import sqlite3
from typing import Literal, Protocol

from agentrt.agent.parsers.base import LineBuffer

__all__ = [
    "PythonStatementSplitter",
    "SqlStatementSplitter",
    "StatementSplitter",
    "WholeBlockSplitter",
    "create_splitter",
]

_COMPOUND = frozenset({"if", "for", "while", "def", "class", "try", "with", "async"})
_CONTINUATION = frozenset({"else", "elif", "except", "finally"})
_FIRST_WORD = re.compile(r"[A-Za-z_]\w*|@")


class StatementSplitter(Protocol):
    """Turns source text into complete statements."""

    def push(self, text: str) -> list[str]:
        """Add source text (any chunk); return the statements it completes."""
        ...

    def flush(self) -> list[str]:
        """End of source: return what is still pending."""
        ...


class _LineScanner:
    """Tracks whether a logical Python line is still open across physical lines."""

    def __init__(self) -> None:
        self.quote: str | None = None
        self.depth = 0
        self.backslash = False
        self.last = ""

    @property
    def is_open(self) -> bool:
        return self.quote is not None or self.depth > 0 or self.backslash

    def scan(self, line: str) -> None:
        i, n = 0, len(line)
        self.backslash = False
        while i < n:
            c = line[i]
            if self.quote is not None:
                if c == "\\":
                    i += 2
                    continue
                if line.startswith(self.quote, i):
                    i += len(self.quote)
                    self.quote, self.last = None, c
                    continue
                if c == "\n" and len(self.quote) == 1:
                    self.quote = None  # unterminated string: compile() will report it
                i += 1
                continue
            if c == "#":
                break
            if c in "'\"":
                self.quote = c * 3 if line.startswith(c * 3, i) else c
                i += len(self.quote)
                continue
            if c in "([{":
                self.depth += 1
            elif c in ")]}":
                self.depth = max(0, self.depth - 1)
            elif c == "\\" and line[i + 1 :].strip("\r\n") == "":
                self.backslash = True
                break
            if not c.isspace():
                self.last = c
            i += 1


Kind = Literal["simple", "compound", "decorator"]


class PythonStatementSplitter:
    """Splits Python source into complete top-level statements (see the module docstring)."""

    def __init__(self) -> None:
        self._buffer = LineBuffer()
        self._lines: list[str] = []
        self._scanner = _LineScanner()
        self._kind: Kind | None = None

    def push(self, text: str) -> list[str]:
        out: list[str] = []
        for line in self._buffer.push(text):
            out += self.push_line(line)
        return out

    def flush(self) -> list[str]:
        rest = self._buffer.take_rest()
        out = self.push_line(rest + "\n") if rest.strip() else []
        if self._lines:
            out.append(self._take())
        return out

    def push_line(self, line: str) -> list[str]:
        """Add one complete physical line (ending with a newline)."""
        if self._scanner.is_open:
            return self._append(line)
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            if self._lines:
                self._lines.append(line)
            return []
        out: list[str] = []
        if self._lines and not line[0].isspace() and not self._continues(stripped):
            out.append(self._take())
        return out + self._append(line)

    def _continues(self, stripped: str) -> bool:
        """Does this column-0 line belong to the pending statement (lookahead)?"""
        word = _first_word(stripped)
        if self._kind == "compound":
            return word in _CONTINUATION
        if self._kind == "decorator":
            if word in ("def", "class", "async"):
                self._kind = "compound"
            return True
        return False

    def _append(self, line: str) -> list[str]:
        if not self._lines:
            self._kind = None
        self._lines.append(line)
        self._scanner.scan(line)
        if self._scanner.is_open:
            return []
        if self._kind is None:
            self._kind = self._classify()
        return [self._take()] if self._kind == "simple" else []

    def _classify(self) -> Kind:
        word = _first_word(self._lines[0].strip())
        if word == "@":
            return "decorator"
        if word in _COMPOUND or (word == "match" and self._scanner.last == ":"):
            return "compound"
        if self._lines[0][:1].isspace() and self._scanner.last == ":":
            return "compound"  # a dangling indented header: keep its body with it
        return "simple"

    def _take(self) -> str:
        lines, self._lines = self._lines, []
        while lines and (not lines[-1].strip() or lines[-1].lstrip().startswith("#")):
            lines.pop()
        self._kind = None
        self._scanner = _LineScanner()
        return "".join(lines)


def _first_word(stripped: str) -> str:
    match = _FIRST_WORD.match(stripped)
    return match.group(0) if match else ""


class SqlStatementSplitter:
    """Splits SQL into statements at each ``;`` that ends a complete statement."""

    def __init__(self) -> None:
        self._text = ""

    @property
    def pending(self) -> str:
        """The statement still being written (text after the last complete one)."""
        return self._text

    def push(self, text: str) -> list[str]:
        out: list[str] = []
        start = len(self._text)
        self._text += text
        cut = self._text.find(";", start)
        while cut != -1:
            candidate = self._text[: cut + 1]
            if sqlite3.complete_statement(candidate):
                if candidate.strip() != ";":
                    out.append(candidate.strip())
                self._text = self._text[cut + 1 :]
                cut = self._text.find(";")
            else:
                cut = self._text.find(";", cut + 1)
        return out

    def flush(self) -> list[str]:
        rest, self._text = self._text.strip(), ""
        return [rest] if rest else []


class WholeBlockSplitter:
    """No splitting: the whole block is one statement (languages without a splitter)."""

    def __init__(self) -> None:
        self._text = ""

    def push(self, text: str) -> list[str]:
        self._text += text
        return []

    def flush(self) -> list[str]:
        rest, self._text = self._text, ""
        return [rest] if rest.strip() else []


_SPLITTERS = {"python": PythonStatementSplitter, "sql": SqlStatementSplitter}


def create_splitter(family: str | None) -> StatementSplitter:
    """A splitter for a language family (``"python"``, ``"sql"``; anything else: whole block)."""
    return _SPLITTERS.get(family or "", WholeBlockSplitter)()
