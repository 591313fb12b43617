"""``agentrt serve --help`` helps, and ``import agentrt`` never imports the server's deps."""

from __future__ import annotations

import subprocess
import sys

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
    assert done.returncode == 2 and "on http://" not in done.stdout
    assert "the sglang backend at http://127.0.0.1:9 did not answer" in done.stderr


def test_import_agentrt_does_not_import_the_server():
    code = ("import sys, agentrt, agentrt.cli, agentrt.chat; "
            "bad = {'fastapi', 'uvicorn', 'starlette', 'prometheus_client'} & set(sys.modules); "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
