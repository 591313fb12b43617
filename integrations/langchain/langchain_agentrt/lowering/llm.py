"""Lowering rules for the LLM call and retrieval, and the ops the passes plug in.

A ``ChatAgentRT`` call (bound options kept: the op runs the binding itself) becomes
Prefilling (the prompt template's formatting, when a template feeds it) + Decoding. The
Prefilling node carries ``partial_op``: after the prefill-split pass it renders the template
with only the variables known early, cuts the chat prompt at the first variable still
missing (the template's variables are Parrot's semantic variables) and prefills those tokens
into a session on the model's backend (:class:`agentrt.session.Session`: the local engine
holds it paused in place, an SGLang server in its own session), whose context the Decoding
call then continues. The Decoding node carries ``stream_op`` for decoding pipelining: the
model's stream run through the chain's list parser, one item at a time. Another chat model
is an Opaque node. ``compile(chain, backend=...)`` moves the model to that backend.

A vector-store retriever doing similarity search becomes Embedding (the query) + Searching.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import anyio
from langchain_core.language_models import BaseChatModel
from langchain_core.prompts import BasePromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import merge_configs
from langchain_core.utils.function_calling import convert_to_openai_tool
from langchain_core.vectorstores import VectorStoreRetriever

from agentrt.chat.template import render_prompt
from agentrt.graph import Graph, Kind, Node, current_node
from agentrt.session import PinnedScope, Session, agent_run
from langchain_agentrt.messages import to_openai_messages

if TYPE_CHECKING:
    from agentrt.backends.base import Backend
    from langchain_agentrt.lowering.walk import Walker

__all__ = ["MIN_PARTIAL_TOKENS", "lower_chat_model", "lower_retriever"]

MIN_PARTIAL_TOKENS = 16
"""A known prompt part shorter than this is not worth a prefill of its own."""
_LATE = "\u27e6agentrt-late\u27e7"


def lower_chat_model(graph: Graph, runnable: Runnable, model: BaseChatModel,
                     src: Node, backend: Backend | None = None,
                     config: RunnableConfig | None = None) -> Node:
    """Prefilling + Decoding for our chat model (on ``backend`` when given, else on its
    own); an Opaque node for any other. ``config``: of the ``with_config`` around it."""
    from langchain_agentrt.chat_models import ChatAgentRT

    async def invoke(args: dict[str, Any]) -> Any:
        return await _continue(runnable, args.get("prefill"), args["prompt"], config)
    if not isinstance(model, ChatAgentRT):
        return graph.add(Kind.OPAQUE, runnable.get_name(), _run(runnable, config), {"x": src})
    if backend is not None:
        runnable, model = _on_backend(runnable, model, backend)
    prefill = src
    if src.kind is Kind.TRANSFORM and "template" in src.attrs:
        src.kind, src.engine, src.name = Kind.PREFILLING, "llm", "prefill"
    else:
        prefill = graph.add(Kind.PREFILLING, "prefill", _identity, {"x": src}, engine="llm")
    template = prefill.attrs.get("template")
    if template is not None:
        prefill.attrs["partial_op"] = _partial_prefill(template, runnable, model)
    decode = graph.add(Kind.DECODING, "decode", invoke, {"prompt": prefill}, engine="llm",
                       model=model.resolved_model_name)
    decode.attrs["stream_op"] = lambda parser, prompt, session: _stream_items(
        runnable, parser, prompt, session, config)
    return decode


def lower_retriever(w: Walker, r: BaseRetriever, src: Node) -> Node:
    """Embedding + Searching for a similarity-search vector store; else one Searching."""
    from langchain_agentrt.rag import VectorIndexRetriever

    if isinstance(r, VectorIndexRetriever):
        return _index_retriever(w, r, src)
    store = getattr(r, "vectorstore", None)
    if not (isinstance(r, VectorStoreRetriever) and r.search_type == "similarity"
            and store is not None and store.embeddings is not None):
        return w.runnable_node(Kind.SEARCHING, r, src)
    embeddings, kwargs = store.embeddings, dict(r.search_kwargs)

    async def embed(args: dict[str, Any]) -> list[float]:
        return await embeddings.aembed_query(args["x"])

    async def search(args: dict[str, Any]) -> list[Any]:
        return await store.asimilarity_search_by_vector(args["x"], **kwargs)
    vec = w.graph.add(Kind.EMBEDDING, "embed query", embed, {"x": src}, engine="embedding",
                      batchable=True)
    return w.graph.add(Kind.SEARCHING, "search", search, {"x": vec}, engine="vector")


def _index_retriever(w: Walker, r: Any, src: Node) -> Node:
    from langchain_agentrt.rag import _document

    index, k = r.index, r.k

    async def embed(args: dict[str, Any]) -> Any:
        return await index.embedder.aembed_query(args["x"])

    async def search(args: dict[str, Any]) -> list[Any]:  # faiss off the event loop
        hits = await anyio.to_thread.run_sync(index.search, args["x"], k)
        return [_document(hit) for hit in hits]
    vec = w.graph.add(Kind.EMBEDDING, "embed query", embed, {"x": src}, engine="embedding",
                      batchable=True)
    return w.graph.add(Kind.SEARCHING, "search", search, {"x": vec}, engine="vector")


def _on_backend(runnable: Runnable, model: Any, backend: Backend) -> tuple[Runnable, Any]:
    """``runnable`` (the model, or a binding of it) with the model moved to ``backend``."""
    moved = model.model_copy(update={"backend": backend, "engine": None})
    if runnable is model:
        return moved, moved
    return runnable.model_copy(update={"bound": moved}), moved


# --- ops -------------------------------------------------------------------------------------
def call_config(static: RunnableConfig | None = None) -> RunnableConfig | None:
    """The config a node's runnable is called with: the run's (the caller's, a child of the
    compiled chain's root run) merged over ``static`` (the ``with_config`` around it)."""
    try:
        config = current_node().config
    except RuntimeError:  # run outside the graph runtime (an op called directly)
        config = None
    return merge_configs(static, config) if static else config


def _run(runnable: Runnable, static: RunnableConfig | None):
    async def op(args: dict[str, Any]) -> Any:
        return await runnable.ainvoke(args["x"], call_config(static))
    return op


async def _identity(args: dict[str, Any]) -> Any:
    return args["x"]


async def _continue(runnable: Runnable, session: Session | None, prompt: Any,
                    static: RunnableConfig | None) -> Any:
    """Run the call; with a prefilled session, as that session's next call."""
    if session is None:
        return await runnable.ainvoke(prompt, call_config(static))
    with agent_run(PinnedScope(session)):
        return await runnable.ainvoke(prompt, call_config(static))


async def _stream_items(runnable: Runnable, parser: Any, prompt: Any,
                        session: Session | None, static: RunnableConfig | None
                        ) -> AsyncIterator[Any]:
    """The list items of the call's answer, each as soon as the parser completes it."""
    chain, config = runnable | parser, call_config(static)
    with agent_run(PinnedScope(session)) if session is not None else nullcontext():
        async for chunk in chain.astream(prompt, config):
            for item in chunk:
                yield item


def _partial_prefill(template: BasePromptTemplate, runnable: Runnable, model: BaseChatModel):
    """The op of a PartialPrefilling node: prefill what the early variables determine."""
    tools = [convert_to_openai_tool(t) for t in getattr(runnable, "kwargs", {}).get("tools", ())]

    async def op(args: dict[str, Any]) -> Session | None:
        late = [v for v in template.input_variables if v not in args]
        try:
            value = await template.ainvoke({**args, **{v: _LATE for v in late}})
        except Exception:  # noqa: BLE001 - a template that needs the real value: no split
            return None
        backend = model.get_backend()
        text = render_prompt(backend.tokenizer, to_openai_messages(value.to_messages()), tools)
        cut = text.find(_LATE)
        # NOTE: the last token may merge with what follows; the session rolls seams back
        ids = backend.tokenizer.encode(text[:cut], add_special_tokens=False)[:-1]
        if cut < 0 or len(ids) < MIN_PARTIAL_TOKENS:
            return None
        session = Session(backend)
        store = current_node().store
        store.setdefault("sessions", []).append(session)
        store.setdefault("cleanup", []).append(session.close)
        await session.aprefill(ids)
        return session
    return op
