"""A front server's backend failures reach its clients as the backend's: one that is down or
failed is a 502 naming it (not the server's own 500), its 4xx keeps its status and message;
what is not a backend's stays a 500."""

from __future__ import annotations

from agentrt.backends.sglang_protocol import SGLangConnectionError, SGLangError
from agentrt.server.errors import internal_error


def test_a_backend_that_did_not_answer_is_a_502_naming_it():
    error = internal_error(SGLangConnectionError(
        "the sglang backend at http://127.0.0.1:9 did not answer: connection refused"))
    assert error.status_code == 502 and error.code == "backend_unavailable"
    assert "http://127.0.0.1:9" in error.message and error.type == "server_error"
    assert internal_error(SGLangError(503, "overloaded")).status_code == 502


def test_a_request_the_backend_refused_keeps_its_status_and_message():
    error = internal_error(SGLangError(400, "The input is longer than the context."))
    assert (error.status_code, error.message) == (400, "The input is longer than the context.")


def test_anything_else_is_the_servers_own_500():
    error = internal_error(RuntimeError("boom"))
    assert error.status_code == 500 and "RuntimeError: boom" in error.message


async def test_a_front_servers_health_follows_its_backend(sglang_server):
    """sglang-router polls ``/health``: a front whose backend is down must say 503."""
    import httpx

    from agentrt.backends import get_backend
    from agentrt.server.app import create_app

    backend = get_backend("sglang", url=sglang_server.url)
    try:
        app = create_app(backend, backend_url=sglang_server.url)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://front") as client:
            assert (await client.get("/health")).status_code == 200
            app.state.agentrt.backend_url = "http://127.0.0.1:9"  # the backend went away
            answer = await client.get("/health")
            assert answer.status_code == 503
            assert answer.json()["status"] == "backend unavailable"
    finally:
        backend.close()
