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

    Texts past 256 word pieces are truncated, as sentence-transformers does; an empty text
    embeds too. Copies (``copy.deepcopy``, ``model_copy``) share the embedder; a pickle loads
    the shared model in the process that unpickles it. An unknown option is an error.
    """

    # NOTE: extra="forbid": a misspelt option (``batch_sze=``) is an error, not ignored
    model_config = ConfigDict(arbitrary_types_allowed=True, protected_namespaces=(),
                              extra="forbid")

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

    Returns the ``k`` nearest texts as ``Document`` s, best first (fewer when the index holds
    fewer); each document's metadata is the row's own metadata plus ``"index"`` (its row) and
    ``"score"`` (cosine similarity, in ``[-1, 1]``). A row whose own metadata has either key
    is an error at retrieval, never silently overwritten.

    ``k`` can be given per call, as with LangChain's ``VectorStoreRetriever``:
    ``retriever.invoke(query, k=2)``; any other search option is a ``TypeError``, and so is an
    unknown field (``search_kwargs=``): this retriever has no filters or search types.
    """

    # NOTE: extra="forbid": VectorStoreRetriever's search_kwargs= would be silently ignored
    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    index: VectorIndex
    """The index to search; queries are embedded with its embedder."""
    k: int = Field(default=4, ge=1)
    """How many documents to return (a call's own ``k=`` wins)."""

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        k = self._call_k(kwargs)
        return [_document(hit) for hit in self.index.search_text(query, k)]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        k = self._call_k(kwargs)
        return [_document(hit) for hit in await self.index.asearch_text(query, k)]

    def _call_k(self, kwargs: dict[str, Any]) -> int:
        """The ``k`` of one call: its own ``k=``, else the field's."""
        kwargs.pop("verbose", None)  # NOTE: LangChain passes its callback option on as well
        k = kwargs.pop("k", self.k)
        if kwargs:
            raise TypeError(f"VectorIndexRetriever takes only k= per call, not {sorted(kwargs)}")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be a positive int, got {k!r}")
        return k


_RESERVED_KEYS = ("index", "score")


def _document(hit: Hit) -> Document:
    """``hit`` as a Document: its metadata plus ``"index"`` and ``"score"``."""
    clash = [key for key in _RESERVED_KEYS if key in hit.metadata]
    if clash:
        raise ValueError(
            f"row {hit.index}'s metadata has {clash[0]!r}, which VectorIndexRetriever sets (the "
            "row and the cosine score): rename that key in the index's metadata")
    metadata: dict[str, Any] = {**hit.metadata, "index": hit.index, "score": hit.score}
    return Document(page_content=hit.text, metadata=metadata)
