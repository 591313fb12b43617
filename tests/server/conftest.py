"""A real ``agentrt serve`` process on loopback for the whole session, and clients for it.

The server runs the default model in a subprocess on a free port (a small KV pool, batch 16;
see :mod:`serve_harness`); the fixture waits for ``/health`` and kills the process at the
end. Tests talk to it only over HTTP, with the clients a user would use.
"""

from __future__ import annotations

import pytest
from serve_harness import Server, start_server


@pytest.fixture(scope="session")
def server(tmp_path_factory) -> Server:
    """``agentrt serve`` on a free loopback port (killed at the end of the session)."""
    with start_server(tmp_path_factory.mktemp("server") / "serve.log") as server:
        yield server


@pytest.fixture(scope="session")
def client(server):
    """The official OpenAI client pointed at the server."""
    with server.openai_client() as c:
        yield c


@pytest.fixture
def aclient(server):
    """The async OpenAI client (one per test: it belongs to that test's event loop)."""
    import openai

    return openai.AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0,
                              timeout=120)


@pytest.fixture(scope="session")
def calculator() -> dict:
    """A calculator-like tool in OpenAI's format."""
    return {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Compute a op b for two numbers.",
            "parameters": {
                "type": "object",
                "properties": {
                    "a": {"type": "number"},
                    "op": {"type": "string",
                           "enum": ["add", "subtract", "multiply", "divide"]},
                    "b": {"type": "number"},
                },
                "required": ["a", "op", "b"],
            },
        },
    }
