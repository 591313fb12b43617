"""Advanced RAG as one LCEL chain: LangChain + HF transformers, LangChain + ChatAgentRT, and
agentrt's compile(chain), side by side.

The chain (Teola's "advanced RAG", small) is ordinary LangChain code, built by
``build_chain(expansion_llm, synthesis_llm, ...)`` around whichever chat model is given:

    expand  = few-shot prompt | expansion_llm (max E tokens) | CommaSeparatedListOutputParser()
    context = expand | retriever.map() | dedupe_and_format       # k docs per expanded query
    chain   = {"context": context, "question": passthrough}
              | synthesis prompt (system instruction + question + context)
              | synthesis_llm (max S tokens) | StrOutputParser()

The retriever is ``VectorIndexRetriever`` over a faiss index of the first ``--docs`` chunks of
the real corpus (``agentrt_tools.rag.default_index``: the standard library's module
docstrings, all-MiniLM-L6-v2 embeddings), the same on every side. The model is
SmolLM2-135M-Instruct, float32, greedy, on every side. Three sides:

- LangChain + HF transformers — what a LangChain user runs today (see
  /work/shared/PEERS.md): the same chain built with
  ``ChatHuggingFace(llm=HuggingFacePipeline(transformers.pipeline("text-generation", ...)))``
  (agent_langchain.py's backend (a), via ``_hf_peer.py``; the weights are agentrt's float32
  safetensors of the same GGUF), run by ``chain.invoke(q)`` / ``chain.batch(qs)``.
  ``HuggingFacePipeline`` takes its token limit when built, so each step gets its own pipeline
  over the one model: ``max_new_tokens`` E for the expansion, S for the synthesis — the same
  limits as the other sides. ``batch`` runs LangChain's threads over that one model;
- LangChain + ChatAgentRT — the same chain with ``ChatAgentRT`` over one ``agentrt.Engine``
  (``llm.bind(max_tokens=E)`` for the expansion, ``max_tokens=S`` for the synthesis), run by
  LangChain's ``chain.invoke(q)`` / ``chain.batch(qs)`` (its thread-pool batching);
- agentrt (lowered) — that same ChatAgentRT chain object through
  ``fast = agentrt.graph.compile(chain)``; ``fast.invoke(q)`` / ``fast.batch(qs)`` — lowered to
  primitives (Prefilling, Decoding, Embedding, Searching, ...) and optimised: each expanded
  query is searched as soon as it is decoded (decoding pipelining), and the instruction +
  question are prefilled while expansion and retrieval still run (prefill split).

Two ratios: "HF / agentrt-lowered" is what a user gains by switching; "LangChain+ChatAgentRT /
agentrt-lowered" is what the lowering itself adds (both ChatAgentRT sides run on agentrt's
engine). Each is set against the issue's target (>= 1.5x).

Measurement: every side first runs one untimed warm-up query (models, embedding model and
faiss loaded, kernels warm). Sequential: each of ``--queries`` questions is timed on each
side, the side that goes first rotating per question; the engine's prefix cache is cleared
before every timed run, so no side reuses another's KV (HF has no prefix cache). Batch: all
the questions at once (``batch``), ``--batch-repeats`` times per side, rotating which side goes
first, again on a cleared cache; the median is reported. Latency is wall time
(``time.perf_counter``) of the call. Tokens: for the ChatAgentRT sides, the engine counters'
deltas over the call (prefill computed, prefix-cache hits, decode); for HF, the tokens every
``model.generate`` call received (its prompt: all of it is prefilled) and produced (counted as
the engine counts decode: all generated tokens but the last of each reply). The greedy
answers of the two ChatAgentRT sides must be identical (the run fails otherwise); HF's final
answers are compared with agentrt's and the differences reported (float summation order can
flip a token over a long output), without failing the run.

Benchmark-only dependency (like llama-cpp-python for engine.py): ``langchain-huggingface``
(``pip install langchain-huggingface``), for the HF side; ``--skip-hf`` runs without it.

    python benchmarks/chain_rag.py                      # 4 questions, 400-chunk index
    python benchmarks/chain_rag.py --queries 2 --docs 200 --synthesis-tokens 32
    python benchmarks/chain_rag.py --skip-hf            # only the two ChatAgentRT sides
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from _three_sides import (
    SHORT,
    SIDES,
    Counters,
    Pair,
    Run,
    Table,
    add_hf_side,
    add_side_args,
    check_outputs,
    doc_parser,
    engine_counters,
    finish,
    print_trace,
    rotated,
    start,
    timed,
    warm_up,
)
from langchain_core.output_parsers import CommaSeparatedListOutputParser, StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable, RunnableLambda, RunnablePassthrough

from agentrt import Engine
from agentrt.graph import compile as compile_graph
from agentrt_tools.rag import default_index
from langchain_agentrt import ChatAgentRT
from langchain_agentrt.rag import VectorIndexRetriever

SYSTEM = ("You are a careful assistant for questions about the Python standard library. "
          "Answer in two short sentences, using the context when it helps.")
EXPAND = [
    ("system", "Rewrite the question as three short search queries separated by commas."),
    ("user", "How do I sort a list?"),
    ("assistant", "sort a list, sorted function, list.sort method"),
    ("user", "{question}"),
]
WARMUP = "How do I format a date as text?"
QUESTIONS = (
    "How do I read a CSV file?",
    "How can I parse JSON text into Python objects?",
    "How do I run a shell command and capture its output?",
    "How do I compare two sequences of lines and show the differences?",
    "How do I schedule a function to run later?",
    "How can I compress data with gzip?",
    "How do I match text with a regular expression?",
    "How do I create a temporary directory?",
)


# --- the chain -------------------------------------------------------------------------------
def build_chain(expansion_llm: Runnable, synthesis_llm: Runnable,
                retriever: VectorIndexRetriever, args: argparse.Namespace) -> Runnable:
    """Query expansion → retrieval per expanded query → dedupe/format → synthesis, around the
    given chat models (each already limited to its step's token budget)."""
    expand = (ChatPromptTemplate.from_messages(EXPAND)
              | expansion_llm | CommaSeparatedListOutputParser())
    def dedupe_format(docs_per_query: list[list[Any]]) -> str:
        return format_docs(docs_per_query, args.doc_chars)
    context = expand | retriever.map() | RunnableLambda(dedupe_format)
    synthesis = ChatPromptTemplate.from_messages(
        [("system", SYSTEM), ("user", "Question: {question}\nContext:\n{context}")])
    return ({"context": context, "question": RunnablePassthrough()}
            | synthesis | synthesis_llm | StrOutputParser())


def format_docs(docs_per_query: list[list[Any]], max_chars: int) -> str:
    """Every retrieved document once (first occurrence first), each cut to ``max_chars``."""
    seen: set[str] = set()
    texts: list[str] = []
    for docs in docs_per_query:
        for doc in docs:
            if doc.page_content not in seen:
                seen.add(doc.page_content)
                texts.append(doc.page_content[:max_chars])
    return "\n\n".join(texts)


# --- measurement -----------------------------------------------------------------------------
@dataclass
class SideResult:
    sequential: list[Run] = field(default_factory=list)
    batches: list[Run] = field(default_factory=list)
    trace: list[tuple[str, float, float]] = field(default_factory=list)
    """agentrt only: the op spans of its last sequential query."""

    def mean(self, attr: str) -> float:
        return statistics.fmean(getattr(r, attr) for r in self.sequential)

    @property
    def batch_seconds(self) -> float:
        return statistics.median(r.seconds for r in self.batches)


def measure(engine: Engine, runners: dict[str, Any], counters: dict[str, Counters],
            questions: Sequence[str], batch_repeats: int) -> dict[str, SideResult]:
    """Sequential runs, then ``batch_repeats`` batches per side (side order rotating)."""
    sides = [s for s in SIDES if s in runners]
    results = {name: SideResult() for name in sides}
    for i, q in enumerate(questions):
        for name in rotated(sides, i):
            run = timed(engine, counters[name], lambda r=runners[name], q=q: r.invoke(q))
            results[name].sequential.append(run)
            if name == "agentrt":
                results[name].trace = list(runners[name].runtime.last_trace)
            print(f"  [{i + 1}/{len(questions)}] {SHORT[name]:<14} {run.seconds:6.2f} s  "
                  f"{run.outputs[0][:60]!r}", flush=True)
    for i in range(batch_repeats if len(questions) > 1 else 0):
        for name in rotated(sides, i):
            run = timed(engine, counters[name], lambda r=runners[name]: r.batch(questions))
            results[name].batches.append(run)
            print(f"  [batch of {len(questions)}, {i + 1}/{batch_repeats}] {SHORT[name]:<14} "
                  f"{run.seconds:6.2f} s", flush=True)
    return results


# --- report ----------------------------------------------------------------------------------
def print_table(results: dict[str, SideResult], n: int) -> None:
    table = Table(list(results))
    ag = results["agentrt"]

    def each(value: Callable[[SideResult], float]) -> dict[str, float]:
        return {k: value(r) for k, r in results.items()}

    def cached(value: Callable[[SideResult], float]) -> dict[str, float | None]:
        return {k: None if k == "hf" else value(r) for k, r in results.items()}  # no cache

    table.latency(f"latency per query, sequential (mean of {n})", each(lambda r: r.mean("seconds")))
    batched = all(r.batches for r in results.values())
    if batched:
        table.latency(f"batch of {n}, wall (all done; median of {len(ag.batches)})",
                      each(lambda r: r.batch_seconds))
        table.latency(f"batch of {n}, per query", each(lambda r: r.batch_seconds / n))
    table.count("prefill tokens computed per query (seq.)", each(lambda r: r.mean("num_prefill")))
    table.count("prefix-cache hit tokens per query (seq.)", cached(lambda r: r.mean("num_cached")))
    table.count("decode tokens per query (seq.)", each(lambda r: r.mean("num_decode")))
    if batched:
        table.count(f"prefill tokens computed, batch of {n} (last)",
                    each(lambda r: r.batches[-1].num_prefill))
        table.count(f"prefix-cache hit tokens, batch of {n} (last)",
                    cached(lambda r: r.batches[-1].num_cached))
    table.print()


def answer_pairs(results: dict[str, SideResult], side: str) -> list[Pair]:
    """(label, ``side``'s answer, agentrt's answer) for every timed question."""
    x, ag = results[side], results["agentrt"]
    pairs = [(f"sequential q{i + 1}", a.outputs[0], b.outputs[0])
             for i, (a, b) in enumerate(zip(x.sequential, ag.sequential, strict=True))]
    for j, (u, v) in enumerate(zip(x.batches, ag.batches, strict=True)):
        pairs += [(f"batch {j + 1} q{i + 1}", a, b)
                  for i, (a, b) in enumerate(zip(u.outputs, v.outputs, strict=True))]
    return pairs


# --- main ------------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = doc_parser(__doc__)
    p.add_argument("--queries", type=int, default=4,
                   help=f"questions timed, 1..{len(QUESTIONS)} (default: %(default)s); "
                        "> 1 also times one batch of them")
    p.add_argument("--docs", type=int, default=400,
                   help="corpus chunks in the faiss index (default: %(default)s)")
    p.add_argument("--k", type=int, default=2,
                   help="documents retrieved per expanded query (default: %(default)s)")
    p.add_argument("--doc-chars", type=int, default=300,
                   help="characters of each document put into the context (default: %(default)s)")
    p.add_argument("--batch-repeats", type=int, default=3,
                   help="timed batches per side (median reported; default: %(default)s)")
    p.add_argument("--expansion-tokens", type=int, default=32,
                   help="max tokens of the query-expansion call (default: %(default)s)")
    p.add_argument("--synthesis-tokens", type=int, default=48,
                   help="max tokens of the synthesis call (default: %(default)s)")
    add_side_args(p)
    args = p.parse_args(argv)
    if not 1 <= args.queries <= len(QUESTIONS):
        p.error(f"--queries must be in 1..{len(QUESTIONS)}")
    if args.batch_repeats < 1:
        p.error("--batch-repeats must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    started = start()
    engine = Engine(dtype="float32", quantization=args.quantization)
    llm = ChatAgentRT(engine=engine, max_tokens=args.synthesis_tokens)
    retriever = VectorIndexRetriever(index=default_index(args.docs), k=args.k)
    chain = build_chain(llm.bind(max_tokens=args.expansion_tokens), llm, retriever, args)
    fast = compile_graph(chain)
    # the same call protocol on every side: invoke / batch
    runners: dict[str, Any] = {"langchain": chain, "agentrt": fast}
    counters: dict[str, Counters] = dict.fromkeys(runners, engine_counters(engine))
    print(f"engine: agentrt, {engine.config.model or 'SmolLM2-135M-Instruct'} float32 "
          f"(quantization: {args.quantization}), greedy; "
          f"index: faiss over {args.docs} corpus chunks, k={args.k} per expanded query; "
          f"max tokens (every side): expansion {args.expansion_tokens}, synthesis "
          f"{args.synthesis_tokens}")
    if args.skip_hf:
        print("LangChain + HF transformers: skipped (--skip-hf)")
    else:
        add_hf_side(engine, runners, counters, lambda hf: build_chain(
            hf.chat(args.expansion_tokens), hf.chat(args.synthesis_tokens), retriever, args))
    print("optimised agentrt graph (passes applied: "
          f"{', '.join(fast.graph.applied) or 'none'}):")
    print(fast.graph)
    print("warm-up (untimed): one query per side")
    warm_up(runners, SIDES, WARMUP)
    questions = QUESTIONS[: args.queries]
    print(f"timing {len(questions)} questions (prefix cache cleared before every timed run):")
    results = measure(engine, runners, counters, questions, args.batch_repeats)
    print_trace(fast, results["agentrt"].trace, "the last sequential query")

    print()
    print_table(results, len(questions))
    pairs = {side: answer_pairs(results, side) for side in ("hf", "langchain") if side in results}
    same = check_outputs(pairs, "answers", lambda text: len(
        engine.tokenizer.encode(text, add_special_tokens=False)))
    engine.close()
    finish(started, same)


if __name__ == "__main__":
    main()
