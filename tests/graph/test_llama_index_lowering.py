"""LlamaIndex ``RetrieverQueryEngine`` lowering: the primitive graph of each synthesis mode,
and the lowered run equal to ``query_engine.query(q)`` (greedy, the real model, a real
embedding model and a faiss index over real corpus chunks)."""

from __future__ import annotations

import inspect

import pytest

pytest.importorskip("llama_index.core", reason="needs the [llamaindex] extra")
pytest.importorskip("llama_index.vector_stores.faiss", reason="needs the [rag] extra")

from llama_index.core.base.base_query_engine import BaseQueryEngine  # noqa: E402
from llama_index.core.base.base_retriever import BaseRetriever  # noqa: E402
from llama_index.core.base.response.schema import Response  # noqa: E402
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode  # noqa: E402

from agentrt.graph import Kind, compile  # noqa: E402

QUESTION = "How do I read command-line arguments?"
TOP_K = 3


@pytest.fixture(scope="module")
def index():
    from llama_index.embeddings.agentrt import faiss_vector_store_index

    from agentrt_tools.rag import chunk_corpus

    return faiss_vector_store_index(chunk_corpus()[:50])


def query_engine(index, engine, mode: str, window: int | None = None):
    """``window``: the LLM's context window as LlamaIndex's PromptHelper sees it (None: the
    engine's); a small one makes the synthesizer pack the chunks into several prompts."""
    from llama_index.llms.agentrt import AgentRT

    llm = AgentRT(engine=engine, max_tokens=16, context_window=window)
    return index.as_query_engine(llm=llm, response_mode=mode, similarity_top_k=TOP_K)


@pytest.fixture
def calls(monkeypatch):
    """LLM calls made by LlamaIndex's sync ``query`` (``chat``) and by the lowered graph
    (``achat``), and query embeddings made on the async path (the graph's)."""
    from llama_index.embeddings.agentrt import AgentRTEmbedding
    from llama_index.llms.agentrt import AgentRT

    counts = {"chat": 0, "achat": 0, "embed": 0}

    def counting(name, fn):
        if inspect.iscoroutinefunction(fn):
            async def awrapper(self, *args, **kwargs):
                counts[name] += 1
                return await fn(self, *args, **kwargs)
            return awrapper

        def wrapper(self, *args, **kwargs):
            counts[name] += 1
            return fn(self, *args, **kwargs)
        return wrapper
    monkeypatch.setattr(AgentRT, "chat", counting("chat", AgentRT.chat))
    monkeypatch.setattr(AgentRT, "achat", counting("achat", AgentRT.achat))
    monkeypatch.setattr(AgentRTEmbedding, "_aget_query_embedding",
                        counting("embed", AgentRTEmbedding._aget_query_embedding))
    return counts


def kinds(graph) -> list[str]:
    return [n.kind.value for n in graph.topological()]


def assert_same_response(got, expected) -> None:
    assert isinstance(got, Response) and got.response
    assert str(got) == str(expected)
    assert [n.node_id for n in got.source_nodes] == [n.node_id for n in expected.source_nodes]
    assert [n.node.get_content() for n in got.source_nodes] == \
        [n.node.get_content() for n in expected.source_nodes]
    assert [n.score for n in got.source_nodes] == \
        pytest.approx([n.score for n in expected.source_nodes], abs=1e-5)
    assert got.metadata == expected.metadata


@pytest.mark.parametrize(("mode", "window", "static", "ran", "llm_calls"), [
    # k chained calls, one per chunk (refine's 500-token response padding needs the window)
    ("refine", None, TOP_K, TOP_K, TOP_K),
    # built for k; the 3 chunks pack into 2 prompts, the third pair is skipped
    ("compact", 800, TOP_K, 2, 2),
    # repacked into 4 prompts: k pairs run, the dynamic "compact[3:]" node makes the 4th call
    ("compact", 700, TOP_K, TOP_K, TOP_K + 1),
    # one call per chunk group (a small window: one chunk per group) + the combining call
    ("tree_summarize", 250, TOP_K + 1, TOP_K + 1, TOP_K + 1),
])
def test_mode_equals_llama_index(index, engine, calls, mode, window, static, ran, llm_calls):
    qe = query_engine(index, engine, mode, window)
    fast = compile(qe)
    graph = fast.graph
    assert kinds(graph)[:4] == ["Input", "Transform", "Embedding", "Searching"]
    decodes = [n for n in graph if n.kind is Kind.DECODING]
    prefills = [n for n in graph if n.kind is Kind.PREFILLING]
    assert len(decodes) == len(prefills) == static
    if mode != "tree_summarize":  # a chain: each prefill reads the previous call's state
        assert [p.inputs["state"] for p in prefills[1:]] == decodes[:-1]

    expected = qe.query(QUESTION)
    got = fast.invoke(QUESTION)
    assert_same_response(got, expected)
    # the graph made the calls LlamaIndex made, one per Decoding node that ran (the rest
    # were skipped) and the surplus in the dynamic node; the query was embedded once
    done = {node_id for node_id, *_ in fast.runtime.last_trace}
    assert sum(d.id in done for d in decodes) == ran
    assert calls["chat"] == calls["achat"] == llm_calls
    assert calls["embed"] == 1


GENERATE_OK = "agentrt_requests_total{endpoint=/generate,status=200}"


def test_compiled_onto_a_backend_equals_llama_index(index, engine, backend, request):
    """Twice (local engine, SGLang client of a real ``agentrt serve``): the synthesis calls
    of a query engine built on the local engine run on ``backend``, with the same answer."""
    qe = query_engine(index, engine, "compact", 800)  # two LLM calls
    expected = qe.query(QUESTION)
    fast = compile(qe, backend=backend)
    server = request.getfixturevalue("sglang_server") if backend.name == "sglang" else None
    before = server.wait_until_idle() if server else {}
    assert_same_response(fast.invoke(QUESTION), expected)
    if server:  # both calls went over SGLang's API
        after = server.wait_until_idle()
        assert after.get(GENERATE_OK, 0) - before.get(GENERATE_OK, 0) == 2


async def test_compiled_query_engine_is_a_query_engine(index, engine):
    """What compile returns goes where the query engine went: ``query``/``aquery`` with
    LlamaIndex's instrumentation events around the run, and a ``QueryEngineTool`` on it."""
    from llama_index.core.instrumentation import get_dispatcher
    from llama_index.core.instrumentation.event_handlers import BaseEventHandler
    from llama_index.core.tools import QueryEngineTool

    class Seen(BaseEventHandler):
        names: list = []

        def handle(self, event, **kwargs):
            self.names.append(event.class_name())

    qe = query_engine(index, engine, "compact", 800)
    expected = qe.query(QUESTION)
    fast = compile(qe)
    assert isinstance(fast, BaseQueryEngine) and fast.graph is fast.compiled.graph
    assert_same_response(fast.query(QUESTION), expected)
    assert_same_response(await fast.aquery(QueryBundle(QUESTION)), expected)
    seen = Seen()
    get_dispatcher().add_event_handler(seen)
    try:
        fast.query(QUESTION)
    finally:
        get_dispatcher().event_handlers.remove(seen)
    assert seen.names[0] == "QueryStartEvent" and seen.names[-1] == "QueryEndEvent"
    tool = QueryEngineTool.from_defaults(fast, name="docs", description="the docs")
    assert tool.call(QUESTION).content == str(expected)


def test_tree_summarize_leaves_run_in_parallel(index, engine):
    graph = compile(query_engine(index, engine, "tree_summarize", 250)).graph
    combine = next(n for n in graph if n.name == "combine prefill")
    leaves = [n for n in graph if n.kind is Kind.DECODING and n.name.startswith("summarize")]
    assert len(leaves) == TOP_K and set(leaves) <= set(combine.parents)
    assert all(leaf.inputs["prefill"].inputs["level"].name == "repack" for leaf in leaves)


def test_unsupported_mode_is_one_opaque_node(index, engine, calls):
    qe = query_engine(index, engine, "simple_summarize")
    fast = compile(qe)
    assert kinds(fast.graph) == ["Input", "Transform", "Embedding", "Searching", "Opaque"]
    (opaque,) = fast.graph.find(Kind.OPAQUE)
    assert opaque.name == "synthesize (SimpleSummarize)" and "not lowered" in opaque.attrs["reason"]
    expected = qe.query(QUESTION)
    assert_same_response(fast.invoke(QueryBundle(QUESTION)), expected)
    assert calls["chat"] == calls["achat"] == 1 and calls["embed"] == 1


# --- retrieval alone and objects that cannot be lowered (no LLM calls) ---------------------------
class Fixed(BaseRetriever):
    """A retriever agentrt knows nothing about."""

    def _retrieve(self, query_bundle):
        return [NodeWithScore(node=TextNode(text=query_bundle.query_str.upper(), id_="x"),
                              score=1.0)]


class Echo(BaseQueryEngine):
    """A query engine that is not a RetrieverQueryEngine."""

    def __init__(self):
        super().__init__(callback_manager=None)

    def _query(self, query_bundle):
        return Response(query_bundle.query_str[::-1])

    async def _aquery(self, query_bundle):
        return self._query(query_bundle)

    def _get_prompt_modules(self):
        return {}


def test_retriever_lowers_to_embedding_and_search(index):
    retriever = index.as_retriever(similarity_top_k=TOP_K)
    fast = compile(retriever)
    assert kinds(fast.graph) == ["Input", "Transform", "Embedding", "Searching"]
    got, expected = fast.invoke(QUESTION), retriever.retrieve(QUESTION)
    assert [n.node_id for n in got] == [n.node_id for n in expected] and len(got) == TOP_K
    assert isinstance(fast, BaseRetriever)  # and retrieves as one
    assert [n.node_id for n in fast.retrieve(QUESTION)] == [n.node_id for n in expected]


def test_custom_parts_run_as_opaque_nodes():
    fast = compile(Fixed())
    assert kinds(fast.graph) == ["Input", "Transform", "Opaque"]
    assert fast.invoke("hello")[0].node.get_content() == "HELLO"
    fast = compile(Echo())
    assert kinds(fast.graph) == ["Input", "Opaque"]
    assert str(fast.invoke("hello")) == str(Echo().query("hello")) == "olleh"
    assert str(fast.query("hello")) == "olleh"
