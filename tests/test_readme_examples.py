"""Every Python block of the README runs as written, in order, in one namespace, on the default
model: a README example cannot go stale without failing here.

Two substitutions keep it fast and local: ``Engine()`` with no arguments is the session's
engine (the same model the README loads), and the server example talks to an ``agentrt serve``
started for it on a free loopback port instead of 8000.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_PORT_URL = "http://127.0.0.1:8000/v1"


def _python_blocks() -> list[tuple[str, str]]:
    """(the heading above it, the code) of each ```python block, in README order."""
    text = (ROOT / "README.md").read_text()
    blocks, heading = [], ""
    for match in re.finditer(r"^(#+ [^\n]*)$|^```python\n(.*?)^```$", text, re.M | re.S):
        if match.group(1):
            heading = match.group(1).lstrip("# ")
        else:
            blocks.append((heading, match.group(2)))
    return blocks


BLOCKS = _python_blocks()


@pytest.fixture(scope="module")
def namespace(engine):
    """One namespace for all blocks (later ones use names earlier ones define)."""
    import agentrt

    real = agentrt.Engine

    def engine_or_new(*args, **kwargs):
        return engine if not args and not kwargs else real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(agentrt, "Engine", engine_or_new)
        yield {"__name__": "readme"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    sys.path.insert(0, str(ROOT / "tests" / "server"))
    from serve_harness import start_server

    with start_server(tmp_path_factory.mktemp("readme") / "serve.log") as server:
        yield server


def test_the_readme_has_an_example_per_integration():
    code = "\n".join(block for _, block in BLOCKS)
    for needed in ("ChatAgentRT", "agentrt.Executor", "llama_index.llms.agentrt",
                   "OpenAI(base_url", "compile(chain)", "semantic_function"):
        assert needed in code, needed


@pytest.mark.parametrize("heading,code", BLOCKS, ids=[f"{i}-{h[:30]}" for i, (h, _) in
                                                       enumerate(BLOCKS)])
def test_readme_block_runs(heading, code, namespace, request, engine):
    """... and leaves no request paused: an example that kept a request's KV for good would
    teach a leak (and hold the session engine's blocks for every later test)."""
    if README_PORT_URL in code:
        server = request.getfixturevalue("server")
        code = code.replace(README_PORT_URL, server.base_url)
    paused = engine.load().num_paused
    exec(compile(code, f"README.md ({heading})", "exec"), namespace)  # noqa: S102
    assert engine.load().num_paused == paused
