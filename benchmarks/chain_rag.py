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
SIDES = ("hf", "langchain", "agentrt")
LABELS = {"hf": "LangChain + HF transformers", "langchain": "LangChain + ChatAgentRT",
          "agentrt": "agentrt (lowered)"}
SHORT = {"hf": "LC+HF", "langchain": "LC+ChatAgentRT", "agentrt": "agentrt"}
RATIOS = {"hf": "HF / agentrt-lowered", "langchain": "LangChain+ChatAgentRT / agentrt-lowered"}


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
Counters = Callable[[], tuple[int, int, int]]
"""A side's running totals: (prefill tokens computed, prefix-cache hit tokens, decode tokens)."""


@dataclass(frozen=True)
class Run:
    """One timed call: wall seconds, its outputs and the side's counters' deltas."""

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


def timed(engine: Engine, counters: Counters, call: Callable[[], Any]) -> Run:
    """Run ``call`` on a cold prefix cache; its wall time, outputs and counter deltas."""
    engine.clear_prefix_cache()
    before = counters()
    start = time.perf_counter()
    out = call()
    seconds = time.perf_counter() - start
    prefill, cached, decode = (b - a for a, b in zip(before, counters(), strict=True))
    return Run(seconds, out if isinstance(out, list) else [out], prefill, cached, decode)


def rotated(sides: Sequence[str], i: int) -> list[str]:
    k = i % len(sides)
    return [*sides[k:], *sides[:k]]


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
    keys = [k for k in SIDES if k in results]
    peers = [k for k in ("hf", "langchain") if k in results]
    ag = results["agentrt"]
    header = [""] + [LABELS[k] for k in keys]
    for k in peers:
        header += [RATIOS[k], "target"]
    rows = [header]

    def latency(label: str, value: Callable[[SideResult], float]) -> None:
        row = [label] + [f"{value(results[k]):.2f} s" for k in keys]
        for k in peers:
            ratio = value(results[k]) / value(ag)
            verdict = "met" if ratio >= TARGET else "not met"
            row += [f"{ratio:.2f}×", f"≥ {TARGET:.1f}× ({verdict})"]
        rows.append(row)

    def count(label: str, value: Callable[[str, SideResult], float | None]) -> None:
        vals = {k: value(k, results[k]) for k in keys}
        row = [label] + ["—" if vals[k] is None else f"{vals[k]:,.0f}" for k in keys]
        for k in peers:
            a, b = vals[k], vals["agentrt"]
            row += ["—" if a is None or not b else f"{a / b:.2f}×", ""]
        rows.append(row)

    def cached(value: Callable[[SideResult], float]) -> Callable[[str, SideResult], float | None]:
        return lambda k, r: None if k == "hf" else value(r)  # HF has no prefix cache

    batched = all(results[k].batches for k in keys)
    latency(f"latency per query, sequential (mean of {n})", lambda r: r.mean("seconds"))
    if batched:
        k = len(ag.batches)
        latency(f"batch of {n}, wall (all done; median of {k})", lambda r: r.batch_seconds)
        latency(f"batch of {n}, per query", lambda r: r.batch_seconds / n)
    count("prefill tokens computed per query (seq.)", lambda k, r: r.mean("num_prefill"))
    count("prefix-cache hit tokens per query (seq.)", cached(lambda r: r.mean("num_cached")))
    count("decode tokens per query (seq.)", lambda k, r: r.mean("num_decode"))
    if batched:
        count(f"prefill tokens computed, batch of {n} (last)",
              lambda k, r: r.batches[-1].num_prefill)
        count(f"prefix-cache hit tokens, batch of {n} (last)",
              cached(lambda r: r.batches[-1].num_cached))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for k, row in enumerate(rows):
        cells = [c.ljust(w) if i == 0 else c.rjust(w)
                 for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        print("| " + " | ".join(cells) + " |")
        if k == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    print("A ratio > 1 means agentrt (lowered) is faster (less time, or fewer tokens).")
    if "hf" in results:
        print("HF has no prefix cache: its prefill tokens are the sum of the prompts every "
              "model.generate call received. Decode tokens, every side: tokens fed through a "
              "decode step (all generated tokens but the last of each reply).")


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


def answer_pairs(results: dict[str, SideResult], side: str) -> list[tuple[str, str, str]]:
    """(label, ``side``'s answer, agentrt's answer) for every timed question."""
    x, ag = results[side], results["agentrt"]
    pairs = [(f"sequential q{i + 1}", a.outputs[0], b.outputs[0])
             for i, (a, b) in enumerate(zip(x.sequential, ag.sequential, strict=True))]
    for j, (u, v) in enumerate(zip(x.batches, ag.batches, strict=True)):
        pairs += [(f"batch {j + 1} q{i + 1}", a, b)
                  for i, (a, b) in enumerate(zip(u.outputs, v.outputs, strict=True))]
    return pairs


def first_difference(a: str, b: str, count_tokens: Callable[[str], int]) -> str:
    """Where ``a`` and ``b`` first differ: character offset, tokens of the common prefix, and
    both texts from a little before there."""
    i = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    lo = max(0, i - 20)
    return (f"at character {i} (after {count_tokens(a[:i])} tokens of common text): "
            f"…{a[lo:i + 40]!r} vs agentrt …{b[lo:i + 40]!r}")


def check_outputs(results: dict[str, SideResult], count_tokens: Callable[[str], int]) -> bool:
    """LangChain+ChatAgentRT vs agentrt-lowered must be identical: print every mismatch and
    return False if any. HF vs agentrt-lowered: report how many match and where they differ."""
    pairs = answer_pairs(results, "langchain")
    bad = [(label, a, b) for label, a, b in pairs if a != b]
    for label, a, b in bad:
        print(f"MISMATCH ({label}):\n  LangChain+ChatAgentRT: {a!r}\n"
              f"  agentrt (lowered):     {b!r}")
    print(f"greedy answers identical, LangChain+ChatAgentRT vs agentrt (lowered): "
          f"{len(pairs) - len(bad)}/{len(pairs)}")
    if "hf" in results:
        pairs = answer_pairs(results, "hf")
        diff = [(label, a, b) for label, a, b in pairs if a != b]
        print(f"greedy final answers identical, LangChain + HF transformers vs agentrt "
              f"(lowered): {len(pairs) - len(diff)}/{len(pairs)}"
              + (f"; {len(diff)} differ (reported, not a failure):" if diff else ""))
        for label, a, b in diff:
            print(f"  HF differs ({label}) {first_difference(a, b, count_tokens)}")
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
                   help="max tokens of the query-expansion call (default: %(default)s)")
    p.add_argument("--synthesis-tokens", type=int, default=48,
                   help="max tokens of the synthesis call (default: %(default)s)")
    p.add_argument("--quantization", default="none", choices=("none", "int8", "int4"),
                   help="agentrt's weight format (int4 = the GGUF's own Q4_1 groups: the same "
                        "weights HF runs dequantized, so greedy outputs stay identical)")
    p.add_argument("--skip-hf", action="store_true",
                   help="skip the LangChain + HF transformers side (the slowest: ~15-18 tok/s)")
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
    engine = Engine(dtype="float32", quantization=args.quantization)
    llm = ChatAgentRT(engine=engine, max_tokens=args.synthesis_tokens)
    retriever = VectorIndexRetriever(index=default_index(args.docs), k=args.k)
    chain = build_chain(llm.bind(max_tokens=args.expansion_tokens), llm, retriever, args)
    fast = compile_graph(chain)
    # the same call protocol on every side: invoke / batch
    runners: dict[str, Any] = {"langchain": chain, "agentrt": fast}

    def engine_counters() -> tuple[int, int, int]:
        s = engine.stats
        return s.num_prefill_tokens, s.num_cached_tokens, s.num_decode_tokens

    def count_tokens(text: str) -> int:
        return len(engine.tokenizer.encode(text, add_special_tokens=False))
    counters: dict[str, Counters] = {"langchain": engine_counters, "agentrt": engine_counters}
    print(f"engine: agentrt, {engine.config.model or 'SmolLM2-135M-Instruct'} float32 "
          f"(quantization: {args.quantization}), greedy; "
          f"index: faiss over {args.docs} corpus chunks, k={args.k} per expanded query; "
          f"max tokens (every side): expansion {args.expansion_tokens}, synthesis "
          f"{args.synthesis_tokens}")
    if args.skip_hf:
        print("LangChain + HF transformers: skipped (--skip-hf)")
    else:
        from importlib.metadata import version

        from _hf_peer import HFPeer

        hf = HFPeer(engine.core.model_path)
        runners["hf"] = build_chain(hf.chat(args.expansion_tokens), hf.chat(args.synthesis_tokens),
                                    retriever, args)
        counters["hf"] = hf.counters
        print(f"peer: LangChain + HF transformers {version('transformers')} (torch "
              f"{version('torch')}, langchain-huggingface {version('langchain-huggingface')}), "
              f"float32 from {engine.core.model_path}, greedy, one pipeline per step")
    print("optimised agentrt graph (passes applied: "
          f"{', '.join(fast.graph.applied) or 'none'}):")
    print(fast.graph)
    print("warm-up (untimed): one query per side")
    for name in SIDES:
        if name in runners:
            runners[name].invoke(WARMUP)
    questions = QUESTIONS[: args.queries]
    print(f"timing {len(questions)} questions (prefix cache cleared before every timed run):")
    results = measure(engine, runners, counters, questions, args.batch_repeats)
    print_trace(fast, results["agentrt"].trace)

    print()
    print_table(results, len(questions))
    same = check_outputs(results, count_tokens)
    engine.close()
    print(f"load average at the end: {load_average()} (other processes share these 2 cores: "
          "absolute times are noisy; the ratios compare runs made side by side)")
    print(f"{time.perf_counter() - started:.0f} s in all; command: {shlex.join(sys.orig_argv)}")
    if not same:
        sys.exit("FAILED: LangChain+ChatAgentRT and agentrt (lowered) produced different greedy "
                 "outputs (see above)")


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
