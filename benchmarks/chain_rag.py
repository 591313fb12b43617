"""Advanced RAG as one LCEL chain: LangChain's own invoke/batch vs agentrt's compile(chain).

The chain (Teola's "advanced RAG", small) is ordinary LangChain code:

    expand  = few-shot prompt | llm(max_tokens=E) | CommaSeparatedListOutputParser()
    context = expand | retriever.map() | dedupe_and_format       # k docs per expanded query
    chain   = {"context": context, "question": passthrough}
              | synthesis prompt (system instruction + question + context)
              | llm(max_tokens=S) | StrOutputParser()

The LLM is ``ChatAgentRT`` over one ``agentrt.Engine`` (SmolLM2-135M-Instruct, float32,
greedy); the retriever is ``VectorIndexRetriever`` over a faiss index of the first
``--docs`` chunks of the real corpus (``agentrt_tools.rag.default_index``: the standard
library's module docstrings, all-MiniLM-L6-v2 embeddings). Both sides run the same chain
object on the same engine and index; only the executor differs:

- LangChain: ``chain.invoke(q)`` / ``chain.batch(qs)`` (its thread-pool batching);
- agentrt:   ``fast = agentrt.graph.compile(chain)``; ``fast.invoke(q)`` / ``fast.batch(qs)``
  — the chain lowered to primitives (Prefilling, Decoding, Embedding, Searching, ...) and
  optimised: each expanded query is searched as soon as it is decoded (decoding
  pipelining), and the instruction + question are prefilled while expansion and retrieval
  still run (prefill split).

Measurement: both sides first run one untimed warm-up query (model, embedding model and
faiss loaded, kernels warm). Sequential: each of ``--queries`` questions is timed on each
side, the side that goes first alternating per question; the engine's prefix cache is
cleared before every timed run, so neither side reuses the other's KV. Batch: all the
questions at once (``batch``), ``--batch-repeats`` times per side, alternating which side
goes first, again on a cleared cache; the median is reported. Latency is wall time
(``time.perf_counter``) of the call; prefill/cached/decode tokens are the engine counters'
deltas over the call. The greedy answers of both sides must be identical.

    python benchmarks/chain_rag.py                      # 4 questions, 400-chunk index
    python benchmarks/chain_rag.py --queries 2 --docs 200 --synthesis-tokens 32
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.output_parsers import CommaSeparatedListOutputParser, StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable, RunnableLambda, RunnablePassthrough

from agentrt import Engine
from agentrt.graph import compile as compile_graph
from agentrt_tools.rag import default_index
from langchain_agentrt import ChatAgentRT
from langchain_agentrt.rag import VectorIndexRetriever

TARGET = 1.5
"""The issue's target: agentrt end-to-end latency ≥ 1.5× better than LangChain's."""
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
SIDES = ("LangChain", "agentrt")


# --- the chain -------------------------------------------------------------------------------
def build_chain(llm: ChatAgentRT, retriever: VectorIndexRetriever, args: argparse.Namespace
                ) -> Runnable:
    """Query expansion → retrieval per expanded query → dedupe/format → synthesis."""
    expand = (ChatPromptTemplate.from_messages(EXPAND)
              | llm.bind(max_tokens=args.expansion_tokens) | CommaSeparatedListOutputParser())
    def dedupe_format(docs_per_query: list[list[Any]]) -> str:
        return format_docs(docs_per_query, args.doc_chars)
    context = expand | retriever.map() | RunnableLambda(dedupe_format)
    synthesis = ChatPromptTemplate.from_messages(
        [("system", SYSTEM), ("user", "Question: {question}\nContext:\n{context}")])
    return ({"context": context, "question": RunnablePassthrough()}
            | synthesis | llm | StrOutputParser())


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
@dataclass(frozen=True)
class Run:
    """One timed call: wall seconds, its outputs and the engine counters' deltas."""

    seconds: float
    outputs: list[str]
    num_prefill: int
    num_cached: int
    num_decode: int


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


def timed(engine: Engine, call: Callable[[], Any]) -> Run:
    """Run ``call`` on a cold prefix cache; its wall time, outputs and counter deltas."""
    engine.clear_prefix_cache()
    s = engine.stats
    before = (s.num_prefill_tokens, s.num_cached_tokens, s.num_decode_tokens)
    start = time.perf_counter()
    out = call()
    seconds = time.perf_counter() - start
    after = (s.num_prefill_tokens, s.num_cached_tokens, s.num_decode_tokens)
    prefill, cached, decode = (b - a for a, b in zip(before, after, strict=True))
    return Run(seconds, out if isinstance(out, list) else [out], prefill, cached, decode)


def measure(engine: Engine, runners: dict[str, Any], questions: Sequence[str],
            batch_repeats: int) -> dict[str, SideResult]:
    """Sequential runs, then ``batch_repeats`` batches per side (side order alternating)."""
    results = {name: SideResult() for name in runners}
    for i, q in enumerate(questions):
        for name in SIDES if i % 2 == 0 else SIDES[::-1]:
            run = timed(engine, lambda r=runners[name], q=q: r.invoke(q))
            results[name].sequential.append(run)
            if name == "agentrt":
                results[name].trace = list(runners[name].runtime.last_trace)
            print(f"  [{i + 1}/{len(questions)}] {name:<9} {run.seconds:6.2f} s  "
                  f"{run.outputs[0][:60]!r}", flush=True)
    for i in range(batch_repeats if len(questions) > 1 else 0):
        for name in SIDES if i % 2 == 0 else SIDES[::-1]:
            run = timed(engine, lambda r=runners[name]: r.batch(questions))
            results[name].batches.append(run)
            print(f"  [batch of {len(questions)}, {i + 1}/{batch_repeats}] {name:<9} "
                  f"{run.seconds:6.2f} s", flush=True)
    return results


# --- report ----------------------------------------------------------------------------------
def print_table(results: dict[str, SideResult], n: int) -> None:
    lc, ag = results["LangChain"], results["agentrt"]
    rows = [["", "LangChain", "agentrt", "LangChain / agentrt", "target"]]

    def latency(label: str, a: float, b: float) -> None:
        ratio = a / b
        verdict = "met" if ratio >= TARGET else "not met"
        rows.append([label, f"{a:.2f} s", f"{b:.2f} s", f"{ratio:.2f}×",
                     f"≥ {TARGET:.1f}× ({verdict})"])

    def count(label: str, a: float, b: float) -> None:
        rows.append([label, f"{a:,.0f}", f"{b:,.0f}", f"{a / b:.2f}×" if b else "—", ""])

    latency(f"latency per query, sequential (mean of {n})", lc.mean("seconds"),
            ag.mean("seconds"))
    if lc.batches and ag.batches:
        k = len(lc.batches)
        latency(f"batch of {n}, wall (all done; median of {k})", lc.batch_seconds,
                ag.batch_seconds)
        latency(f"batch of {n}, per query", lc.batch_seconds / n, ag.batch_seconds / n)
    count("prefill tokens computed per query (seq.)", lc.mean("num_prefill"),
          ag.mean("num_prefill"))
    count("prefix-cache hit tokens per query (seq.)", lc.mean("num_cached"), ag.mean("num_cached"))
    count("decode tokens per query (seq.)", lc.mean("num_decode"), ag.mean("num_decode"))
    if lc.batches and ag.batches:
        count(f"prefill tokens computed, batch of {n} (last)", lc.batches[-1].num_prefill,
              ag.batches[-1].num_prefill)
        count(f"prefix-cache hit tokens, batch of {n} (last)", lc.batches[-1].num_cached,
              ag.batches[-1].num_cached)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for k, row in enumerate(rows):
        cells = [c.ljust(w) if i == 0 else c.rjust(w)
                 for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        print("| " + " | ".join(cells) + " |")
        if k == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    print("LangChain / agentrt > 1 means agentrt is faster (less time, or fewer tokens).")


def print_trace(fast: Any, trace: list[tuple[str, float, float]]) -> None:
    """Where an agentrt query's time went: each op's span, from the run's start."""
    if not trace:
        return
    nodes = {n.id: n for n in fast.graph}
    t0 = min(start for _, start, _ in trace)
    print("agentrt trace of the last sequential query (op spans, s from the start; an LLM "
          "op's span includes waiting for the engine):")
    for node_id, start, end in sorted(trace, key=lambda t: (t[1], t[2])):
        node = nodes.get(node_id)
        label = f"{node.kind.value} {node.name}" if node is not None else node_id
        print(f"  {node_id:<4} {label:<45} {start - t0:6.2f} → {end - t0:6.2f}  "
              f"({end - start:5.2f})")


def check_outputs(results: dict[str, SideResult], questions: Sequence[str]) -> bool:
    """Print every question whose answers differ between the sides; True if none does."""
    lc, ag = results["LangChain"], results["agentrt"]
    pairs = [(f"sequential q{i + 1}", a.outputs[0], b.outputs[0])
             for i, (a, b) in enumerate(zip(lc.sequential, ag.sequential, strict=True))]
    for j, (x, y) in enumerate(zip(lc.batches, ag.batches, strict=True)):
        pairs += [(f"batch {j + 1} q{i + 1}", a, b)
                  for i, (a, b) in enumerate(zip(x.outputs, y.outputs, strict=True))]
    bad = [(label, a, b) for label, a, b in pairs if a != b]
    for label, a, b in bad:
        print(f"MISMATCH ({label}):\n  LangChain: {a!r}\n  agentrt:   {b!r}")
    print(f"greedy outputs identical on both sides: {len(pairs) - len(bad)}/{len(pairs)}")
    return not bad


# --- main ------------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    doc = __doc__ or ""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n\n".join(doc.split("\n\n")[1:]))
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
                   help="max_tokens of the query-expansion call (default: %(default)s)")
    p.add_argument("--synthesis-tokens", type=int, default=48,
                   help="max_tokens of the synthesis call (default: %(default)s)")
    args = p.parse_args(argv)
    if not 1 <= args.queries <= len(QUESTIONS):
        p.error(f"--queries must be in 1..{len(QUESTIONS)}")
    if args.batch_repeats < 1:
        p.error("--batch-repeats must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.perf_counter()
    print(f"command: {shlex.join(sys.orig_argv)}")
    print(f"load average at the start: {load_average()}")
    engine = Engine(dtype="float32")
    llm = ChatAgentRT(engine=engine, max_tokens=args.synthesis_tokens)
    retriever = VectorIndexRetriever(index=default_index(args.docs), k=args.k)
    chain = build_chain(llm, retriever, args)
    fast = compile_graph(chain)
    runners = {"LangChain": chain, "agentrt": fast}  # the same call protocol: invoke / batch
    print(f"engine: agentrt, {engine.config.model or 'SmolLM2-135M-Instruct'} float32, greedy; "
          f"index: faiss over {args.docs} corpus chunks, k={args.k} per expanded query; "
          f"max_tokens: expansion {args.expansion_tokens}, synthesis {args.synthesis_tokens}")
    print("optimised agentrt graph (passes applied: "
          f"{', '.join(fast.graph.applied) or 'none'}):")
    print(fast.graph)
    print("warm-up (untimed): one query per side")
    for name in SIDES:
        runners[name].invoke(WARMUP)
    questions = QUESTIONS[: args.queries]
    print(f"timing {len(questions)} questions (prefix cache cleared before every timed run):")
    results = measure(engine, runners, questions, args.batch_repeats)
    print_trace(fast, results["agentrt"].trace)
    engine.close()

    print()
    print_table(results, len(questions))
    same = check_outputs(results, questions)
    print(f"load average at the end: {load_average()} (other processes share these 2 cores: "
          "absolute times are noisy; the ratio compares runs made side by side)")
    print(f"{time.perf_counter() - started:.0f} s in all; command: {shlex.join(sys.orig_argv)}")
    if not same:
        sys.exit("FAILED: LangChain and agentrt produced different greedy outputs (see above)")


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
