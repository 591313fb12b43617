"""Fixtures of the LlamaIndex integration tests: AgentRT on the session engine, real tools."""

from __future__ import annotations

import sqlite3

import pytest

pytest.importorskip("llama_index.core", reason="needs the [llamaindex] extra")
pytest.importorskip("xgrammar", reason="needs xgrammar ([constrained] extra)")

ORDERS = [("alice", 12.0), ("bob", 5.0), ("alice", 30.0), ("carol", 7.5), ("bob", 4.0)]


@pytest.fixture(scope="session")
def llm(engine):
    """AgentRT on the session's real engine: greedy, short answers."""
    from llama_index.llms.agentrt import AgentRT

    return AgentRT(engine=engine, max_tokens=24)


@pytest.fixture(scope="session")
def tool_llm(engine):
    """AgentRT with room for a tool call (a SQL query is ~40 tokens)."""
    from llama_index.llms.agentrt import AgentRT

    return AgentRT(engine=engine, max_tokens=96)


@pytest.fixture(scope="module")
def shop_db(tmp_path_factory) -> str:
    """A real SQLite file: ``orders(customer, amount)``."""
    path = tmp_path_factory.mktemp("llama-index") / "shop.db"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE orders (customer TEXT, amount REAL)")
        con.executemany("INSERT INTO orders VALUES (?, ?)", ORDERS)
    return str(path)


@pytest.fixture(scope="module")
def runtime(shop_db):
    """agentrt's calculator and sqlite tools in their worker processes."""
    from agentrt.agent import ToolRuntime
    from agentrt_tools import SqliteTool

    with ToolRuntime(["calculator", SqliteTool(path=shop_db)]) as rt:
        yield rt
