"""VectorIndex over faiss, the chunked stdlib corpus, and the on-disk embedding cache."""

from __future__ import annotations

import sys
import time

import numpy as np
import pytest

from agentrt_tools.rag import (
    Hit,
    VectorIndex,
    cached_embeddings,
    chunk_corpus,
    chunk_docs,
    chunk_text,
    default_index,
)

# ---------------------------------------------------------------- chunking (no model needed)


def test_chunk_text_packs_paragraphs_up_to_max_chars():
    text = "alpha beta\n\ngamma delta\n\n\n  \nepsilon " + "z" * 30
    assert chunk_text(text, max_chars=30) == ["alpha beta\n\ngamma delta", "epsilon", "z" * 30]
    assert chunk_text(text, max_chars=1000) == ["alpha beta\n\ngamma delta\n\nepsilon " + "z" * 30]


def test_chunk_text_cuts_long_paragraphs_at_lines_then_words_then_characters():
    paragraph = "line one is here\nline two is here too and more\n" + "w" * 25
    chunks = chunk_text(paragraph, max_chars=20)
    assert chunks == ["line one is here", "line two is here too", "and more", "w" * 20, "w" * 5]
    assert all(len(c) <= 20 for c in chunks)
    with pytest.raises(ValueError):
        chunk_text("x", max_chars=0)


def test_corpus_chunks_are_bounded_unique_deterministic_and_from_the_stdlib(chunks):
    assert len(chunks) > 300
    assert all(0 < len(c) <= 600 for c in chunks)
    assert len(set(chunks)) == len(chunks)
    assert chunk_corpus() == chunks  # same order every time
    docs = chunk_docs()
    assert [d.text for d in docs] == chunks
    assert any(d.source.startswith("python stdlib: json #") for d in docs)
    assert all(len(c) <= 300 for c in chunk_corpus(max_chars=300))


# ---------------------------------------------------------------- the index


def test_every_chunk_retrieves_itself_first_by_vector(corpus_index):
    vectors = corpus_index.vectors()
    assert vectors.shape == (200, 384) and len(corpus_index) == 200
    hits = corpus_index.search(vectors, k=3)
    assert [h[0].index for h in hits] == list(range(200))
    for row in hits:
        assert row[0].score == pytest.approx(1.0, abs=1e-4)
        assert row[0].score >= row[1].score >= row[2].score


def test_a_chunks_own_text_retrieves_that_chunk_first(corpus_index):
    texts = corpus_index.texts
    for i in (0, 57, 123, 199):
        top = corpus_index.search_text(texts[i], k=2)[0]
        assert isinstance(top, Hit)
        assert top.index == i and top.text == texts[i]
        assert top.metadata["source"].startswith("python stdlib: ")
        assert top.score == pytest.approx(1.0, abs=1e-4)


@pytest.mark.parametrize(("query", "module"), [
    ("a priority queue implemented with a binary heap", "heapq"),
    ("prompt the user for a password without echoing it", "getpass"),
    ("IPv4 and IPv6 addresses and networks", "ipaddress"),
    ("exact arithmetic on rational numbers", "fractions"),
    ("generate cryptographically strong random tokens", "secrets"),
])
def test_natural_language_queries_find_the_right_module(corpus_index, query, module):
    sources = [h.metadata["source"] for h in corpus_index.search_text(query, k=5)]
    assert sources[0].startswith(f"python stdlib: {module} #"), sources


def test_batched_search_equals_single_searches(corpus_index, embedder):
    queries = embedder.embed(["compress files", "parse dates", "debugger"])
    batched = corpus_index.search(queries, k=5)
    assert len(batched) == 3 and all(len(row) == 5 for row in batched)
    for row, vector in zip(batched, queries, strict=True):
        assert row == corpus_index.search(vector, k=5)
        assert row == corpus_index.search(vector.tolist(), k=5)


async def test_async_search_matches_sync(corpus_index):
    assert await corpus_index.asearch_text("zip archives", k=3) == corpus_index.search_text(
        "zip archives", k=3)


def test_add_embeds_texts_and_keeps_metadata(embedder):
    index = VectorIndex(embedder=embedder)
    assert len(index) == 0 and index.search(np.ones(384, dtype=np.float32), k=3) == []
    rows = index.add(["The cat sat on the mat.", "Stocks fell sharply today."],
                     metadatas=[{"id": "cat"}, {"id": "stocks"}])
    assert rows == [0, 1]
    assert index.add(["A kitten naps on a rug."], metadatas=[{"id": "kitten"}]) == [2]
    hits = index.search_text("a small cat sleeping", k=10)
    assert len(hits) == 3  # k is capped by the index size
    assert {hits[0].metadata["id"], hits[1].metadata["id"]} == {"cat", "kitten"}
    assert hits[2].metadata["id"] == "stocks"


def test_add_checks_its_arguments(embedder):
    index = VectorIndex(embedder=embedder)
    with pytest.raises(ValueError, match="metadatas"):
        index.add(["a", "b"], vectors=np.zeros((2, 384)), metadatas=[{}])
    with pytest.raises(ValueError, match="vectors"):
        index.add(["a", "b"], vectors=np.zeros((3, 384)))
    with pytest.raises(ValueError, match="shape"):
        index.add(["a"], vectors=np.zeros((1, 10)))
    with pytest.raises(TypeError):
        index.add("one string")
    assert len(index) == 0


def test_from_texts_with_precomputed_vectors_never_loads_a_model(corpus_index):
    index = VectorIndex.from_texts(corpus_index.texts[:50], corpus_index.vectors()[:50])
    assert index._embedder is None  # searched by vector only
    assert index.search(corpus_index.vectors()[7], k=1)[0].index == 7
    assert index._embedder is None


def test_missing_faiss_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "faiss", None)
    with pytest.raises(ModuleNotFoundError, match="pip install faiss-cpu"):
        VectorIndex()


# ---------------------------------------------------------------- the embedding cache


def test_cached_embeddings_round_trip_returns_identical_vectors(
        embedder, chunks, tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTRT_CACHE", str(tmp_path))
    texts = chunks[300:312]
    first = cached_embeddings(texts, embedder)
    files = list((tmp_path / "rag" / "embeddings").glob("*.npy"))
    assert len(files) == 1
    np.testing.assert_allclose(first, embedder.embed(texts), atol=1e-5)
    changed = cached_embeddings(texts[:-1] + ["changed"], embedder)  # another key: a miss
    assert changed.shape == (12, 384) and not np.array_equal(changed, first)
    assert len(list((tmp_path / "rag" / "embeddings").glob("*.npy"))) == 2

    def no_model(*args, **kwargs):
        raise AssertionError("the model ran on a cache hit")

    monkeypatch.setattr(embedder, "embed", no_model)
    second = cached_embeddings(texts, embedder)
    assert second.dtype == np.float32 and np.array_equal(first, second)
    assert np.array_equal(cached_embeddings(texts), first)  # same key without an embedder


def test_default_index_second_call_loads_from_the_cache_quickly(corpus_index, rag_cache,
                                                                  monkeypatch):
    monkeypatch.setenv("AGENTRT_CACHE", str(rag_cache))
    start = time.perf_counter()
    again = default_index(200)
    elapsed = time.perf_counter() - start
    assert elapsed < 0.5
    assert again.texts == corpus_index.texts and again.metadatas == corpus_index.metadatas
    assert np.array_equal(again.vectors(), corpus_index.vectors())
    assert again._embedder is None  # the model is not loaded until a text query needs it
