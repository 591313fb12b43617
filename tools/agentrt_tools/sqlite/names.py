"""Early name checks for SQL that is still being written: reject a missing table or column.

:func:`check_prefix` looks at a statement prefix and returns an error as soon as a table or column
name that the schema does not have is complete (followed by another token). Names are resolved
the way SQLite would, conservatively: a name in table position (after ``FROM``/``JOIN``/``INTO``/
``UPDATE``/``TABLE`` or a comma in a ``FROM`` list) must be a table, view or CTE; ``t.col`` must be
a column of ``t`` when ``t`` is a known table or alias of one; a bare name must be a column of
some table, an alias or a CTE. Names in the select list may be aliases defined later, so they are
checked when that query's ``FROM`` clause ends. Keywords, functions, parameters and ``"quoted"``
names (which SQLite may read as strings) are never rejected; statements that define names
(``CREATE``, ``ALTER``, ``PRAGMA`` …) are left to SQLite. Anything not rejected here is still
checked by SQLite when the statement runs.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = ["Schema", "check_prefix", "read_schema"]

_TOKEN = re.compile(
    r"""(?P<ws>\s+)
    |(?P<comment>--[^\n]*(?:\n|$)|/\*.*?(?:\*/|$))
    |(?P<string>'(?:[^']|'')*(?:'|$))
    |(?P<qident>"(?:[^"]|"")*(?:"|$)|`(?:[^`]|``)*(?:`|$)|\[[^\]]*(?:\]|$))
    |(?P<number>0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
    |(?P<word>[A-Za-z_][A-Za-z0-9_$]*)
    |(?P<param>[?:@$][A-Za-z0-9_]*)
    |(?P<op>\|\||<=|>=|<>|!=|==|<<|>>|.)""",
    re.VERBOSE | re.DOTALL,
)
_KEYWORDS = frozenset(
    """ABORT ACTION ADD AFTER ALL ALTER ALWAYS ANALYZE AND AS ASC ATTACH AUTOINCREMENT BEFORE
    BEGIN BETWEEN BY CASCADE CASE CAST CHECK COLLATE COLUMN COMMIT CONFLICT CONSTRAINT CREATE
    CROSS CURRENT CURRENT_DATE CURRENT_TIME CURRENT_TIMESTAMP DATABASE DEFAULT DEFERRABLE DEFERRED
    DELETE DESC DETACH DISTINCT DO DROP EACH ELSE END ESCAPE EXCEPT EXCLUDE EXCLUSIVE EXISTS
    EXPLAIN FAIL FILTER FIRST FOLLOWING FOR FOREIGN FROM FULL GENERATED GLOB GROUP GROUPS HAVING
    IF IGNORE IMMEDIATE IN INDEX INDEXED INITIALLY INNER INSERT INSTEAD INTERSECT INTO IS ISNULL
    JOIN KEY LAST LEFT LIKE LIMIT MATCH MATERIALIZED NATURAL NO NOT NOTHING NOTNULL NULL NULLS OF
    OFFSET ON OR ORDER OTHERS OUTER OVER PARTITION PLAN PRAGMA PRECEDING PRIMARY QUERY RAISE RANGE
    RECURSIVE REFERENCES REGEXP REINDEX RELEASE RENAME REPLACE RESTRICT RETURNING RIGHT ROLLBACK
    ROW ROWS SAVEPOINT SELECT SET TABLE TEMP TEMPORARY THEN TIES TO TRANSACTION TRIGGER UNBOUNDED
    UNION UNIQUE UPDATE USING VACUUM VALUES VIEW VIRTUAL WHEN WHERE WINDOW WITH WITHOUT""".split()
)
_UNCHECKED_STATEMENTS = frozenset(
    "CREATE ALTER PRAGMA ATTACH DETACH VACUUM ANALYZE REINDEX BEGIN COMMIT END ROLLBACK "
    "SAVEPOINT RELEASE".split()
)
_TABLE_POSITION = frozenset({"FROM", "JOIN", "INTO", "UPDATE", "TABLE"})
_CLAUSES = frozenset(
    "SELECT FROM WHERE GROUP HAVING ORDER LIMIT OFFSET WINDOW UNION EXCEPT INTERSECT SET "
    "VALUES RETURNING ON USING WITH".split()
)
_ENDS_FROM = _CLAUSES - {"FROM", "ON", "USING", "SELECT", "WITH"}
_MASTER_TABLES = ("sqlite_master", "sqlite_schema", "sqlite_temp_master", "sqlite_temp_schema")
_MASTER = dict.fromkeys(_MASTER_TABLES, frozenset({"type", "name", "tbl_name", "rootpage", "sql"}))
_FUNCTIONS = frozenset(
    "count sum avg min max total group_concat coalesce ifnull nullif iif length lower upper "
    "substr substring trim ltrim rtrim round abs date time datetime julianday unixepoch strftime "
    "printf format replace instr typeof random json json_extract json_object json_array".split()
)
_ALWAYS_KNOWN = frozenset({"rowid", "oid", "_rowid_", "true", "false"})


@dataclass(frozen=True)
class Schema:
    """Tables (and views) of a database with their column names, all lower-case."""

    tables: dict[str, frozenset[str]]
    columns: frozenset[str] = field(init=False)
    #: columns of the user's tables (not sqlite_master's), for error messages
    user_columns: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tables", {**_MASTER, **self.tables})
        names = frozenset(c for cols in self.tables.values() for c in cols)
        user = [cols for name, cols in self.tables.items() if name not in _MASTER_TABLES]
        object.__setattr__(self, "columns", names)
        object.__setattr__(self, "user_columns", frozenset(c for cols in user for c in cols))


def read_schema(conn: sqlite3.Connection) -> Schema:
    """The schema of the ``main`` database of ``conn``."""
    rows = conn.execute(
        "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
    ).fetchall()
    tables = {}
    for (name,) in rows:
        info = conn.execute(f"PRAGMA table_info({_quote(name)})").fetchall()
        tables[name.lower()] = frozenset(row[1].lower() for row in info)
    return Schema(tables)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class _Token(NamedTuple):
    kind: str
    text: str

    @property
    def upper(self) -> str:
        return self.text.upper() if self.kind == "word" else ""

    @property
    def is_keyword(self) -> bool:
        return self.kind == "word" and self.upper in _KEYWORDS

    @property
    def is_name(self) -> bool:
        return self.kind == "qident" or (self.kind == "word" and not self.is_keyword)

    @property
    def name(self) -> str:
        if self.kind != "qident":
            return self.text.lower()
        inner = self.text[1:-1]
        quote = self.text[0]
        return (inner.replace(quote * 2, quote) if quote in "\"`" else inner).lower()


def _lex(text: str, final: bool) -> list[_Token]:
    """Significant tokens whose end is certain (all of them if ``final``)."""
    tokens: list[_Token] = []
    for match in _TOKEN.finditer(text):
        kind, value = match.lastgroup or "op", match.group()
        if match.end() == len(text) and not final and kind not in ("ws", "op"):
            break  # may still grow (a word, a number, an unclosed string or comment)
        if kind not in ("ws", "comment"):
            tokens.append(_Token(kind, value))
    return tokens


def check_prefix(text: str, schema: Schema, *, final: bool = False) -> str | None:
    """An error message if the (possibly unfinished) statement names something missing."""
    tokens = _lex(text, final)
    first = next((t.upper for t in tokens if t.kind == "word"), "")
    if first in _UNCHECKED_STATEMENTS:
        return None
    return _Checker(schema, tokens, final).run()


class _Checker:
    def __init__(self, schema: Schema, tokens: list[_Token], final: bool) -> None:
        self.schema, self.tokens, self.final = schema, tokens, final
        self.depth = 0
        self.clause: dict[int, str] = {0: ""}
        self.from_seen: dict[int, bool] = {0: False}
        self.deferred: dict[int, list[_Token]] = {0: []}
        self.aliases: dict[str, str | None] = {}  # alias -> table it names, if any
        self.ctes: set[str] = set()
        self._cte_columns_next = False
        self.opaque = False

    def run(self) -> str | None:
        for i, token in enumerate(self.tokens):
            error = self._token(i, token)
            if error is not None:
                return error
        return None

    def _token(self, i: int, token: _Token) -> str | None:
        if token.kind == "op":
            return self._op(token.text)
        if token.is_keyword:
            return self._keyword(token.upper)
        if not token.is_name or token.name in _FUNCTIONS:
            return None
        # NOTE: _lex() keeps a name only once something follows it, so it is complete here
        nxt = self.tokens[i + 1] if i + 1 < len(self.tokens) else None
        prev = self.tokens[i - 1] if i > 0 else None
        return self._name(i, token, prev, nxt)

    def _op(self, op: str) -> str | None:
        if op == "(":
            defining = self.clause[self.depth] == "WITH" and self._cte_columns_next
            self._cte_columns_next = False
            self.depth += 1
            self.clause[self.depth] = "DEFINE" if defining else ""
            self.from_seen[self.depth] = False
            self.deferred[self.depth] = []
        elif op == ")" and self.depth > 0:
            error = self._resolve() if self.from_seen[self.depth] else None
            self.depth -= 1
            return error
        return None

    def _keyword(self, word: str) -> str | None:
        error = None
        if word in _ENDS_FROM and self.from_seen[self.depth]:
            error = self._resolve()
        if word in _CLAUSES:
            self.clause[self.depth] = word
            if word == "FROM":
                self.from_seen[self.depth] = True
        elif word in ("JOIN", "INTO", "UPDATE", "TABLE"):
            self.clause[self.depth] = "FROM" if word == "JOIN" else word
        return error

    def _name(self, i: int, token: _Token, prev: _Token | None, nxt: _Token | None) -> str | None:
        name, known = token.name, self.schema.tables
        is_call = nxt is not None and nxt.text == "("
        clause = self.clause[self.depth]
        if clause == "DEFINE":
            self.aliases[name] = None  # a column of a CTE being defined
            return None
        if clause == "WITH" and prev is not None and (
            prev.upper in ("WITH", "RECURSIVE") or prev.text == ","
        ):
            self.ctes.add(name)
            self._cte_columns_next = is_call
            return None
        if self._in_table_position(prev):
            if name in known or name in self.ctes:
                return None
            if is_call:  # a table-valued function (json_each, pragma_table_info...)
                self.opaque = True  # its columns are unknown: stop rejecting bare names
                return None
            tables = [t for t in known if t not in _MASTER_TABLES]
            return f"no such table: {token.text} (tables: {_listing(tables)})"
        if is_call or (nxt is not None and nxt.text == "."):
            return None  # a function, or a qualifier checked with its column
        if prev is not None and prev.text == ".":
            return self._qualified(self.tokens[i - 2], token)
        if prev is not None and (prev.upper == "AS" or _ends_expression(prev)):
            self.aliases[name] = self._aliased_table(i, prev)
            return None
        if self._is_known(name) or (token.kind == "qident" and token.text[0] == '"'):
            return None
        if clause == "SELECT":
            self.deferred[self.depth].append(token)
            return None
        return f"no such column: {token.text} (columns: {_listing(self.schema.user_columns)})"

    def _in_table_position(self, prev: _Token | None) -> bool:
        if prev is None:
            return False
        if prev.upper in _TABLE_POSITION:
            return True
        return prev.text == "," and self.clause[self.depth] == "FROM"

    def _qualified(self, qualifier: _Token, column: _Token) -> str | None:
        table = self.aliases.get(qualifier.name, qualifier.name)
        columns = self.schema.tables.get(table or "")
        if columns is None or column.name in columns or column.name in _ALWAYS_KNOWN:
            return None
        return f"no such column: {qualifier.text}.{column.text} (columns: {_listing(columns)})"

    def _aliased_table(self, i: int, prev: _Token) -> str | None:
        source = self.tokens[i - 2] if prev.upper == "AS" and i >= 2 else prev
        return source.name if source.is_name and source.name in self.schema.tables else None

    def _is_known(self, name: str) -> bool:
        return self.opaque or (
            name in self.schema.columns or name in self.schema.tables or name in self.aliases
            or name in self.ctes or name in _ALWAYS_KNOWN
        )

    def _resolve(self) -> str | None:
        """The FROM clause of this query is complete: select-list names must exist now."""
        pending, self.deferred[self.depth] = self.deferred[self.depth], []
        for token in pending:
            if not self._is_known(token.name):
                return (
                    f"no such column: {token.text} (columns: {_listing(self.schema.user_columns)})"
                )
        return None


def _ends_expression(token: _Token) -> bool:
    """After such a token, a bare name is an alias (``orders o``, ``sum(x) total``)."""
    return token.is_name or token.kind in ("string", "number") or token.text == ")"


def _listing(names: object, limit: int = 30) -> str:
    items = sorted(names)  # type: ignore[call-overload]
    more = f", … {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more
