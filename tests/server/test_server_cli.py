"""``agentrt serve --help`` helps, and ``import agentrt`` never imports the server's deps."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agentrt.cli import build_parser


def test_serve_help_lists_flags_and_an_example():
    sub = build_parser()._subparsers._group_actions[0].choices["serve"]
    text = sub.format_help()
    for flag in ("--host", "--port", "--model", "--max-batch", "--dtype",
                 "--served-model-name", "--kv-cache-gb", "--backend", "--backend-url"):
        assert flag in text
    assert "examples:" in text and "/v1/chat/completions" in text and "base_url" in text


def test_backend_and_backend_url_go_together():
    for extra in (["--backend", "sglang"], ["--backend-url", "http://127.0.0.1:1"]):
        done = subprocess.run([sys.executable, "-m", "agentrt", "serve", *extra],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and "--backend-url goes with --backend sglang" in done.stderr


def test_a_front_server_without_its_backend_fails_before_listening():
    done = subprocess.run([sys.executable, "-m", "agentrt", "serve", "--backend", "sglang",
                           "--backend-url", "http://127.0.0.1:9"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "on http://" not in done.stdout  # an error, not usage
    assert "the sglang backend at http://127.0.0.1:9 did not answer" in done.stderr


def test_import_agentrt_does_not_import_the_server():
    code = ("import sys, agentrt, agentrt.cli, agentrt.chat; "
            "bad = {'fastapi', 'uvicorn', 'starlette', 'prometheus_client'} & set(sys.modules); "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # a process of its own loads the model
def test_api_key_flag_wins_over_the_environment_and_no_color_holds_on_a_terminal():
    """``--api-key`` (vLLM's flag) keys every route but /health; it wins over
    ``$AGENTRT_API_KEY``; with ``NO_COLOR`` uvicorn's log on a terminal has no ANSI codes."""
    import os
    import pty
    import select
    import time

    import httpx

    port = _free_port()
    leader, follower = pty.openpty()
    env = {**os.environ, "NO_COLOR": "1", "AGENTRT_API_KEY": "from-env"}
    proc = subprocess.Popen([sys.executable, "-m", "agentrt", "serve", "--port", str(port),
                             "--api-key", "from-flag", "--kv-cache-gb", "0.05"],
                            stdout=follower, stderr=follower, env=env)
    os.close(follower)
    seen = b""
    try:
        deadline = time.monotonic() + 180
        while b"Uvicorn running" not in seen and time.monotonic() < deadline:
            if select.select([leader], [], [], 1)[0]:
                try:
                    seen += os.read(leader, 4096)
                except OSError:
                    break
            assert proc.poll() is None, seen.decode(errors="replace")
        assert b"Uvicorn running" in seen, seen.decode(errors="replace")
        assert b"\x1b[" not in seen
        base = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{base}/health").status_code == 200
        for key, status in ((None, 401), ("from-env", 401), ("from-flag", 200)):
            headers = {} if key is None else {"Authorization": f"Bearer {key}"}
            assert httpx.get(f"{base}/v1/models", headers=headers).status_code == status, key
    finally:
        proc.terminate()
        proc.wait(30)
        os.close(leader)


def test_the_api_key_comes_from_the_environment_without_the_flag(monkeypatch):
    import agentrt.server
    from agentrt.cli import main

    got = {}
    monkeypatch.setattr(agentrt.server, "serve", lambda *a, **kw: got.update(kw))
    monkeypatch.setenv("AGENTRT_API_KEY", "from-env")
    assert main(["serve", "--port", str(_free_port())]) == 0
    assert got["api_key"] == "from-env"
    monkeypatch.setenv("AGENTRT_API_KEY", "")
    assert main(["serve", "--port", str(_free_port())]) == 0
    assert got["api_key"] is None


def test_max_body_mb_sets_the_servers_body_limit(monkeypatch, capsys):
    """``--max-body-mb`` (default 32) reaches the app; a non-positive or non-finite size is
    a usage error naming the flag."""
    import agentrt.server
    from agentrt.cli import main

    got = {}
    monkeypatch.setattr(agentrt.server, "serve", lambda *a, **kw: got.update(kw))
    assert main(["serve", "--port", str(_free_port()), "--max-body-mb", "0.5"]) == 0
    assert got["max_body_bytes"] == 2**19
    assert main(["serve", "--port", str(_free_port())]) == 0
    assert got["max_body_bytes"] == 32 * 2**20
    for bad in ("0", "-1", "inf", "nan"):
        with pytest.raises(SystemExit) as exit_:
            main(["serve", "--max-body-mb", bad])
        assert exit_.value.code == 2
        assert "--max-body-mb" in capsys.readouterr().err
