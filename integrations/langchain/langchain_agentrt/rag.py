"""Retrieval for LangChain RAG chains: agentrt's embeddings and vector index as LangChain parts.

>>> from agentrt_tools.rag import default_index
>>> from langchain_agentrt.rag import AgentRTEmbeddings, VectorIndexRetriever
>>> retriever = VectorIndexRetriever(index=default_index(200), k=3)
>>> retriever.invoke("how do I parse JSON?")       # list[Document], best first
>>> AgentRTEmbeddings().embed_query("hello")       # 384 floats, unit norm

``AgentRTEmbeddings`` is all-MiniLM-L6-v2 (:class:`agentrt_tools.rag.Embedder`, offline, CPU);
it also fits LangChain's own vector stores (``InMemoryVectorStore(AgentRTEmbeddings())``).
Importing this module loads neither the model nor faiss; both load on first use.
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from pydantic import BaseModel, ConfigDict, Field

from agentrt_tools.rag.embeddings import Embedder
from agentrt_tools.rag.index import Hit, VectorIndex

__all__ = ["AgentRTEmbeddings", "VectorIndexRetriever"]


class AgentRTEmbeddings(BaseModel, Embeddings):
    """LangChain ``Embeddings`` on all-MiniLM-L6-v2: 384 floats per text, unit norm, so a dot
    product is a cosine similarity. Runs offline on CPU; async methods run in a worker thread.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, protected_namespaces=())

    batch_size: int = Field(default=32, ge=1)
    """Texts per forward pass in :meth:`embed_documents`."""
    embedder: Embedder | None = Field(default=None, exclude=True)
    """The :class:`~agentrt_tools.rag.Embedder` to use; None = the process-wide shared one,
    loaded on the first call."""

    def _get_embedder(self) -> Embedder:
        if self.embedder is None:
            self.embedder = Embedder.load()
        return self.embedder

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """One embedding per text, in order."""
        return self._get_embedder().embed(texts, batch_size=self.batch_size).tolist()

    def embed_query(self, text: str) -> list[float]:
        """The embedding of one query text."""
        return self._get_embedder().embed_query(text).tolist()

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        """:meth:`embed_documents` in a worker thread."""
        vectors = await self._get_embedder().aembed(texts, batch_size=self.batch_size)
        return vectors.tolist()

    async def aembed_query(self, text: str) -> list[float]:
        """:meth:`embed_query` in a worker thread."""
        return (await self._get_embedder().aembed_query(text)).tolist()


class VectorIndexRetriever(BaseRetriever):
    """A LangChain retriever over an :class:`agentrt_tools.rag.VectorIndex`.

    Returns the ``k`` nearest texts as ``Document`` s, best first; each document's metadata is
    the row's own metadata plus ``"index"`` (its row) and ``"score"`` (cosine similarity).
    """

    index: VectorIndex
    """The index to search; queries are embedded with its embedder."""
    k: int = Field(default=4, ge=1)
    """How many documents to return."""

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return [_document(hit) for hit in self.index.search_text(query, self.k)]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        return [_document(hit) for hit in await self.index.asearch_text(query, self.k)]


def _document(hit: Hit) -> Document:
    metadata: dict[str, Any] = {**hit.metadata, "index": hit.index, "score": hit.score}
    return Document(page_content=hit.text, metadata=metadata)
