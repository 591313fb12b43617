"""The LangChain and LlamaIndex adapters of agentrt_tools.rag, on the real model and faiss."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from agentrt_tools.rag import VectorIndex

pytest.importorskip("langchain_core", reason="needs the [langchain] extra")
pytest.importorskip("llama_index.core", reason="needs the [llamaindex] extra")

from langchain_core.documents import Document  # noqa: E402
from langchain_core.vectorstores import InMemoryVectorStore  # noqa: E402
from llama_index.embeddings.agentrt import (  # noqa: E402
    AgentRTEmbedding,
    faiss_vector_store_index,
)

from langchain_agentrt.rag import AgentRTEmbeddings, VectorIndexRetriever  # noqa: E402

QUERY = "a priority queue implemented with a binary heap"

# ---------------------------------------------------------------- LangChain


def test_langchain_embeddings_are_the_embedders(embedder):
    emb = AgentRTEmbeddings(embedder=embedder, batch_size=4)
    texts = ["one text", "another, longer text", "third"]
    documents = emb.embed_documents(texts)
    assert isinstance(documents, list) and all(isinstance(v, list) for v in documents)
    np.testing.assert_allclose(np.array(documents), embedder.embed(texts), atol=1e-6)
    np.testing.assert_allclose(emb.embed_query("one text"), documents[0], atol=1e-6)


async def test_langchain_embeddings_async_twins(embedder):
    emb = AgentRTEmbeddings()  # the shared embedder, loaded on first use
    texts = ["alpha", "beta gamma"]
    np.testing.assert_allclose(await emb.aembed_documents(texts), emb.embed_documents(texts),
                               atol=1e-6)
    np.testing.assert_allclose(await emb.aembed_query("q"), emb.embed_query("q"), atol=1e-6)


def test_langchain_retriever_returns_documents_in_index_order(corpus_index):
    retriever = VectorIndexRetriever(index=corpus_index, k=5)
    docs = retriever.invoke(QUERY)
    hits = corpus_index.search_text(QUERY, k=5)
    assert all(isinstance(d, Document) for d in docs)
    assert [d.page_content for d in docs] == [h.text for h in hits]
    assert [d.metadata["score"] for d in docs] == [h.score for h in hits]
    assert [d.metadata["index"] for d in docs] == [h.index for h in hits]
    assert docs[0].metadata["source"].startswith("python stdlib: heapq #")


async def test_langchain_retriever_async_matches_sync(corpus_index):
    retriever = VectorIndexRetriever(index=corpus_index, k=3)
    assert await retriever.ainvoke(QUERY) == retriever.invoke(QUERY)


def test_langchain_retriever_finds_a_chunk_by_its_own_text(corpus_index):
    text = corpus_index.texts[42]
    top = VectorIndexRetriever(index=corpus_index, k=1).invoke(text)
    assert len(top) == 1 and top[0].page_content == text
    assert top[0].metadata["score"] == pytest.approx(1.0, abs=1e-4)


def test_langchain_embeddings_work_in_a_langchain_vector_store(corpus_index, embedder):
    texts = corpus_index.texts[100:116]
    store = InMemoryVectorStore(AgentRTEmbeddings(embedder=embedder))
    store.add_texts(texts)
    assert store.similarity_search(texts[9], k=1)[0].page_content == texts[9]


try:
    from langchain_tests.integration_tests import EmbeddingsIntegrationTests
except ImportError:  # the [dev] extra is not installed
    EmbeddingsIntegrationTests = None

if EmbeddingsIntegrationTests is not None:

    class TestAgentRTEmbeddingsStandard(EmbeddingsIntegrationTests):
        """LangChain's standard integration suite for embeddings."""

        @property
        def embeddings_class(self) -> type[AgentRTEmbeddings]:
            return AgentRTEmbeddings


# ---------------------------------------------------------------- LlamaIndex


def test_llama_index_embedding_is_the_embedders(embedder):
    emb = AgentRTEmbedding(embedder=embedder, embed_batch_size=4)
    texts = ["one text", "another, longer text", "third", "fourth", "fifth"]
    np.testing.assert_allclose(
        np.array(emb.get_text_embedding_batch(texts)), embedder.embed(texts), atol=1e-6)
    np.testing.assert_allclose(emb.get_query_embedding("q"), embedder.embed_query("q"),
                               atol=1e-6)
    np.testing.assert_allclose(emb.get_text_embedding("third"), embedder.embed_query("third"),
                               atol=1e-6)
    assert AgentRTEmbedding().embed_batch_size == 32
    assert AgentRTEmbedding.class_name() == "AgentRTEmbedding"


async def test_llama_index_embedding_async_twins(embedder):
    emb = AgentRTEmbedding(embedder=embedder)
    texts = ["alpha", "beta gamma"]
    np.testing.assert_allclose(await emb.aget_text_embedding_batch(texts),
                               emb.get_text_embedding_batch(texts), atol=1e-6)
    np.testing.assert_allclose(await emb.aget_query_embedding("q"), emb.get_query_embedding("q"),
                               atol=1e-6)
    np.testing.assert_allclose(await emb.aget_text_embedding("q"), emb.get_query_embedding("q"),
                               atol=1e-6)


def test_llama_index_faiss_index_retrieves_the_expected_chunk(corpus_index, embedder):
    index = faiss_vector_store_index(
        corpus_index.texts, vectors=corpus_index.vectors(), metadatas=corpus_index.metadatas,
        embed_model=AgentRTEmbedding(embedder=embedder),
    )
    retriever = index.as_retriever(similarity_top_k=4)
    own = retriever.retrieve(corpus_index.texts[150])
    assert own[0].node.get_content() == corpus_index.texts[150]
    assert own[0].score == pytest.approx(1.0, abs=1e-4)

    nodes = retriever.retrieve(QUERY)
    hits = corpus_index.search_text(QUERY, k=4)
    assert [n.node.get_content() for n in nodes] == [h.text for h in hits]
    np.testing.assert_allclose([n.score for n in nodes], [h.score for h in hits], atol=1e-5)
    assert nodes[0].node.metadata["source"].startswith("python stdlib: heapq #")


def test_llama_index_faiss_index_embeds_texts_itself(corpus_index, embedder):
    texts = corpus_index.texts[60:70]
    index = faiss_vector_store_index(texts, embed_model=AgentRTEmbedding(embedder=embedder))
    nodes = index.as_retriever(similarity_top_k=2).retrieve(texts[3])
    assert nodes[0].node.get_content() == texts[3]
    with pytest.raises(ValueError, match="metadatas"):
        faiss_vector_store_index(texts, metadatas=[{}], embed_model=AgentRTEmbedding())


def test_missing_llama_index_faiss_store_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_index.vector_stores.faiss", None)
    with pytest.raises(ModuleNotFoundError, match="pip install llama-index-vector-stores-faiss"):
        faiss_vector_store_index(["text"], vectors=np.ones((1, 384), dtype=np.float32))


def test_missing_faiss_is_a_clear_error_for_the_adapters_too(monkeypatch, corpus_index):
    monkeypatch.setitem(sys.modules, "faiss", None)
    with pytest.raises(ModuleNotFoundError, match="pip install faiss-cpu"):
        faiss_vector_store_index(["text"], vectors=np.ones((1, 384), dtype=np.float32))
    with pytest.raises(ModuleNotFoundError, match="pip install faiss-cpu"):
        VectorIndex()
