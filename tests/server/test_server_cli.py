"""``agentrt serve --help`` helps, and ``import agentrt`` never imports the server's deps."""

from __future__ import annotations

import subprocess
import sys

from agentrt.cli import build_parser


def test_serve_help_lists_flags_and_an_example():
    sub = build_parser()._subparsers._group_actions[0].choices["serve"]
    text = sub.format_help()
    for flag in ("--host", "--port", "--model", "--max-batch", "--dtype",
                 "--served-model-name", "--kv-cache-gb"):
        assert flag in text
    assert "examples:" in text and "/v1/chat/completions" in text and "base_url" in text


def test_import_agentrt_does_not_import_the_server():
    code = ("import sys, agentrt, agentrt.cli, agentrt.chat; "
            "bad = {'fastapi', 'uvicorn', 'starlette', 'prometheus_client'} & set(sys.modules); "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
