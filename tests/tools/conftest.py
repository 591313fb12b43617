"""Fixtures of the tool tests: a real SQLite database file."""

from __future__ import annotations

import sqlite3

import pytest

ORDERS = [("ada", 12.5, "2024-01-03"), ("bob", 4.0, "2024-01-04"), ("ada", 30.0, "2024-02-11")]


@pytest.fixture(scope="session")
def shop_db(tmp_path_factory):
    """A small shop database: customers and orders."""
    path = tmp_path_factory.mktemp("sqlite") / "shop.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE customers (name TEXT PRIMARY KEY, city TEXT)")
        conn.execute(
            "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT, total REAL, day TEXT)"
        )
        conn.executemany(
            "INSERT INTO customers VALUES (?, ?)", [("ada", "London"), ("bob", "Paris")]
        )
        conn.executemany("INSERT INTO orders (customer, total, day) VALUES (?, ?, ?)", ORDERS)
        conn.executemany(
            "INSERT INTO orders (customer, total, day) VALUES ('zed', ?, '2024-03-01')",
            [(float(i),) for i in range(200)],
        )
    conn.close()
    return path
