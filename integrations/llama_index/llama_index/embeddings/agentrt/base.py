"""Retrieval for LlamaIndex: agentrt's all-MiniLM-L6-v2 embeddings and a faiss-backed index.

>>> from agentrt_tools.rag import chunk_corpus
>>> from llama_index.embeddings.agentrt import AgentRTEmbedding, faiss_vector_store_index
>>> index = faiss_vector_store_index(chunk_corpus()[:200])
>>> index.as_retriever(similarity_top_k=3).retrieve("how do I parse JSON?")

``AgentRTEmbedding`` is a LlamaIndex ``BaseEmbedding`` over :class:`agentrt_tools.rag.Embedder`
(offline, CPU, 384-d unit vectors). :func:`faiss_vector_store_index` stores the vectors in
LlamaIndex's own ``FaissVectorStore`` (``llama-index-vector-stores-faiss``) over a faiss
``IndexFlatIP``, so similarities are cosines. Importing this module loads neither the model nor
faiss.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr

from agentrt_tools.rag.embeddings import _DIM, MODEL_NAME, Embedder
from agentrt_tools.rag.index import import_faiss

if TYPE_CHECKING:
    from llama_index.core import VectorStoreIndex

__all__ = ["AgentRTEmbedding", "faiss_vector_store_index"]

FAISS_STORE_INSTALL_HINT = "pip install llama-index-vector-stores-faiss"


class AgentRTEmbedding(BaseEmbedding):
    """LlamaIndex embeddings on all-MiniLM-L6-v2 (384 floats, unit norm), offline on CPU.

    >>> Settings.embed_model = AgentRTEmbedding()

    Pass ``embedder=`` to use a given :class:`~agentrt_tools.rag.Embedder`; by default the
    process-wide shared one is loaded at the first call. Async methods run in a worker thread.
    Copies (``copy.deepcopy``) share the embedder; a pickle keeps it (the shared model loads as
    the unpickling process's shared model). Texts past 256 word pieces are truncated, as
    sentence-transformers does.
    """

    # NOTE: extra="forbid": a misspelt option (``embed_batch_sze=``) is an error, not ignored
    model_config = ConfigDict(extra="forbid")

    model_name: str = Field(
        default=MODEL_NAME, description="The embedding model: the bundled all-MiniLM-L6-v2, or "
                                        "the given embedder's (another name is an error).")
    embed_batch_size: int = Field(default=32, gt=0, le=2048,
                                  description="Texts per forward pass.")
    _embedder: Embedder | None = PrivateAttr(default=None)

    def __init__(self, embedder: Embedder | None = None, **kwargs: Any) -> None:
        name = MODEL_NAME if embedder is None else embedder.name
        asked = kwargs.setdefault("model_name", name)
        if asked != name:
            raise ValueError(f"AgentRTEmbedding runs {name!r}, not model_name={asked!r}; pass "
                             "embedder= (an agentrt_tools.rag.Embedder) to run another model")
        super().__init__(**kwargs)
        self._embedder = embedder

    @classmethod
    def class_name(cls) -> str:
        return "AgentRTEmbedding"

    def __getstate__(self) -> dict[Any, Any]:
        # NOTE: LlamaIndex's __getstate__ deletes what does not pickle (a custom embedder's
        # parts may not) from the state it gets, which pydantic shares with the model: give it
        # a copy's
        return super(AgentRTEmbedding, self.model_copy()).__getstate__()

    def __setstate__(self, state: dict[Any, Any]) -> None:
        # NOTE: LlamaIndex's __setstate__ re-runs __init__ on the fields only, which would drop
        # the embedder= given (the shared model would run instead)
        super().__setstate__(state)
        private = state.get("__pydantic_private__") or {}
        self._embedder = private.get("_embedder", self._embedder)

    @property
    def embedder(self) -> Embedder:
        """The :class:`~agentrt_tools.rag.Embedder` in use (loaded now if needed)."""
        if self._embedder is None:
            self._embedder = Embedder.load()
        return self._embedder

    def _get_query_embedding(self, query: str) -> list[float]:
        return self.embedder.embed_query(query).tolist()

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return (await self.embedder.aembed_query(query)).tolist()

    def _get_text_embedding(self, text: str) -> list[float]:
        return self.embedder.embed_query(text).tolist()

    async def _aget_text_embedding(self, text: str) -> list[float]:
        return (await self.embedder.aembed_query(text)).tolist()

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self.embedder.embed(texts, batch_size=self.embed_batch_size).tolist()

    async def _aget_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        vectors = await self.embedder.aembed(texts, batch_size=self.embed_batch_size)
        return vectors.tolist()


def faiss_vector_store_index(
    texts: Sequence[str],
    *,
    metadatas: Sequence[Mapping[str, Any]] | None = None,
    vectors: np.ndarray | Sequence[Sequence[float]] | None = None,
    embed_model: BaseEmbedding | None = None,
    show_progress: bool = False,
) -> VectorStoreIndex:
    """A LlamaIndex ``VectorStoreIndex`` of ``texts`` in a ``FaissVectorStore`` (cosine search).

    Args:
        texts: one ``TextNode`` is made per text (node text in the index's docstore, vector in
            faiss).
        metadatas: one mapping per text, set as the node's metadata.
        vectors: precomputed unit-norm embeddings, shape ``(len(texts), dim)``, an array or
            lists of floats (e.g. from :func:`agentrt_tools.rag.cached_embeddings`), as wide
            as ``embed_model``'s; None: embedded with ``embed_model``.
        embed_model: embeds texts and, later, the retriever's queries; default
            :class:`AgentRTEmbedding`.
        show_progress: show LlamaIndex's progress bars while embedding.

    Raises:
        ModuleNotFoundError: ``llama-index-vector-stores-faiss`` or ``faiss-cpu`` is missing
            (the message names the ``pip install``).
        ValueError: ``metadatas`` or ``vectors`` do not match ``texts``, or the vectors are not
            as wide as ``embed_model``'s (queries would fail in faiss).
    """
    from llama_index.core import StorageContext, VectorStoreIndex
    from llama_index.core.schema import TextNode

    try:
        from llama_index.vector_stores.faiss import FaissVectorStore
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            "faiss_vector_store_index needs LlamaIndex's faiss vector store: "
            f"`{FAISS_STORE_INSTALL_HINT}` (or `pip install 'llama-index-llms-agentrt[rag]'`)",
            name=exc.name,
        ) from exc
    faiss = import_faiss()

    texts = list(texts)
    metas = [dict(m) for m in metadatas] if metadatas is not None else [{} for _ in texts]
    if len(metas) != len(texts):
        raise ValueError(f"{len(texts)} texts but {len(metas)} metadatas")
    embed_model = embed_model if embed_model is not None else AgentRTEmbedding()
    dim = _embed_dim(embed_model)
    matrix = None if vectors is None else _check_vectors(vectors, len(texts), dim)
    nodes = [
        TextNode(
            text=text, metadata=meta,
            embedding=None if matrix is None else [float(x) for x in matrix[i]],
        )
        for i, (text, meta) in enumerate(zip(texts, metas, strict=True))
    ]
    store = FaissVectorStore(faiss_index=faiss.IndexFlatIP(dim))
    return VectorStoreIndex(
        nodes,
        storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=embed_model,
        show_progress=show_progress,
    )


def _embed_dim(embed_model: BaseEmbedding) -> int:
    """The width of ``embed_model``'s vectors (one probe embedding for a model not ours).
    The bundled model is not loaded for it: an index of precomputed vectors loads it later."""
    if isinstance(embed_model, AgentRTEmbedding):
        given = embed_model._embedder
        return _DIM if given is None else given.dim
    return len(embed_model.get_text_embedding("dimension probe"))


def _check_vectors(vectors: Any, num_texts: int, dim: int) -> np.ndarray:
    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.ndim != 2 or len(matrix) != num_texts:
        raise ValueError(f"{num_texts} texts but vectors of shape {matrix.shape}")
    if matrix.shape[1] != dim:
        raise ValueError(f"the vectors are {matrix.shape[1]} wide but the embed model's "
                         f"{dim}: queries could not be searched")
    return matrix
