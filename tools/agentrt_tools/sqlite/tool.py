"""The sqlite tool: read-only by default, statements run as they stream, bad names rejected early.

The database is opened with the URI ``mode=ro`` unless ``allow_writes`` (then ``mode=rw``; the
file must exist either way). The query streams in as ``delta`` pieces of the ``query`` argument or
as statements of a ```` ```sql ```` fence; every statement runs the moment
:func:`sqlite3.complete_statement` says it is complete, one at a time (so ``SELECT 1; DROP TABLE t``
is two statements and the second meets the read-only file). While a statement is still being
written its table and column names are checked against the schema
(:func:`~agentrt_tools.sqlite.names.check_prefix`) and a missing one rejects the call at once. An
authorizer denies ``ATTACH``/``DETACH`` (other database files, and so ``VACUUM INTO``); a
progress handler interrupts a statement that runs longer than ``max_query_s`` (between virtual
machine steps: one slow function call, e.g. ``printf('%.*c', 2000000000, 'x')``, runs on to the
sandbox's CPU and wall limits); no string or blob may be longer than ``max_value_mb``
(``SQLITE_LIMIT_LENGTH``: ``zeroblob(10**9)`` is an error, not a gigabyte); results are capped at
``max_rows`` rows and ``max_result_chars`` characters. A transaction still open when a call ends
(``BEGIN`` without ``COMMIT``, even read-only) is rolled back, with a note: it would hold a lock
that keeps every other writer off the database for as long as the session lasts.
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
import urllib.parse
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from agentrt.agent.parsers.base import Piece
from agentrt.agent.parsers.statements import SqlStatementSplitter
from agentrt.agent.plugin import Invocation, Tool, ToolCallError, ToolSession, check_argument
from agentrt.agent.sandbox import SandboxConfig
from agentrt_tools.sqlite.names import check_prefix, read_schema

__all__ = ["SqliteTool"]

_DENIED_ACTIONS = frozenset({sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH})
_SURROGATE = re.compile("[\ud800-\udfff]")
_ROLLED_BACK = "(the transaction left open was rolled back: COMMIT within the same call)"


@dataclass(frozen=True)
class SqliteTool(Tool):
    """Query a SQLite database file."""

    name: ClassVar[str] = "sqlite"
    description: ClassVar[str] = (
        "Run SQL (SQLite dialect) on the database and return the result rows."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"query": {"type": "string", "description": "one or more SQL statements"}},
        "required": ["query"],
    }
    main_argument: ClassVar[str | None] = "query"

    path: str = ""
    allow_writes: bool = False
    max_rows: int = 50
    max_result_chars: int = 8_000
    max_query_s: float = 5.0
    #: longest string or blob a statement may make or read (``SQLITE_LIMIT_LENGTH``)
    max_value_mb: int = 64
    check_names: bool = True
    limits: SandboxConfig = field(default_factory=SandboxConfig)

    def __post_init__(self) -> None:
        if not self.path:
            raise ValueError("SqliteTool needs the path of a database file")
        object.__setattr__(self, "path", os.path.realpath(self.path))

    @property
    def sandbox(self) -> SandboxConfig:  # type: ignore[override]
        """The limits, plus access to the database's folder (journal and WAL files live there)."""
        folder = (str(Path(self.path).parent),)
        if self.allow_writes:
            return replace(self.limits, write_paths=self.limits.write_paths + folder)
        return replace(self.limits, read_paths=self.limits.read_paths + folder)

    def open_session(self, workdir: Path) -> ToolSession:
        return _SqliteSession(self)


class _SqliteSession(ToolSession):
    def __init__(self, tool: SqliteTool) -> None:
        super().__init__(tool)
        self.tool: SqliteTool = tool
        if not Path(tool.path).is_file():
            raise FileNotFoundError(f"no database file at {tool.path}")
        mode = "rw" if tool.allow_writes else "ro"
        uri = f"file:{urllib.parse.quote(tool.path)}?mode={mode}"
        self.conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA temp_store = MEMORY")
        self.conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, tool.max_value_mb * 2**20)
        self.schema = read_schema(self.conn)
        self.conn.set_authorizer(self._authorize)
        self.deadline = float("inf")
        self.conn.set_progress_handler(self._progress, 1000)

    def start(self) -> Invocation:
        return _SqliteCall(self)

    def close(self) -> None:
        self.conn.close()

    def execute(self, statement: str) -> str:
        """Run one statement; return its result as text (raises sqlite3.Error)."""
        self.deadline = time.monotonic() + self.tool.max_query_s
        try:
            cursor = self.conn.execute(statement)
            rows = cursor.fetchmany(self.tool.max_rows + 1)
        finally:
            self.deadline = float("inf")
        if cursor.description is None:
            self.schema = read_schema(self.conn) if self.tool.allow_writes else self.schema
            return f"OK ({max(cursor.rowcount, 0)} rows changed)"
        columns = [d[0] for d in cursor.description]
        return _table(columns, rows, self.tool.max_rows, self.tool.max_result_chars)

    def end_transaction(self, text: str) -> str:
        """Roll back a transaction the call left open; ``text``, with a note if there was one."""
        if not self.conn.in_transaction:
            return text
        self.conn.rollback()
        return f"{text}\n\n{_ROLLED_BACK}" if text else _ROLLED_BACK

    def _authorize(self, action: int, *args: Any) -> int:
        return sqlite3.SQLITE_DENY if action in _DENIED_ACTIONS else sqlite3.SQLITE_OK

    def _progress(self) -> int:
        return 1 if time.monotonic() > self.deadline else 0


class _SqliteCall(Invocation):
    main_argument = "query"

    def __init__(self, session: _SqliteSession) -> None:
        self.session = session
        self.splitter = SqlStatementSplitter()
        self.streamed = ""
        self.results: list[str] = []

    def feed(self, piece: Piece) -> None:
        try:
            super().feed(piece)
        except ToolCallError as exc:
            raise ToolCallError(self.session.end_transaction(str(exc))) from None
        except BaseException:  # a limit (CPU time, memory): the call is over too
            self.session.end_transaction("")
            raise

    def on_statement(self, text: str) -> None:
        self._check_text(text)
        self._run(text)

    def on_delta(self, key: str, text: str) -> None:
        if key == "query":
            self.streamed += text
            self._push(text)

    def on_argument(self, key: str, value: Any) -> None:
        check_argument(SqliteTool.parameters, key, value)
        streamed, self.streamed = self.streamed, ""
        self._push(value[len(streamed) :] if value.startswith(streamed) else value)
        for statement in self.splitter.flush():
            self._run(statement)

    def finish(self) -> str:
        try:
            for statement in self.splitter.flush():
                self._run(statement)
        except ToolCallError as exc:
            raise ToolCallError(self.session.end_transaction(str(exc))) from None
        if not self.results:
            raise ToolCallError("sqlite: no SQL statement was given")
        return self.session.end_transaction(self._text())

    def abort(self) -> None:
        self.session.end_transaction("")

    def _push(self, text: str) -> None:
        self._check_text(text)
        for statement in self.splitter.push(text):
            self._run(statement)
        self._check(self.splitter.pending, final=False)

    def _check_text(self, text: str) -> None:
        if _SURROGATE.search(text):  # "\ud800" in the JSON arguments: SQLite takes only UTF-8
            error = "sqlite error: the query is not valid text (it has a lone surrogate)"
            raise ToolCallError(self._text(error))

    def _check(self, text: str, final: bool) -> None:
        if not self.session.tool.check_names or not text.strip():
            return
        error = check_prefix(text, self.session.schema, final=final)
        if error is not None:
            shown = " ".join(text.split())
            raise ToolCallError(f"sqlite: {error}; rejected while writing: {shown!r}")

    def _run(self, statement: str) -> None:
        self._check(statement, final=True)
        try:
            self.results.append(self.session.execute(statement))
        except sqlite3.Error as exc:
            raise ToolCallError(self._text(_describe(exc, self.session.tool))) from None

    def _text(self, error: str | None = None) -> str:
        parts = self.results + ([error] if error else [])
        text, limit = "\n\n".join(parts), self.session.tool.max_result_chars
        return text if len(text) <= limit else text[:limit] + "\n... [result cut]"


def _describe(exc: sqlite3.Error, tool: SqliteTool) -> str:
    message = str(exc)
    if "readonly" in message and not tool.allow_writes:
        return f"sqlite error: {message} (the database is opened read-only)"
    if message == "interrupted":
        return f"sqlite error: the statement ran longer than {tool.max_query_s} s and was stopped"
    if "not authorized" in message or "authorization denied" in message:
        return f"sqlite error: {message} (ATTACH, DETACH, VACUUM INTO and extensions are disabled)"
    if "too big" in message:
        return f"sqlite error: {message} (values are limited to {tool.max_value_mb} MB)"
    return f"sqlite error: {message}"


def _table(columns: list[str], rows: list[tuple], max_rows: int, max_chars: int) -> str:
    lines = [" | ".join(columns)]
    lines += [" | ".join(_cell(v, max_chars) for v in row) for row in rows[:max_rows]]
    if len(rows) > max_rows:
        lines.append(f"... (only the first {max_rows} rows are shown)")
    else:
        lines.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(lines)


def _cell(value: Any, max_chars: int) -> str:
    """A value as text, cut before ``str`` (a 64 MB blob would be 256 MB of repr)."""
    if value is None:
        return "NULL"
    if isinstance(value, str | bytes) and len(value) > max_chars:
        value = value[:max_chars]  # the result is cut after max_chars anyway
    return str(value)
