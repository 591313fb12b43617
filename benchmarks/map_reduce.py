"""Map-reduce summarisation as one LCEL chain: LangChain's own invoke vs agentrt's compile(chain).

The document is a real long text: a standard-library module's docstring (``--module``, from
the corpus ``agentrt_tools.rag`` indexes), cut to the first ``--chunks`` pieces of about
``--chunk-tokens`` tokens. The chain is ordinary LangChain code:

    split     = RecursiveCharacterTextSplitter.from_huggingface_tokenizer(tokenizer, ...)
    summarise = PromptTemplate("Summarise in one sentence: {chunk}") | llm(max_tokens=M)
                | StrOutputParser()
    reduce    = PromptTemplate("Combine these summaries into one short paragraph: ...")
                | llm(max_tokens=R) | StrOutputParser()
    chain     = split.split_text | summarise.map() | bullet list | reduce

The LLM is ``ChatAgentRT`` over one ``agentrt.Engine`` (SmolLM2-135M-Instruct, float32,
greedy). Both sides run the same chain object on the same engine:

- LangChain: ``chain.invoke(document)`` (``.map()`` batches the map calls on its thread pool);
- agentrt:   ``agentrt.graph.compile(chain).invoke(document)``, the chain lowered to agentrt's
  primitive graph and run by its graph runtime (printed below).

Both sides run one untimed warm-up, then ``--repeats`` timed runs each, alternating which
side goes first; the engine's prefix cache is cleared before every timed run, so neither
side reuses the other's KV. Latency is wall time (``time.perf_counter``) of ``invoke``;
prefill/cached/decode tokens are deltas of the engine's counters over the call. The greedy
summaries of both sides must be identical.

    python benchmarks/map_reduce.py                      # re's docstring, 6 chunks of ~115 tokens
    python benchmarks/map_reduce.py --chunks 4 --repeats 1 --module configparser
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import PromptTemplate
from langchain_core.runnables import Runnable, RunnableLambda
from langchain_text_splitters import RecursiveCharacterTextSplitter

from agentrt import Engine
from agentrt.graph import compile as compile_graph
from agentrt_tools.search.corpus import stdlib_corpus
from langchain_agentrt import ChatAgentRT

SIDES = ("LangChain", "agentrt")
MAP_PROMPT = "Summarise in one sentence: {chunk}"
REDUCE_PROMPT = ("Combine these summaries of parts of one document into one short "
                 "paragraph:\n{summaries}")


# --- the document and the chain --------------------------------------------------------------
def make_splitter(tokenizer, chunk_tokens: int) -> RecursiveCharacterTextSplitter:
    return RecursiveCharacterTextSplitter.from_huggingface_tokenizer(
        tokenizer, chunk_size=chunk_tokens, chunk_overlap=0)


def build_document(splitter: RecursiveCharacterTextSplitter, module: str, chunks: int) -> str:
    """The first ``chunks`` pieces of ``module``'s docstring, as one text that the splitter
    cuts into exactly those pieces."""
    texts = {doc.source.removeprefix("python stdlib: "): doc.text for doc in stdlib_corpus()}
    if module not in texts:
        raise SystemExit(f"--module {module!r} has no docstring in the corpus")
    pieces = splitter.split_text(texts[module])
    if len(pieces) < chunks:
        raise SystemExit(f"--module {module!r} gives only {len(pieces)} chunks; lower --chunks "
                         "or pick a longer module (e.g. re, configparser, aifc)")
    document = "\n\n".join(pieces[:chunks])
    if len(splitter.split_text(document)) != chunks:
        raise SystemExit("the document does not split back into --chunks pieces; try another "
                         "--module or --chunk-tokens")
    return document


def build_chain(llm: ChatAgentRT, splitter: RecursiveCharacterTextSplitter,
                args: argparse.Namespace) -> Runnable:
    """split → summarise each chunk (``.map()``) → combine the summaries."""
    summarise = (PromptTemplate.from_template(MAP_PROMPT)
                 | llm.bind(max_tokens=args.map_tokens) | StrOutputParser())
    reduce_ = (PromptTemplate.from_template(REDUCE_PROMPT)
               | llm.bind(max_tokens=args.reduce_tokens) | StrOutputParser())

    def split(document: str) -> list[str]:
        return splitter.split_text(document)

    def bullets(summaries: list[str]) -> dict[str, str]:
        return {"summaries": "\n".join(f"- {s.strip()}" for s in summaries)}
    return RunnableLambda(split) | summarise.map() | RunnableLambda(bullets) | reduce_


# --- measurement -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Run:
    seconds: float
    output: str
    num_prefill: int
    num_cached: int
    num_decode: int


def timed(engine: Engine, call: Callable[[], Any]) -> Run:
    """Run ``call`` on a cold prefix cache: wall time, output and the counters' deltas."""
    engine.clear_prefix_cache()
    s = engine.stats
    before = (s.num_prefill_tokens, s.num_cached_tokens, s.num_decode_tokens)
    start = time.perf_counter()
    out = call()
    seconds = time.perf_counter() - start
    prefill, cached, decode = (b - a for a, b in zip(
        before, (s.num_prefill_tokens, s.num_cached_tokens, s.num_decode_tokens), strict=True))
    return Run(seconds, out, prefill, cached, decode)


def measure(engine: Engine, runners: dict[str, Any], document: str, repeats: int
            ) -> dict[str, list[Run]]:
    runs: dict[str, list[Run]] = {name: [] for name in SIDES}
    for i in range(repeats):
        for name in SIDES if i % 2 == 0 else SIDES[::-1]:
            run = timed(engine, lambda r=runners[name]: r.invoke(document))
            runs[name].append(run)
            print(f"  [{i + 1}/{repeats}] {name:<9} {run.seconds:6.2f} s  {run.output[:60]!r}",
                  flush=True)
    return runs


# --- report ----------------------------------------------------------------------------------
def print_table(runs: dict[str, list[Run]], repeats: int) -> None:
    lc, ag = runs["LangChain"], runs["agentrt"]
    a, b = (statistics.median(r.seconds for r in rs) for rs in (lc, ag))
    rows = [["", "LangChain", "agentrt", "LangChain / agentrt"],
            [f"latency, median of {repeats}", f"{a:.2f} s", f"{b:.2f} s", f"{a / b:.2f}×"]]
    for label, attr in (("prefill tokens computed", "num_prefill"),
                        ("prefix-cache hit tokens", "num_cached"),
                        ("decode tokens", "num_decode")):
        x, y = getattr(lc[-1], attr), getattr(ag[-1], attr)
        rows.append([label, f"{x:,}", f"{y:,}", f"{x / y:.2f}×" if y else "—"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for k, row in enumerate(rows):
        cells = [c.ljust(w) if i == 0 else c.rjust(w)
                 for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        print("| " + " | ".join(cells) + " |")
        if k == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    print("LangChain / agentrt > 1 means agentrt is faster (less time, or fewer tokens).")


def print_trace(fast: Any, trace: list[tuple[str, float, float]]) -> None:
    if not trace:
        return
    nodes = {n.id: n for n in fast.graph}
    t0 = min(start for _, start, _ in trace)
    print("agentrt trace of its last run (op spans, s from the start):")
    for node_id, start, end in sorted(trace, key=lambda t: (t[1], t[2])):
        node = nodes.get(node_id)
        label = f"{node.kind.value} {node.name}" if node is not None else node_id
        print(f"  {node_id:<4} {label:<40} {start - t0:6.2f} → {end - t0:6.2f}  "
              f"({end - start:5.2f})")


def check_outputs(runs: dict[str, list[Run]]) -> bool:
    pairs = list(zip(runs["LangChain"], runs["agentrt"], strict=True))
    bad = [(i, a.output, b.output) for i, (a, b) in enumerate(pairs) if a.output != b.output]
    for i, a, b in bad:
        print(f"MISMATCH (run {i + 1}):\n  LangChain: {a!r}\n  agentrt:   {b!r}")
    print(f"greedy summaries identical on both sides: {len(pairs) - len(bad)}/{len(pairs)} runs")
    return not bad


# --- main ------------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    doc = __doc__ or ""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n\n".join(doc.split("\n\n")[1:]))
    p.add_argument("--chunks", type=int, default=6,
                   help="pieces the document is split into (map calls; default: %(default)s)")
    p.add_argument("--chunk-tokens", type=int, default=120,
                   help="splitter chunk size in model tokens (default: %(default)s)")
    p.add_argument("--module", default="re",
                   help="standard-library module whose docstring is the document "
                        "(default: %(default)s)")
    p.add_argument("--map-tokens", type=int, default=24,
                   help="max_tokens of each map (summarise) call (default: %(default)s)")
    p.add_argument("--reduce-tokens", type=int, default=48,
                   help="max_tokens of the reduce call (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=2,
                   help="timed runs per side; latency is their median (default: %(default)s)")
    args = p.parse_args(argv)
    if args.chunks < 1 or args.repeats < 1 or args.chunk_tokens < 8:
        p.error("need --chunks >= 1, --repeats >= 1, --chunk-tokens >= 8")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.perf_counter()
    print(f"command: {shlex.join(sys.orig_argv)}")
    print(f"load average at the start: {load_average()}")
    engine = Engine(dtype="float32")
    llm = ChatAgentRT(engine=engine)
    splitter = make_splitter(engine.tokenizer, args.chunk_tokens)
    document = build_document(splitter, args.module, args.chunks)
    sizes = [len(engine.tokenizer.encode(c, add_special_tokens=False))
             for c in splitter.split_text(document)]
    chain = build_chain(llm, splitter, args)
    fast = compile_graph(chain)
    runners = {"LangChain": chain, "agentrt": fast}  # the same call protocol: invoke
    print(f"engine: agentrt, SmolLM2-135M-Instruct float32, greedy; document: {args.module}'s "
          f"docstring, {len(sizes)} chunks of {', '.join(map(str, sizes))} tokens; max_tokens: "
          f"map {args.map_tokens}, reduce {args.reduce_tokens}")
    print("optimised agentrt graph (passes applied: "
          f"{', '.join(fast.graph.applied) or 'none'}):")
    print(fast.graph)
    print("warm-up (untimed): one run per side")
    for name in SIDES:
        runners[name].invoke(document)
    print(f"timing {args.repeats} run(s) per side (prefix cache cleared before every run):")
    runs = measure(engine, runners, document, args.repeats)
    trace = list(fast.runtime.last_trace)
    engine.close()

    print_trace(fast, trace)
    print()
    print_table(runs, args.repeats)
    same = check_outputs(runs)
    print(f"load average at the end: {load_average()} (other processes share these 2 cores: "
          "absolute times are noisy; the ratio compares runs made side by side)")
    print(f"{time.perf_counter() - started:.0f} s in all; command: {shlex.join(sys.orig_argv)}")
    if not same:
        sys.exit("FAILED: LangChain and agentrt produced different greedy summaries (see above)")


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
