"""Response synthesizers as LLM primitives (Teola's shapes), equal to LlamaIndex's own.

``k`` below is the retriever's ``similarity_top_k``; the graph is built for ``k`` retrieved
chunks. How many LLM calls a query needs is only known after retrieval (fewer nodes may
come back; ``PromptHelper.repack`` may merge chunks or split a long one), so:

* ``refine``: Transform "repack" (each chunk repacked to fit, as the refine loop does) →
  ``k`` chained Prefilling/Decoding pairs — the first with the text-QA template, the next
  ones with the refine template and the previous answer — → Opaque "refine[k:]" → Transform
  "response". A pair whose chunk does not exist yields ``SKIPPED``; "refine[k:]" continues
  from the last pair that ran: it does nothing unless repacking left more than ``k`` chunks,
  then it runs the rest of the loop with the same ops (the graph cannot know how many).
* ``compact``: the same, but "repack" first packs the chunks together with the
  synthesizer's own ``_make_compact_text_chunks`` (``PromptHelper.repack``), so usually fewer
  than ``k`` pairs run and the rest are skipped.
* ``tree_summarize``: Transform "repack" (the chunks packed into groups with the summary
  template) → ``k`` parallel Prefilling/Decoding pairs, one per group (``SKIPPED`` past the
  last group) + Opaque "summarize[k:]" (groups past ``k``, usually none) → one combining
  Prefilling/Decoding over the summaries (skipped when there was only one group: its answer
  is the result). Should the summaries not fit one prompt, the combining Decoding runs
  LlamaIndex's own recursion (``aget_response`` over the summaries).

Each pair is one ``llm.apredict(template, **kwargs)`` of the synthesizer: Prefilling formats
the prompt as ``apredict`` does (``llm._get_messages``, or ``_get_prompt`` for a completion
model), Decoding runs ``llm.achat`` (``acomplete``) and ``llm._parse_output``. The loop
logic between calls (which template, the repack of a chunk against the refine prompt, an
empty answer keeping the previous one, errors the refine program swallows, "Empty
Response") follows ``Refine._arun_refine_loop`` and ``TreeSummarize.aget_response`` line
by line, calling their helpers; so the answer equals ``query_engine.query(q)``'s.
Not emitted: ``apredict``'s own ``LLMPredictStart/EndEvent`` and template log (``achat``'s
events are), the synthesizer's span and ``verbose`` prints.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
from llama_index.core.bridge.pydantic import ValidationError
from llama_index.core.llms.structured_llm import StructuredLLM
from llama_index.core.prompts import BasePromptTemplate
from llama_index.core.prompts.prompt_utils import get_biggest_prompt
from llama_index.core.response_synthesizers import (
    CompactAndRefine,
    Refine,
    TreeSummarize,
)
from llama_index.core.schema import MetadataMode
from llama_index.llms.agentrt.base import AgentRT

from agentrt.graph import SKIPPED, Failed, Graph, Kind, Node

if TYPE_CHECKING:
    from agentrt.backends.base import Backend

__all__ = ["LOWERED_MODES", "lower_synthesizer", "synthesis_mode", "unlowerable_reason"]

logger = logging.getLogger(__name__)

LOWERED_MODES: dict[type, str] = {
    CompactAndRefine: "compact", Refine: "refine", TreeSummarize: "tree_summarize"}
"""Synthesizer class (exactly; a subclass may change anything) → its response mode."""
_SWALLOWED = (ValidationError, ValueError, TypeError)
"""What ``Refine._aupdate_response`` logs and skips (the answer so far is kept)."""


def synthesis_mode(synth: Any) -> str:
    return LOWERED_MODES.get(type(synth), type(synth).__name__)


def unlowerable_reason(synth: Any) -> str | None:
    """Why ``synth`` must run as one Opaque node (None: it lowers)."""
    if type(synth) not in LOWERED_MODES:
        return f"mode {type(synth).__name__} is not lowered"
    llm = synth._llm
    if synth._streaming:
        return "streaming"
    if synth._output_cls is not None or isinstance(llm, StructuredLLM):
        return "structured output"
    if synth._multimodal:
        return "multimodal"
    if not isinstance(llm, AgentRT):
        return f"LLM {type(llm).__name__} does not run on agentrt"
    if isinstance(synth, Refine) and (
            synth._structured_answer_filtering
            or synth._program_factory != synth._default_program_factory):
        return "structured answer filtering"
    return None


def lower_synthesizer(graph: Graph, synth: Any, bundle: Node, nodes: Node, slots: int,
                      backend: Backend | None = None) -> Node:
    """The node producing ``synth.asynthesize(query=bundle, nodes=nodes)``'s response, with
    ``slots`` LLM call pairs per level (the retriever's ``similarity_top_k``); the calls run
    on ``backend`` when given (else on the ``AgentRT``'s own)."""
    reason = unlowerable_reason(synth)
    if reason is not None:
        async def synthesize(args: dict[str, Any]) -> Any:
            return await synth.asynthesize(query=args["query"], nodes=args["nodes"])
        return graph.add(Kind.OPAQUE, f"synthesize ({type(synth).__name__})", synthesize,
                         {"query": bundle, "nodes": nodes}, reason=reason)
    k = max(1, slots)
    llm = synth._llm
    if backend is not None:
        llm = llm.model_copy(update={"backend": backend, "engine": None})
    if isinstance(synth, TreeSummarize):
        answer, single = _lower_tree(graph, synth, llm, bundle, nodes, k)
        inputs = {"nodes": nodes, "answer": answer, "single": single}
    else:
        inputs = {"nodes": nodes, "answer": _lower_refine(graph, synth, llm, bundle, nodes, k)}
    return graph.add(Kind.TRANSFORM, "response", _response_op(synth), inputs, select=True)


# --- one LLM call: apredict in two halves ----------------------------------------------------
@dataclass(frozen=True)
class Formatted:
    """A formatted prompt (a Prefilling node's value): chat messages or a completion text."""

    chat: bool
    prompt: Any


def format_prompt(llm: Any, template: BasePromptTemplate, **kwargs: Any) -> Formatted:
    """``LLM.apredict``'s formatting of ``template`` with ``kwargs``."""
    if llm.metadata.is_chat_model:
        return Formatted(True, llm._get_messages(template, **kwargs))
    return Formatted(False, llm._get_prompt(template, **kwargs))


async def decode(llm: Any, formatted: Formatted) -> str:
    """``LLM.apredict``'s call and output parsing of an already formatted prompt."""
    if formatted.chat:
        response = await llm.achat(formatted.prompt)
        output = response.message.content or ""
    else:
        output = (await llm.acomplete(formatted.prompt, formatted=True)).text
    return llm._parse_output(output)


# --- refine / compact ------------------------------------------------------------------------
@dataclass(frozen=True)
class RefineState:
    """Between two calls of ``Refine._arun_refine_loop``: the chunks still to read (its
    deque) and the answer so far."""

    query_str: str
    chunks: tuple[str, ...]
    response: str | None = None


@dataclass(frozen=True)
class RefineCall:
    """A Prefilling node's value: the state after taking its chunk, and the prompt (None
    when formatting raised what the refine program swallows: no call, answer kept)."""

    state: RefineState
    formatted: Formatted | None


def _lower_refine(graph: Graph, synth: Refine, llm: Any, bundle: Node, nodes: Node,
                  k: int) -> Node:
    mode = synthesis_mode(synth)

    async def repack(args: dict[str, Any]) -> RefineState:
        if not args["nodes"]:
            return SKIPPED  # the synthesizer answers its empty response without a call
        query_str = args["query"].query_str
        chunks = _texts(args["nodes"])
        if isinstance(synth, CompactAndRefine):
            chunks = synth._make_compact_text_chunks(query_str, chunks)
        return RefineState(query_str, tuple(_initial_chunks(synth, chunks)))
    state = graph.add(Kind.TRANSFORM, "repack", repack, {"query": bundle, "nodes": nodes},
                      mode=mode)
    states = {"s0": state}
    for i in range(k):
        async def prefill(args: dict[str, Any]) -> RefineCall:
            call = next_refine_call(synth, args["state"])
            return SKIPPED if call is None else call

        async def decode_op(args: dict[str, Any]) -> RefineState:
            return await run_refine_call(llm, args["prefill"])
        pre = graph.add(Kind.PREFILLING, f"{mode}[{i}] prefill", prefill, {"state": state},
                        engine="llm", step=i)
        state = graph.add(Kind.DECODING, f"{mode}[{i}] decode", decode_op, {"prefill": pre},
                          engine="llm", step=i, model=llm.model_name)
        states[f"s{i + 1}"] = state

    async def rest(args: dict[str, Any]) -> str:
        state = _last_real(args.values())
        if state is SKIPPED:
            return SKIPPED
        while (call := next_refine_call(synth, state)) is not None:
            state = await run_refine_call(llm, call)
        response = state.response
        return (response or "Empty Response") if isinstance(response, str) else "Empty Response"
    return graph.add(Kind.OPAQUE, f"{mode}[{k}:]", rest, states, select=True,
                     dynamic=True)


def _initial_chunks(synth: Refine, chunks: list[str]) -> list[str]:
    """The refine loop's first guess: each chunk repacked against the biggest prompt with
    the response padding (``Refine._arun_refine_loop``'s deque)."""
    max_prompt = get_biggest_prompt([synth._text_qa_template, synth._refine_template])
    return [tc for chunk in chunks
            for tc in synth._prompt_helper.repack(
                max_prompt, [chunk], llm=synth._llm, padding=synth._response_padding_size)]


def next_refine_call(synth: Refine, state: RefineState) -> RefineCall | None:
    """The next call of the refine loop from ``state`` (None: the loop is over): the loop
    body up to ``program.acall``, including the repack of a chunk that no longer fits the
    refine prompt with the answer so far (its parts go to the front of the deque)."""
    query_str, response = state.query_str, state.response
    chunks = deque(state.chunks)
    while chunks:
        chunk = chunks.popleft()
        if response is None:
            template = synth._text_qa_template.partial_format(query_str=query_str)
            kwargs = {"context_str": chunk}
        else:
            template = synth._refine_template.partial_format(
                query_str=query_str, existing_answer=response)
            repacked = synth._prompt_helper.repack(template, [chunk], llm=synth._llm)
            if len(repacked) > 1:
                chunks.extendleft(repacked)
                continue
            kwargs = {"context_msg": repacked[0]}
        after = RefineState(query_str, tuple(chunks), response)
        try:
            return RefineCall(after, format_prompt(synth._llm, template, **kwargs))
        except _SWALLOWED as exc:
            logger.warning(f"Structured response error: {exc}", exc_info=True)
            return RefineCall(after, None)
    return None


async def run_refine_call(llm: Any, call: RefineCall) -> RefineState:
    """The call; its answer replaces the answer so far unless it is empty (or failed the
    way ``Refine._aupdate_response`` tolerates)."""
    state, answer = call.state, None
    if call.formatted is not None:
        try:
            answer = await decode(llm, call.formatted)
        except _SWALLOWED as exc:
            logger.warning(f"Structured response error: {exc}", exc_info=True)
    if answer:
        state = RefineState(state.query_str, state.chunks, answer)
    return state


# --- tree_summarize --------------------------------------------------------------------------
@dataclass(frozen=True)
class TreeLevel:
    """The chunks packed into groups for one summary level, and the template they fill."""

    query_str: str
    template: BasePromptTemplate
    groups: tuple[str, ...]


@dataclass(frozen=True)
class Combine:
    """The combining Prefilling's value: its prompt, or the summaries to recurse over when
    they do not fit one prompt."""

    query_str: str
    formatted: Formatted | None
    summaries: tuple[str, ...] = ()


def _lower_tree(graph: Graph, synth: TreeSummarize, llm: Any, bundle: Node, nodes: Node,
                k: int) -> tuple[Node, Node]:

    async def repack(args: dict[str, Any]) -> TreeLevel:
        if not args["nodes"]:
            return SKIPPED
        query_str = args["query"].query_str
        template = synth._summary_template.partial_format(query_str=query_str)
        groups = synth._prompt_helper.repack(template, text_chunks=_texts(args["nodes"]),
                                             llm=llm)
        return TreeLevel(query_str, template, tuple(groups))
    level = graph.add(Kind.TRANSFORM, "repack", repack, {"query": bundle, "nodes": nodes},
                      mode="tree_summarize")
    leaves: dict[str, Node] = {}
    for i in range(k):
        async def prefill(args: dict[str, Any], i: int = i) -> Formatted:
            lv: TreeLevel = args["level"]
            if i >= len(lv.groups):
                return SKIPPED
            return format_prompt(llm, lv.template, context_str=lv.groups[i])
        pre = graph.add(Kind.PREFILLING, f"summarize[{i}] prefill", prefill, {"level": level},
                        engine="llm", step=i)
        leaves[f"l{i}"] = graph.add(Kind.DECODING, f"summarize[{i}] decode", _decoder(llm),
                                    {"prefill": pre}, engine="llm", step=i,
                                    model=llm.model_name)

    async def overflow(args: dict[str, Any]) -> list[str]:
        lv: TreeLevel = args["level"]
        extra = lv.groups[k:]
        out: list[str] = [""] * len(extra)

        async def one(j: int) -> None:
            out[j] = await decode(llm, format_prompt(llm, lv.template, context_str=extra[j]))
        async with anyio.create_task_group() as tg:
            for j in range(len(extra)):
                tg.start_soon(one, j)
        return out
    rest = graph.add(Kind.OPAQUE, f"summarize[{k}:]", overflow, {"level": level},
                     dynamic=True)

    async def combine_prefill(args: dict[str, Any]) -> Combine:
        lv = _real(args.pop("level"))
        if lv is SKIPPED or len(lv.groups) == 1:
            return SKIPPED  # one group: its summary is the answer
        extra = _real(args.pop("rest"))
        summaries = [_real(args[f"l{i}"]) for i in range(min(k, len(lv.groups)))]
        summaries += extra
        groups = synth._prompt_helper.repack(lv.template, text_chunks=summaries, llm=llm)
        if len(groups) == 1:
            return Combine(lv.query_str, format_prompt(llm, lv.template,
                                                       context_str=groups[0]))
        return Combine(lv.query_str, None, tuple(summaries))

    async def combine_decode(args: dict[str, Any]) -> str:
        c: Combine = args["prefill"]
        if c.formatted is not None:
            return await decode(llm, c.formatted)
        # the summaries need more than one prompt: LlamaIndex's own recursion from here
        return await synth.aget_response(query_str=c.query_str, text_chunks=list(c.summaries))
    pre = graph.add(Kind.PREFILLING, "combine prefill", combine_prefill,
                    {"level": level, **leaves, "rest": rest}, engine="llm", select=True)
    answer = graph.add(Kind.DECODING, "combine decode", combine_decode, {"prefill": pre},
                       engine="llm", model=llm.model_name)
    return answer, leaves["l0"]


def _decoder(llm: Any) -> Callable[[dict[str, Any]], Any]:
    async def op(args: dict[str, Any]) -> str:
        return await decode(llm, args["prefill"])
    return op


# --- helpers ---------------------------------------------------------------------------------
def _texts(nodes: list[Any]) -> list[str]:
    """What ``BaseSynthesizer.asynthesize`` hands ``aget_response``."""
    return [n.node.get_content(metadata_mode=MetadataMode.LLM) for n in nodes]


def _response_op(synth: Any):
    async def op(args: dict[str, Any]) -> Any:
        nodes = _real(args["nodes"])
        if not nodes:
            from llama_index.core.base.response.schema import Response
            return Response(synth._empty_response)
        answer = _real(args["answer"])
        if answer is SKIPPED:
            answer = _real(args["single"])
        return synth._prepare_response_output(answer, list(nodes))
    return op


def _real(value: Any) -> Any:
    """``value``, or raise the error of a failed node."""
    if isinstance(value, Failed):
        raise value.error
    return value


def _last_real(values: Any) -> Any:
    """The last value that is not SKIPPED (raising a failure), else SKIPPED."""
    for value in reversed(list(values)):
        if value is not SKIPPED:
            return _real(value)
    return SKIPPED
