"""Lower a LlamaIndex ``RetrieverQueryEngine`` into agentrt's primitive graph (Teola).

>>> from agentrt.graph import compile
>>> fast = compile(index.as_query_engine(llm=AgentRT(), response_mode="refine"))
>>> str(fast.invoke("How do I parse JSON?")) == str(query_engine.query("How do I parse JSON?"))
>>> print(fast.graph)

:func:`lower_query_engine` (registered in :data:`agentrt.graph.compiled.LOWERINGS` for the
``llama_index`` package) turns ``query_engine.aquery(q)`` into::

    Input → Transform "query bundle" → Embedding "embed query" → Searching "retrieve"
          → (one node per node postprocessor) → synthesis → Transform "response"

* **Embedding** runs the retriever's own embed model the way ``VectorIndexRetriever``
  would (``aget_agg_embedding_from_queries(bundle.embedding_strs)``); **Searching** then
  calls ``retriever.aretrieve`` with a ``QueryBundle`` that carries that embedding, so the
  retriever searches without embedding again (and still does its docstore lookups,
  recursive retrieval and callbacks). Another retriever is one ``Opaque`` node calling its
  ``aretrieve``; a retriever that needs no embedding (text search) is one Searching node.
* **Synthesis** (``refine``, ``compact``, ``tree_summarize``) becomes Prefilling/Decoding
  pairs, see :mod:`llama_index.llms.agentrt.lowering_synth`; each pair is one
  ``llm.apredict`` of the synthesizer split in two: Prefilling formats the prompt exactly as
  ``apredict`` does (``llm._get_messages``), Decoding is ``llm.achat`` + ``_parse_output``.
* **Response**: the synthesizer's own ``_prepare_response_output`` (same ``Response`` text,
  source nodes and metadata), or ``Response(empty_response)`` when nothing was retrieved.

What cannot be lowered runs as an ``Opaque`` node calling the original object, so lowering
never fails: another synthesizer mode, a streaming / structured / multimodal synthesizer,
an LLM other than :class:`~llama_index.llms.agentrt.AgentRT` (the synthesis is one node
calling ``synthesizer.asynthesize``); a query engine that is not a plain
``RetrieverQueryEngine`` (one node calling ``aquery``). A bare retriever lowers to its
retrieval part.

:func:`agentrt.graph.compile` returns a query engine again
(:mod:`llama_index.llms.agentrt.compiled`), whose ``query`` has LlamaIndex's instrumentation
span and query events around the run. Not reproduced: the legacy callback manager's
query/synthesize events of ``RetrieverQueryEngine`` (the LLM's and the retriever's own events
still fire).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.constants import DEFAULT_SIMILARITY_TOP_K
from llama_index.core.indices.vector_store.retrievers.retriever import VectorIndexRetriever
from llama_index.core.query_engine.retriever_query_engine import RetrieverQueryEngine
from llama_index.core.schema import QueryBundle
from llama_index.llms.agentrt.lowering_synth import lower_synthesizer, synthesis_mode

from agentrt.graph import Graph, Kind, Node

if TYPE_CHECKING:
    from agentrt.backends.base import Backend

__all__ = ["DEFAULT_SLOTS", "lower_query_engine", "lower_retriever"]

DEFAULT_SLOTS = DEFAULT_SIMILARITY_TOP_K
"""LLM call pairs built for a retriever without ``similarity_top_k``."""
_ENGINE_METHODS = ("aquery", "_aquery", "aretrieve", "_async_apply_node_postprocessors")
_RETRIEVER_METHODS = ("aretrieve", "_aretrieve", "_aget_nodes_with_embeddings")


def lower_query_engine(obj: Any, *, backend: Backend | None = None) -> Graph:
    """The (unoptimised) primitive graph of a LlamaIndex query engine (or retriever).

    The graph's input is what ``aquery`` takes (a query string or a ``QueryBundle``); its
    output is what ``aquery`` returns (a ``Response`` for the lowered modes). The lowered
    synthesis calls run on ``backend`` (None: the ``AgentRT``'s own backend).
    """
    if isinstance(obj, RetrieverQueryEngine) and _inherits(obj, RetrieverQueryEngine,
                                                           _ENGINE_METHODS):
        synth = obj._response_synthesizer
        graph = Graph(f"{type(obj).__name__}[{synthesis_mode(synth)}]")
        bundle = _bundle_node(graph)
        nodes = lower_retriever(graph, obj.retriever, bundle)
        for post in obj._node_postprocessors:
            nodes = _postprocessor(graph, post, bundle, nodes)
        slots = getattr(obj.retriever, "similarity_top_k", None)
        graph.output = lower_synthesizer(graph, synth, bundle, nodes,
                                         slots if isinstance(slots, int) else DEFAULT_SLOTS,
                                         backend)
        return graph
    if isinstance(obj, BaseRetriever):
        graph = Graph(type(obj).__name__)
        graph.output = lower_retriever(graph, obj, _bundle_node(graph))
        return graph
    graph = Graph(type(obj).__name__)
    graph.output = _opaque_call(graph, obj, graph.input)
    return graph


def lower_retriever(graph: Graph, retriever: BaseRetriever, bundle: Node) -> Node:
    """Embedding + Searching for a ``VectorIndexRetriever`` that embeds its query; one
    Searching node for one that does not (text search); an Opaque node for any other."""
    async def search(args: dict[str, Any]) -> Any:
        query = args["query"]
        if args.get("embedding") is not None:
            query = dataclasses.replace(query, embedding=args["embedding"])
        return await retriever.aretrieve(query)

    if not (isinstance(retriever, VectorIndexRetriever)
            and _inherits(retriever, VectorIndexRetriever, _RETRIEVER_METHODS)):
        return graph.add(Kind.OPAQUE, f"retrieve ({type(retriever).__name__})", search,
                         {"query": bundle})
    top_k = retriever.similarity_top_k
    if not retriever._needs_embedding():
        return graph.add(Kind.SEARCHING, "retrieve", search, {"query": bundle},
                         engine="vector", top_k=top_k)
    embed_model = retriever._embed_model

    async def embed(args: dict[str, Any]) -> list[float] | None:
        query: QueryBundle = args["x"]
        if query.embedding is None and len(query.embedding_strs) > 0:
            return await embed_model.aget_agg_embedding_from_queries(query.embedding_strs)
        return query.embedding  # given (or nothing to embed): the retriever uses it as is
    vec = graph.add(Kind.EMBEDDING, "embed query", embed, {"x": bundle}, engine="embedding",
                    batchable=True)
    return graph.add(Kind.SEARCHING, "retrieve", search, {"query": bundle, "embedding": vec},
                     engine="vector", top_k=top_k)


# --- helpers ---------------------------------------------------------------------------------
def _bundle_node(graph: Graph) -> Node:
    """A query string → ``QueryBundle(query)``, as ``BaseQueryEngine.aquery`` does."""
    async def to_bundle(args: dict[str, Any]) -> QueryBundle:
        value = args["x"]
        return QueryBundle(value) if isinstance(value, str) else value
    return graph.add(Kind.TRANSFORM, "query bundle", to_bundle, {"x": graph.input})


def _postprocessor(graph: Graph, post: Any, bundle: Node, nodes: Node) -> Node:
    """One node postprocessor (a reranker is a Reranking primitive, others Opaque)."""
    async def op(args: dict[str, Any]) -> Any:
        return await post.apostprocess_nodes(args["nodes"], query_bundle=args["query"])
    name = type(post).__name__
    kind = Kind.RERANKING if "rerank" in name.lower() else Kind.OPAQUE
    return graph.add(kind, f"postprocess ({name})", op, {"nodes": nodes, "query": bundle})


def _opaque_call(graph: Graph, obj: Any, src: Node) -> Node:
    """The whole object as one node: ``aquery`` of a query engine (else ``aretrieve``)."""
    method = "aquery" if isinstance(obj, BaseQueryEngine) or hasattr(obj, "aquery") \
        else "aretrieve" if hasattr(obj, "aretrieve") else None
    if method is None:
        raise TypeError(f"don't know how to run a {type(obj).__name__} as a graph node "
                        "(no aquery or aretrieve)")
    call = getattr(obj, method)

    async def op(args: dict[str, Any]) -> Any:
        return await call(args["x"])
    return graph.add(Kind.OPAQUE, f"{type(obj).__name__}.{method}", op, {"x": src})


def _inherits(obj: Any, base: type, methods: tuple[str, ...]) -> bool:
    """``obj``'s class uses ``base``'s own implementation of each of ``methods`` (compared
    by the class defining it: LlamaIndex's span wrappers are new objects on every access)."""
    return all(_owner(type(obj), m) is _owner(base, m) for m in methods)


def _owner(cls: type, method: str) -> type | None:
    return next((c for c in cls.__mro__ if method in c.__dict__), None)
