"""The IR, the passes on Teola's advanced-RAG template, topology-aware batching (Fig. 7), and
the runtime's data flow. Ops here are small Python functions: these tests are about graph
structure and scheduling, not about the model (tests/graph/test_lcel.py runs the model)."""

from __future__ import annotations

import anyio
import pytest

from agentrt.graph import SKIPPED, Failed, Graph, GraphRuntime, ItemStream, Kind, optimize
from agentrt.graph.batching import form_batch, pending_from
from agentrt.graph.passes import _cache
from agentrt.scheduler.jobs import JobView
from agentrt.scheduler.policies import topology_order


def op(fn):
    async def run(args):
        return fn(**args)
    return run


def advanced_rag(num_docs: int = 64, max_batch: int = 16) -> Graph:
    """Teola's advanced RAG as the framework runs it: index the documents, expand the query
    into three, search for each, synthesise — each module after the previous one."""
    g = Graph("advanced-rag")
    docs = g.add(Kind.TRANSFORM, "documents", op(lambda x: x["documents"]), {"x": g.input})
    question = g.add(Kind.TRANSFORM, "question", op(lambda x: x["question"]), {"x": g.input})
    embed = g.add(Kind.EMBEDDING, "embed docs", op(lambda texts: [len(t) for t in texts]),
                  {"texts": docs}, engine="embedding", batchable=True, batch_size=num_docs,
                  max_batch_size=max_batch)
    ingest = g.add(Kind.INGESTION, "ingest",
                   op(lambda vectors, texts: list(zip(texts, vectors, strict=True))),
                   {"vectors": embed, "texts": docs}, engine="vector", batchable=True)
    expand_vars = g.add(Kind.AGGREGATE, "expand vars", op(lambda **kw: kw), {"question": question})
    expand_pf = g.add(Kind.PREFILLING, "expand prefill", op(lambda x: x), {"x": expand_vars},
                      engine="llm")
    expand_pf.after.add(ingest)  # the framework's module order: indexing, then expansion

    words = ["alpha", "beta", "gamma", "delta"]

    async def items(parser, prompt, session):
        for word in words:
            await anyio.sleep(0)
            yield f"{prompt['question']} {word}"

    expand = g.add(Kind.DECODING, "expand",
                   op(lambda prompt: [f"{prompt['question']} {w}" for w in words]),
                   {"prompt": expand_pf},
                   engine="llm", splittable=True, num_items=3, stream_op=items)
    parse = g.add(Kind.TRANSFORM, "parse", op(lambda x: x), {"x": expand}, list_parser=True)
    search = g.add(Kind.SEARCHING, "search", op(lambda x, index: [len(q) for q in x]),
                   {"x": parse, "index": ingest}, engine="vector", batchable=True)

    async def search_one(q):
        return len(q)
    search.attrs["item_op"] = search_one
    context = g.add(Kind.TRANSFORM, "context", op(lambda x: sum(x)), {"x": search})
    synth_vars = g.add(Kind.AGGREGATE, "synth vars", op(lambda **kw: kw),
                       {"question": question, "context": context})

    async def partial(args):
        return f"prefilled:{args['question']}"
    synth_pf = g.add(Kind.PREFILLING, "synth prefill", op(lambda x: x), {"x": synth_vars},
                     engine="llm", partial_op=partial)
    g.output = g.add(Kind.DECODING, "synth",
                     op(lambda prompt, prefill=None: (prompt["context"], prefill)),
                     {"prompt": synth_pf}, engine="llm")
    return g


def test_advanced_rag_passes():
    g = optimize(advanced_rag())
    assert g.applied[:4] == ["prune_dependencies", "decompose_stages", "split_prefill",
                             "pipeline_decoding"]
    # expansion ∥ embedding: no edge left between the expansion and the indexing
    expand = next(n for n in g if n.name == "expand")
    assert not any(n.kind in (Kind.EMBEDDING, Kind.INGESTION) for n in g.ancestors(expand))
    # stage split: 64 documents at 16 per batch → 4 embeddings, each into its own ingestion
    embeds = g.find(Kind.EMBEDDING)
    assert [n.attrs["batch_size"] for n in embeds] == [16, 16, 16, 16]
    ingests = g.find(Kind.INGESTION)
    assert len(ingests) == 4 and all(len(g.children(e)) == 1 for e in embeds)
    join = next(n for n in g if n.name == "join embed docs")
    assert join.kind is Kind.AGGREGATE and set(join.inputs.values()) == set(ingests)
    # partial prefill of the question while retrieval runs, then the full prefill
    partial = g.find(Kind.PARTIAL_PREFILLING)
    assert len(partial) == 1 and partial[0].attrs["early"] == ("question",)
    full = g.find(Kind.FULL_PREFILLING)
    assert [n.name for n in full] == ["full prefill"]
    assert g.output.inputs["prefill"] is partial[0]
    assert not (g.ancestors(partial[0]) & set(g.find(Kind.SEARCHING)))
    # three partial decodes, each searched on its own, plus the remainder
    parts = g.find(Kind.PARTIAL_DECODING)
    assert [n.attrs["item"] for n in parts] == [0, 1, 2]
    searches = g.find(Kind.SEARCHING)
    assert len(searches) == 4 and all(s.inputs.get("index") is join for s in searches)
    assert "Mermaid" not in g.to_text() and g.to_mermaid().startswith("flowchart TD")


def test_optimised_graph_computes_what_the_original_does():
    value = {"question": "q", "documents": [f"doc {i}" * (i % 5 + 1) for i in range(64)]}
    plain = GraphRuntime().run(advanced_rag(), value)
    fast = GraphRuntime().run(optimize(advanced_rag()), value)
    assert plain[0] == fast[0] == sum(len(f"q {w}") for w in ["alpha", "beta", "gamma", "delta"])
    assert plain[1] is None and fast[1] == "prefilled:q"


def test_optimised_graph_cache_is_keyed_by_structure():
    _cache.clear()
    first = optimize(advanced_rag())
    assert len(_cache) == 1
    second = optimize(advanced_rag())
    assert second.applied == first.applied and len(_cache) == 1
    optimize(advanced_rag(num_docs=8))  # a different batch size is a different structure
    assert len(_cache) == 2


def fig7_query(name: str, long_first: bool) -> tuple[Graph, list]:
    """Two LLM prefills of one query; the one on the longer path to the sink is deeper."""
    g = Graph(name)
    p1 = g.add(Kind.PREFILLING, "", op(lambda x: x), {"x": g.input}, engine="llm")
    p2 = g.add(Kind.PREFILLING, "", op(lambda x: x), {"x": g.input}, engine="llm")
    deep, shallow = (p1, p2) if long_first else (p2, p1)
    c = g.add(Kind.DECODING, "", op(lambda x: x), {"x": deep})
    d = g.add(Kind.TRANSFORM, "", op(lambda x: x), {"x": c})
    e = g.add(Kind.AGGREGATE, "", op(lambda **kw: kw), {"a": d, "b": shallow})
    g.output = e
    return g, [p1, p2]


def test_fig7_topology_aware_batching_picks_a_and_h():
    q1, (a, b) = fig7_query("query 1", long_first=True)
    q2, (g_, h) = fig7_query("query 2", long_first=False)
    a.name, b.name, g_.name, h.name = "A", "B", "G", "H"
    queue = pending_from(q1, [a, b], "q1", 512, 0.0) + pending_from(q2, [g_, h], "q2", 512, 0.1)
    assert [p.name for p in form_batch(queue, 1024, topology=False)] == ["A", "B"]
    assert [p.name for p in form_batch(queue, 1024, topology=True)] == ["A", "H"]


def test_engine_admission_order_is_topology_aware():
    def job(name, group, depth):
        return JobView(name, 0.0, 0.0, 512, 16, 0, None, group=group, depth=depth)
    jobs = [job("A", "q1", 3), job("B", "q1", 1), job("G", "q2", 1), job("H", "q2", 2),
            job("x", None, 0), job("y", None, 5)]
    assert [j.job_id for j in topology_order(jobs)] == ["A", "H", "x", "y", "B", "G"]


def test_runtime_runs_independent_nodes_concurrently_and_propagates_markers():
    g = Graph("flow")
    order = []

    def slow(tag):
        async def run(args):
            order.append(f"start {tag}")
            await anyio.sleep(0.05)
            order.append(f"end {tag}")
            return tag
        return run
    left = g.add(Kind.TRANSFORM, "left", slow("L"), {"x": g.input})
    right = g.add(Kind.TRANSFORM, "right", slow("R"), {"x": g.input})
    skipped = g.add(Kind.TRANSFORM, "gate", op(lambda x: SKIPPED), {"x": g.input})
    after_skip = g.add(Kind.TRANSFORM, "never", op(lambda x: 1 / 0), {"x": skipped})
    boom = g.add(Kind.TRANSFORM, "boom", op(lambda x: 1 / 0), {"x": left})
    after_boom = g.add(Kind.TRANSFORM, "after boom", op(lambda x: "ran"), {"x": boom})

    async def collect(args):
        return dict(args)
    g.output = g.add(Kind.AGGREGATE, "join", collect,
                     {"l": left, "r": right, "s": after_skip, "b": after_boom}, select=True)
    out = GraphRuntime().run(g, None)
    assert order[:2] == ["start L", "start R"]
    assert out["l"] == "L" and out["r"] == "R" and out["s"] is SKIPPED
    assert isinstance(out["b"], Failed) and isinstance(out["b"].error, ZeroDivisionError)
    assert out["b"].node == boom.id


def test_failed_output_raises_the_original_error():
    g = Graph("fails")
    g.output = g.add(Kind.OPAQUE, "bad", op(lambda x: int(x)), {"x": g.input})
    with pytest.raises(ValueError, match="invalid literal"):
        GraphRuntime().run(g, "not a number")


def test_item_stream_delivers_items_as_they_come():
    async def main():
        stream = ItemStream()
        got = []

        async def source():
            for i in range(2):
                await anyio.sleep(0.01)
                yield i

        async def reader(i):
            got.append((i, await stream.item(i)))
        async with anyio.create_task_group() as tg:
            for i in range(3):
                tg.start_soon(reader, i)
            tg.start_soon(stream.fill, source())
        return sorted(got), await stream.all()
    got, everything = anyio.run(main)
    assert got == [(0, 0), (1, 1), (2, SKIPPED)] and everything == [0, 1]


def test_printing_names_every_node_and_edge():
    g = advanced_rag()
    text = g.to_text()
    assert all(n.id in text for n in g)
    assert "after" in text  # the control edge before pruning
    mermaid = g.to_mermaid()
    assert mermaid.count("-.->") == 1 and "-->|texts|" in mermaid
