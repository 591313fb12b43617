"""LCEL lowering: each construct's graph, and lowered execution equal to LangChain's own
``invoke`` of the same chain (greedy, the real model, a real embedding model and index)."""

from __future__ import annotations

import pytest
from langchain_core.output_parsers import CommaSeparatedListOutputParser, StrOutputParser
from langchain_core.prompts import ChatPromptTemplate, PromptTemplate
from langchain_core.runnables import (
    Runnable,
    RunnableBranch,
    RunnableLambda,
    RunnableParallel,
    RunnablePassthrough,
)
from langchain_core.runnables.passthrough import RunnablePick

from agentrt.graph import Kind, compile, lower
from langchain_agentrt import ChatAgentRT

SYSTEM = ("You are a careful assistant for questions about the Python standard library. "
          "Answer in one short sentence, using the context when it helps.")


@pytest.fixture(scope="module")
def llm(engine):
    return ChatAgentRT(engine=engine, max_tokens=12)


@pytest.fixture(scope="module")
def retriever():
    from agentrt_tools.rag import default_index
    from langchain_agentrt.rag import VectorIndexRetriever

    return VectorIndexRetriever(index=default_index(200), k=2)


def kinds(graph) -> list[str]:
    return [n.kind.value for n in graph.topological()]


def same_result(chain: Runnable, value) -> object:
    """Run ``chain`` with LangChain and lowered; assert equal results; return the result."""
    expected = chain.invoke(value)
    assert compile(chain).invoke(value) == expected
    return expected


def assert_kv_released(engine):
    load = engine.load()
    assert load.num_free_blocks + load.num_evictable_blocks == load.num_total_blocks


def qa_prompt():
    return ChatPromptTemplate.from_messages(
        [("system", SYSTEM), ("user", "Question: {question}\nContext: {context}")])


def format_docs(docs) -> str:
    return "\n".join(d.page_content[:300] for d in docs)


# --- equal to LangChain, real model --------------------------------------------------------------
def test_rag_chain(llm, retriever, engine):
    chain = ({"context": retriever | format_docs, "question": RunnablePassthrough()}
             | qa_prompt() | llm | StrOutputParser())
    fast = compile(chain)
    assert {"Embedding", "Searching", "PartialPrefilling", "FullPrefilling", "Decoding"} \
        <= set(kinds(fast.graph))
    question = "How do I parse a JSON document?"
    expected = chain.invoke(question)
    assert fast.invoke(question) == expected and expected
    # the instruction and the question were prefilled early; the call continued that KV
    (session,) = fast.runtime.last_store["sessions"]
    assert session.stats.num_calls == 2 and session.stats.num_reused_tokens >= 16
    assert_kv_released(engine)


def test_map_reduce_summarisation(llm, engine):
    text = ("The json module encodes and decodes JSON. The csv module reads and writes "
            "comma separated files. The sqlite3 module talks to SQLite databases.")
    split = RunnableLambda(lambda t: [s.strip() + "." for s in t.split(".") if s.strip()])
    summarise = (PromptTemplate.from_template("Summarise in five words: {chunk}")
                 | llm | StrOutputParser())
    mapper = RunnableLambda(lambda chunk: {"chunk": chunk}) | summarise
    reduce_ = (PromptTemplate.from_template("Combine these notes into one sentence:\n{notes}")
               | llm | StrOutputParser())
    chain = split | mapper.map() | RunnableLambda(lambda xs: {"notes": "\n".join(xs)}) | reduce_
    (mapped,) = [n for n in compile(chain).graph if "subgraph" in n.attrs]
    assert mapped.kind is Kind.DECODING  # the map's items are LLM calls, lowered per item
    assert kinds(mapped.attrs["subgraph"]) == ["Input", "Transform", "Prefilling", "Decoding",
                                               "Transform"]
    assert same_result(chain, text)
    assert_kv_released(engine)


def test_branch(llm):
    geo = ChatPromptTemplate.from_messages([("user", "Name the capital of {country}.")]) | llm
    other = ChatPromptTemplate.from_messages([("user", "Say hello to {country}.")]) | llm
    chain = RunnableBranch((lambda x: x["country"] != "nowhere", geo), other) \
        | StrOutputParser()
    graph = compile(chain).graph
    assert kinds(graph).count("Condition") == 1 and kinds(graph).count("Decoding") == 2
    assert same_result(chain, {"country": "France"}) != same_result(chain, {"country": "nowhere"})


def test_fallback_runs_when_the_primary_fails(llm):
    prompt = ChatPromptTemplate.from_messages([("user", "What is 2 plus 2?")])
    broken = prompt | llm.bind(no_such_option=1) | StrOutputParser()  # raises ValueError
    chain = broken.with_fallbacks([prompt | llm | StrOutputParser()])
    assert same_result(chain, {})
    plain = (prompt | llm | StrOutputParser()).with_fallbacks([broken])
    assert same_result(plain, {}) == same_result(chain, {})


def test_fallback_leaves_unhandled_errors_alone(llm):
    prompt = ChatPromptTemplate.from_messages([("user", "Hi")])
    broken = prompt | llm.bind(no_such_option=1)
    chain = broken.with_fallbacks([prompt | llm], exceptions_to_handle=(KeyError,))
    with pytest.raises(ValueError, match="no_such_option"):
        chain.invoke({})
    with pytest.raises(ValueError, match="no_such_option"):
        compile(chain).invoke({})


def test_parallel_assign_pick_and_binding(llm):
    ask = ChatPromptTemplate.from_messages([("user", "{question}")])
    chain = (RunnablePassthrough.assign(
        short=ask | llm.bind(stop=["."]) | StrOutputParser(),
        both=RunnableParallel(a=ask | llm | StrOutputParser(),
                              b=RunnableLambda(lambda x: x["question"].upper())))
        | RunnablePick(["short", "both"]))
    assert kinds(compile(chain).graph).count("Decoding") == 2
    out = same_result(chain, {"question": "Why is the sky blue?"})
    assert "." not in out["short"] and out["both"]["b"] == "WHY IS THE SKY BLUE?"


def test_query_expansion_pipelines_each_query_into_search(llm, retriever):
    expand = (ChatPromptTemplate.from_messages(
        [("user", "Write three short search queries about {topic}, separated by commas.")])
        | llm.bind(max_tokens=24) | CommaSeparatedListOutputParser())
    chain = expand | retriever.map()
    graph = compile(chain).graph
    assert kinds(graph).count("PartialDecoding") == 3 and kinds(graph).count("Searching") == 4
    docs = same_result(chain, {"topic": "reading files"})
    assert len(docs) >= 1 and all(len(d) == 2 for d in docs)


class Shout(Runnable):
    """A runnable agentrt has no rule for."""

    def invoke(self, value, config=None, **kwargs):
        return str(value).upper() + "!"


def test_unknown_runnable_lowers_to_an_opaque_node_and_runs(llm):
    chain = ChatPromptTemplate.from_messages([("user", "Say hi to {name}.")]) | llm \
        | StrOutputParser() | Shout()
    graph = compile(chain).graph
    assert graph.output.kind is Kind.OPAQUE and graph.output.name == "Shout"
    assert same_result(chain, {"name": "Ada"}).endswith("!")


# --- structure of each construct (no model call) -------------------------------------------------
def test_each_construct_lowers_to_its_primitives(llm, retriever):
    ask = ChatPromptTemplate.from_messages([("user", "{q}")])
    cases = {
        "sequence": (ask | llm, ["Input", "Prefilling", "Decoding"]),
        "lambda": (RunnableLambda(len), ["Input", "Transform"]),
        "parallel": (RunnableParallel(a=RunnableLambda(len)), ["Input", "Transform", "Aggregate"]),
        "pick": (RunnablePick("q"), ["Input", "Transform"]),
        "passthrough": (RunnablePassthrough(), ["Input"]),
        "binding": (ask | llm.bind(stop=["x"]), ["Input", "Prefilling", "Decoding"]),
        "config binding": (RunnableLambda(len).with_config(run_name="n"), ["Input", "Transform"]),
        "retriever": (retriever, ["Input", "Embedding", "Searching"]),
        "parser": (ask | llm | StrOutputParser(), ["Input", "Prefilling", "Decoding", "Transform"]),
        "prompt alone": (ask, ["Input", "Transform"]),
        "opaque": (Shout(), ["Input", "Opaque"]),
    }
    for name, (runnable, expected) in cases.items():
        assert kinds(lower(runnable)) == expected, name
    assign = lower(RunnablePassthrough.assign(n=RunnableLambda(len)))
    assert kinds(assign) == ["Input", "Transform", "Aggregate"]
    assert set(assign.output.inputs) == {"__input__", "n"}
    branch = lower(RunnableBranch((lambda x: x, RunnableLambda(len)), RunnableLambda(str)))
    assert kinds(branch).count("Condition") == 1 and branch.output.attrs["select"]
    fallback = lower(RunnableLambda(len).with_fallbacks([RunnableLambda(str)]))
    gate = next(n for n in fallback if n.kind is Kind.CONDITION)
    assert gate.attrs["catch"] and fallback.output.attrs["select"]


def test_the_lowered_index_search_runs_off_the_event_loop(retriever, monkeypatch):
    """faiss blocks: the Searching node runs it in a worker thread, as the retriever's own
    ``ainvoke`` does, so the loop keeps serving the graph's other nodes meanwhile."""
    import threading

    index = retriever.index
    threads: list[threading.Thread] = []
    search = index.search

    def recording(*args, **kwargs):
        threads.append(threading.current_thread())
        return search(*args, **kwargs)

    monkeypatch.setattr(index, "search", recording)
    fast = compile(retriever)
    got = fast.invoke("How do I parse JSON?")
    assert [d.page_content for d in got] == [
        d.page_content for d in retriever.invoke("How do I parse JSON?")]
    assert threads and threads[0] is not threading.main_thread()
