"""compile() on both backends (``backend``: the local engine, the SGLang client of a real
``agentrt serve``): a RAG chain and a map-reduce chain give LangChain's own greedy answer on
the local engine, and the partial prefill's session says what the backend prefilled."""

from __future__ import annotations

import pytest
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate, PromptTemplate
from langchain_core.runnables import RunnableLambda, RunnablePassthrough

from agentrt.graph import compile
from langchain_agentrt import ChatAgentRT

SYSTEM = ("You are a careful assistant for questions about the Python standard library. "
          "Answer in one short sentence, using the context when it helps.")


@pytest.fixture(scope="module")
def retriever():
    from agentrt_tools.rag import default_index
    from langchain_agentrt.rag import VectorIndexRetriever

    return VectorIndexRetriever(index=default_index(200), k=2)


def rag_chain(llm, retriever):
    prompt = ChatPromptTemplate.from_messages(
        [("system", SYSTEM), ("user", "Question: {question}\nContext: {context}")])
    docs = RunnableLambda(lambda ds: "\n".join(d.page_content[:300] for d in ds))
    return ({"context": retriever | docs, "question": RunnablePassthrough()}
            | prompt | llm | StrOutputParser())


def map_reduce_chain(llm):
    split = RunnableLambda(lambda t: [s.strip() + "." for s in t.split(".") if s.strip()])
    summarise = PromptTemplate.from_template("Summarise in five words: {chunk}") | llm
    mapper = RunnableLambda(lambda chunk: {"chunk": chunk}) | summarise | StrOutputParser()
    reduce_ = (PromptTemplate.from_template("Combine these notes into one sentence:\n{notes}")
               | llm | StrOutputParser())
    return split | mapper.map() | RunnableLambda(lambda xs: {"notes": "\n".join(xs)}) | reduce_


def test_rag_chain_on_the_chat_models_backend(backend, engine, retriever):
    question = "How do I parse a JSON document?"
    expected = rag_chain(ChatAgentRT(engine=engine, max_tokens=10), retriever).invoke(question)
    fast = compile(rag_chain(ChatAgentRT(backend=backend, max_tokens=10), retriever))
    assert fast.invoke(question) == expected and expected

    # the instruction and the question were prefilled early on this backend; the call
    # continued that context and computed only the rest
    (session,) = fast.runtime.last_store["sessions"]
    stats = session.stats
    print(f"\n{backend.name}: {stats}")
    assert stats.backend == backend.name and stats.num_calls == 2
    assert stats.num_reused_tokens >= 16 and stats.num_cached_tokens >= stats.num_reused_tokens
    assert stats.num_prefill_tokens == stats.num_prompt_tokens - stats.num_cached_tokens


GENERATE_OK = "agentrt_requests_total{endpoint=/generate,status=200}"


def test_map_reduce_chain_compiled_onto_a_backend(backend, engine, request):
    text = ("The json module encodes and decodes JSON. The csv module reads and writes "
            "comma separated files.")
    chain = map_reduce_chain(ChatAgentRT(engine=engine, max_tokens=8))
    expected = chain.invoke(text)
    fast = compile(chain, backend=backend)  # the chain's local model moved to `backend`
    server = request.getfixturevalue("sglang_server") if backend.name == "sglang" else None
    before = server.wait_until_idle() if server else {}
    assert fast.invoke(text) == expected and expected
    if server:  # the two map calls and the reduce call were served over SGLang's API
        after = server.wait_until_idle()
        assert after.get(GENERATE_OK, 0) - before.get(GENERATE_OK, 0) == 3
