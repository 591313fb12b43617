"""sqlite: statements run as they stream, missing names are rejected early, read-only holds."""

from __future__ import annotations

import re
import sqlite3

import pytest

from agentrt.agent import ToolRuntime
from agentrt.agent.parsers.base import Piece
from agentrt_tools.sqlite import Schema, SqliteTool, check_prefix

SCHEMA = Schema(
    {
        "orders": frozenset({"id", "customer", "total", "day"}),
        "customers": frozenset({"name", "city"}),
    }
)


@pytest.fixture(scope="module")
def runtime(shop_db):
    tools = [SqliteTool(path=str(shop_db), max_rows=5, max_query_s=0.3)]
    with ToolRuntime(tools) as rt:
        yield rt


def query(runtime, sql, session="default"):
    return runtime.run("sqlite", {"query": sql}, session=session)


def test_query_results_are_tables_capped_in_rows(runtime):
    obs = query(
        runtime,
        "SELECT customer, sum(total) AS spent FROM orders WHERE customer = 'ada' GROUP BY customer",
    )
    assert obs.text == "customer | spent\nada | 42.5\n(1 row)"
    obs = query(runtime, "SELECT id FROM orders")
    assert obs.text.splitlines()[-1] == "... (only the first 5 rows are shown)"
    assert len(obs.text.splitlines()) == 7


def test_a_missing_column_is_rejected_on_a_prefix_before_the_statement_is_complete(runtime):
    sql = "SELECT customer, amount_usd FROM orders WHERE total > 3 ORDER BY customer;"
    words = re.findall(r"\S+\s*", sql)
    call = runtime.start("sqlite")
    rejected = None
    for n, word in enumerate(words):
        call.feed(Piece("delta", word, key="query"))
        if call.wait() is not None:
            rejected = n
            break
    fed = "".join(words[: rejected + 1])
    assert fed == "SELECT customer, amount_usd FROM orders WHERE "
    assert not sqlite3.complete_statement(fed)
    obs = call.finish()
    assert obs.is_error and obs.rejected_at == rejected
    assert "no such column: amount_usd" in obs.text and "customer" in obs.text


def test_a_missing_table_or_qualified_column_is_rejected_as_soon_as_it_is_complete():
    assert check_prefix("SELECT * FROM ordrs", SCHEMA) is None  # `ordrs` may still grow
    assert "no such table: ordrs" in check_prefix("SELECT * FROM ordrs ", SCHEMA)
    assert "no such column: amont" in check_prefix("SELECT * FROM orders WHERE amont ", SCHEMA)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT customer, sum(total) AS spent FROM orders GROUP BY customer ORDER BY spent DESC",
        "SELECT o.customer, c.city FROM orders o JOIN customers AS c ON c.name = o.customer",
        "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n LIMIT 3) SELECT x FROM n",
        "SELECT t.spent FROM (SELECT sum(total) AS spent FROM orders) t WHERE spent > 1",
        "SELECT value FROM json_each('[1, 2]') WHERE value > 1",
        "SELECT name FROM sqlite_master WHERE type = 'table'",
        "SELECT CAST(total AS INTEGER), \"day\" FROM orders WHERE id = ? AND day LIKE '2024%'",
        "UPDATE orders SET total = total + 1 WHERE customer IN (SELECT name FROM customers)",
    ],
)
def test_valid_statements_are_never_rejected(sql):
    for end in range(len(sql) + 1):
        assert check_prefix(sql[:end], SCHEMA) is None, sql[:end]
    assert check_prefix(sql, SCHEMA, final=True) is None


def test_qualified_and_update_names_are_checked():
    assert "no such column: o.totl" in check_prefix("SELECT 1 FROM orders o WHERE o.totl ", SCHEMA)
    assert "no such column: totl" in check_prefix("UPDATE orders SET totl = 1", SCHEMA)


def test_writes_to_a_read_only_database_fail(runtime, shop_db):
    obs = query(runtime, "INSERT INTO customers VALUES ('eve', 'Rome')")
    assert obs.is_error and "attempt to write a readonly database" in obs.text
    assert "opened read-only" in obs.text


def test_drop_table_in_a_multi_statement_string_is_contained(runtime, shop_db):
    obs = query(runtime, "SELECT count(*) AS n FROM customers; DROP TABLE customers; SELECT 1;")
    assert obs.is_error
    assert obs.text.startswith("n\n2\n(1 row)\n\nsqlite error: attempt to write a readonly")
    with sqlite3.connect(shop_db) as conn:
        assert conn.execute("SELECT count(*) FROM customers").fetchone() == (2,)


def test_attach_is_denied(runtime, tmp_path):
    obs = query(runtime, f"ATTACH DATABASE '{tmp_path / 'other.db'}' AS other")
    assert obs.is_error and "not authorized" in obs.text


def test_a_long_query_is_interrupted(runtime):
    sql = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
    obs = query(runtime, sql)
    assert obs.is_error and "ran longer than 0.3 s and was stopped" in obs.text
    assert query(runtime, "SELECT 1 AS one").text == "one\n1\n(1 row)"


def test_writes_when_opted_in(tmp_path):
    db = tmp_path / "rw.db"
    sqlite3.connect(db).close()
    with ToolRuntime([SqliteTool(path=str(db), allow_writes=True)]) as rt:
        obs = rt.run("sqlite", {"query": "CREATE TABLE t (x); INSERT INTO t VALUES (1), (2);"})
        assert obs.text == "OK (0 rows changed)\n\nOK (2 rows changed)"
        assert rt.run("sqlite", {"query": "SELECT sum(x) AS s FROM t"}).text == "s\n3\n(1 row)"


def test_a_missing_database_file_is_a_clear_error(tmp_path):
    with ToolRuntime([SqliteTool(path=str(tmp_path / "nope.db"))]) as rt:
        obs = rt.run("sqlite", {"query": "SELECT 1"})
    assert obs.is_error and "no database file at" in obs.text


def test_vacuum_into_and_extensions_are_denied_with_the_reason(runtime, tmp_path):
    copy = tmp_path / "copy.db"
    for sql in (f"VACUUM INTO '{copy}'", "SELECT load_extension('libm.so.6')"):
        obs = query(runtime, sql)
        assert obs.is_error and "VACUUM INTO and extensions are disabled" in obs.text, sql
    assert not copy.exists()


def test_a_huge_value_is_a_clear_error_and_earlier_results_stay(runtime):
    obs = query(runtime, "SELECT 1 AS one; SELECT zeroblob(300 * 1024 * 1024);")
    assert obs.is_error
    assert obs.text == (
        "one\n1\n(1 row)\n\nsqlite error: string or blob too big (values are limited to 64 MB)"
    )


def test_a_lone_surrogate_in_the_query_is_a_clear_error(runtime):
    obs = query(runtime, "SELECT '\ud800' AS s;")
    assert obs.is_error
    assert obs.text == "sqlite error: the query is not valid text (it has a lone surrogate)"


def test_a_transaction_left_open_is_rolled_back_so_others_can_write(tmp_path):
    db = tmp_path / "app.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (x)")
    conn.close()

    def app_count_after_write() -> int:  # the application that owns the file, next to the tool
        with sqlite3.connect(db, timeout=0) as app:
            app.execute("INSERT INTO t VALUES (0)")
        app.close()
        with sqlite3.connect(db) as app:
            (n,) = app.execute("SELECT count(*) FROM t WHERE x = 1").fetchone()
        app.close()
        return n

    with ToolRuntime([SqliteTool(path=str(db))]) as rt:  # read-only: BEGIN still locks
        obs = rt.run("sqlite", {"query": "BEGIN; SELECT count(*) AS n FROM t;"})
        assert obs.text.endswith("(1 row)\n\n(the transaction left open was rolled back: "
                                 "COMMIT within the same call)")
        assert app_count_after_write() == 0
        obs = rt.run("sqlite", {"query": "BEGIN; SELECT nope FROM t;"})
        assert obs.is_error and obs.text.endswith("rolled back: COMMIT within the same call)")
        assert app_count_after_write() == 0
    with ToolRuntime([SqliteTool(path=str(db), allow_writes=True)]) as rt:
        obs = rt.run("sqlite", {"query": "BEGIN; INSERT INTO t VALUES (1);"})
        assert "rolled back" in obs.text and app_count_after_write() == 0
        obs = rt.run("sqlite", {"query": "BEGIN; INSERT INTO t VALUES (1); COMMIT;"})
        assert "rolled back" not in obs.text and app_count_after_write() == 1
