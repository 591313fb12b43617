"""Map-reduce summarisation as one LCEL chain: LangChain + HF transformers, LangChain +
ChatAgentRT, and agentrt's compile(chain), side by side.

The document is a real long text: a standard-library module's docstring (``--module``, from
the corpus ``agentrt_tools.rag`` indexes), cut to the first ``--chunks`` pieces of about
``--chunk-tokens`` tokens. The chain is ordinary LangChain code, built by
``build_chain(map_llm, reduce_llm, ...)`` around whichever chat models are given:

    split     = RecursiveCharacterTextSplitter.from_huggingface_tokenizer(tokenizer, ...)
    summarise = PromptTemplate("Summarise in one sentence: {chunk}") | map_llm (max M tokens)
                | StrOutputParser()
    reduce    = PromptTemplate("Combine these summaries into one short paragraph: ...")
                | reduce_llm (max R tokens) | StrOutputParser()
    chain     = split.split_text | summarise.map() | bullet list | reduce

The model is SmolLM2-135M-Instruct, float32, greedy, on every side. Three sides:

- LangChain + HF transformers — what a LangChain user runs today (see
  /work/shared/PEERS.md): the same chain built with
  ``ChatHuggingFace(llm=HuggingFacePipeline(transformers.pipeline("text-generation", ...)))``
  (agent_langchain.py's backend (a), via ``_hf_peer.py``; the weights are agentrt's float32
  safetensors of the same GGUF), run by ``chain.invoke(document)``; ``.map()`` runs the map
  calls on LangChain's thread pool over the one model. ``HuggingFacePipeline`` takes its token
  limit when built, so each step gets its own pipeline over that model: ``max_new_tokens`` M
  for the map calls, R for the reduce — the same limits as the other sides;
- LangChain + ChatAgentRT — the same chain with ``ChatAgentRT`` over one ``agentrt.Engine``
  (``llm.bind(max_tokens=M)``, ``llm.bind(max_tokens=R)``), run by LangChain's
  ``chain.invoke(document)`` (``.map()`` batches the map calls on its thread pool);
- agentrt (lowered) — that same ChatAgentRT chain object through
  ``agentrt.graph.compile(chain).invoke(document)``: lowered to agentrt's primitive graph and
  run by its graph runtime (printed below).

Two ratios: "HF / agentrt-lowered" is what a user gains by switching; "LangChain+ChatAgentRT /
agentrt-lowered" is what the lowering itself adds (both ChatAgentRT sides run on agentrt's
engine). Each is set against the issue's target (>= 1.5x).

Every side runs one untimed warm-up, then ``--repeats`` timed runs each, rotating which side
goes first; the engine's prefix cache is cleared before every timed run, so no side reuses
another's KV (HF has no prefix cache). Latency is wall time (``time.perf_counter``) of
``invoke``. Tokens: for the ChatAgentRT sides, deltas of the engine's counters over the call;
for HF, the tokens every ``model.generate`` call received (its prompt: all of it is
prefilled) and produced (counted as the engine counts decode: all generated tokens but the
last of each reply). The greedy summaries of the two ChatAgentRT sides must be identical (the
run fails otherwise); HF's are compared with agentrt's and the differences reported (float
summation order can flip a token over a long output), without failing the run.

Benchmark-only dependency (like llama-cpp-python for engine.py): ``langchain-huggingface``
(``pip install langchain-huggingface``), for the HF side; ``--skip-hf`` runs without it.

    python benchmarks/map_reduce.py                      # re's docstring, 6 chunks of ~115 tokens
    python benchmarks/map_reduce.py --chunks 4 --repeats 1 --module configparser
    python benchmarks/map_reduce.py --skip-hf            # only the two ChatAgentRT sides
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

TARGET = 1.5
"""The issue's target: agentrt end-to-end latency ≥ 1.5× better than LangChain's."""
SIDES = ("hf", "langchain", "agentrt")
LABELS = {"hf": "LangChain + HF transformers", "langchain": "LangChain + ChatAgentRT",
          "agentrt": "agentrt (lowered)"}
SHORT = {"hf": "LC+HF", "langchain": "LC+ChatAgentRT", "agentrt": "agentrt"}
RATIOS = {"hf": "HF / agentrt-lowered", "langchain": "LangChain+ChatAgentRT / agentrt-lowered"}
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


def build_chain(map_llm: Runnable, reduce_llm: Runnable,
                splitter: RecursiveCharacterTextSplitter) -> Runnable:
    """split → summarise each chunk (``.map()``) → combine the summaries, around the given chat
    models (each already limited to its step's token budget)."""
    summarise = PromptTemplate.from_template(MAP_PROMPT) | map_llm | StrOutputParser()
    reduce_ = PromptTemplate.from_template(REDUCE_PROMPT) | reduce_llm | StrOutputParser()

    def split(document: str) -> list[str]:
        return splitter.split_text(document)

    def bullets(summaries: list[str]) -> dict[str, str]:
        return {"summaries": "\n".join(f"- {s.strip()}" for s in summaries)}
    return RunnableLambda(split) | summarise.map() | RunnableLambda(bullets) | reduce_


# --- measurement -----------------------------------------------------------------------------
Counters = Callable[[], tuple[int, int, int]]
"""A side's running totals: (prefill tokens computed, prefix-cache hit tokens, decode tokens)."""


@dataclass(frozen=True)
class Run:
    seconds: float
    output: str
    num_prefill: int
    num_cached: int
    num_decode: int


def timed(engine: Engine, counters: Counters, call: Callable[[], Any]) -> Run:
    """Run ``call`` on a cold prefix cache: wall time, output and the counters' deltas."""
    engine.clear_prefix_cache()
    before = counters()
    start = time.perf_counter()
    out = call()
    seconds = time.perf_counter() - start
    prefill, cached, decode = (b - a for a, b in zip(before, counters(), strict=True))
    return Run(seconds, out, prefill, cached, decode)


def measure(engine: Engine, runners: dict[str, Any], counters: dict[str, Counters],
            document: str, repeats: int) -> dict[str, list[Run]]:
    sides = [s for s in SIDES if s in runners]
    runs: dict[str, list[Run]] = {name: [] for name in sides}
    for i in range(repeats):
        k = i % len(sides)
        for name in sides[k:] + sides[:k]:  # the side that goes first rotates
            run = timed(engine, counters[name], lambda r=runners[name]: r.invoke(document))
            runs[name].append(run)
            print(f"  [{i + 1}/{repeats}] {SHORT[name]:<14} {run.seconds:6.2f} s  "
                  f"{run.output[:60]!r}", flush=True)
    return runs


# --- report ----------------------------------------------------------------------------------
def print_table(runs: dict[str, list[Run]], repeats: int) -> None:
    keys = [k for k in SIDES if k in runs]
    peers = [k for k in ("hf", "langchain") if k in runs]
    header = [""] + [LABELS[k] for k in keys]
    for k in peers:
        header += [RATIOS[k], "target"]
    secs = {k: statistics.median(r.seconds for r in runs[k]) for k in keys}
    row = [f"latency, median of {repeats}"] + [f"{secs[k]:.2f} s" for k in keys]
    for k in peers:
        ratio = secs[k] / secs["agentrt"]
        row += [f"{ratio:.2f}×", f"≥ {TARGET:.1f}× ({'met' if ratio >= TARGET else 'not met'})"]
    rows = [header, row]
    for label, attr in (("prefill tokens computed (last run)", "num_prefill"),
                        ("prefix-cache hit tokens (last run)", "num_cached"),
                        ("decode tokens (last run)", "num_decode")):
        # HF has no prefix cache
        vals = {k: None if k == "hf" and attr == "num_cached" else getattr(runs[k][-1], attr)
                for k in keys}
        row = [label] + ["—" if vals[k] is None else f"{vals[k]:,}" for k in keys]
        for k in peers:
            a, b = vals[k], vals["agentrt"]
            row += ["—" if a is None or not b else f"{a / b:.2f}×", ""]
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for k, row in enumerate(rows):
        cells = [c.ljust(w) if i == 0 else c.rjust(w)
                 for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        print("| " + " | ".join(cells) + " |")
        if k == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    print("A ratio > 1 means agentrt (lowered) is faster (less time, or fewer tokens).")
    if "hf" in runs:
        print("HF has no prefix cache: its prefill tokens are the sum of the prompts every "
              "model.generate call received. Decode tokens, every side: tokens fed through a "
              "decode step (all generated tokens but the last of each reply).")


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


def first_difference(a: str, b: str, count_tokens: Callable[[str], int]) -> str:
    """Where ``a`` and ``b`` first differ: character offset, tokens of the common prefix, and
    both texts from a little before there."""
    i = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
             min(len(a), len(b)))
    lo = max(0, i - 20)
    return (f"at character {i} (after {count_tokens(a[:i])} tokens of common text): "
            f"…{a[lo:i + 40]!r} vs agentrt …{b[lo:i + 40]!r}")


def check_outputs(runs: dict[str, list[Run]], count_tokens: Callable[[str], int]) -> bool:
    """LangChain+ChatAgentRT vs agentrt-lowered must be identical: print every mismatch and
    return False if any. HF vs agentrt-lowered: report how many match and where they differ."""
    pairs = list(zip(runs["langchain"], runs["agentrt"], strict=True))
    bad = [(i, a.output, b.output) for i, (a, b) in enumerate(pairs) if a.output != b.output]
    for i, a, b in bad:
        print(f"MISMATCH (run {i + 1}):\n  LangChain+ChatAgentRT: {a!r}\n"
              f"  agentrt (lowered):     {b!r}")
    print(f"greedy summaries identical, LangChain+ChatAgentRT vs agentrt (lowered): "
          f"{len(pairs) - len(bad)}/{len(pairs)} runs")
    if "hf" in runs:
        pairs = list(zip(runs["hf"], runs["agentrt"], strict=True))
        diff = [(i, a.output, b.output) for i, (a, b) in enumerate(pairs)
                if a.output != b.output]
        print(f"greedy summaries identical, LangChain + HF transformers vs agentrt (lowered): "
              f"{len(pairs) - len(diff)}/{len(pairs)} runs"
              + (f"; {len(diff)} differ (reported, not a failure):" if diff else ""))
        for i, a, b in diff:
            print(f"  HF differs (run {i + 1}) {first_difference(a, b, count_tokens)}")
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
                   help="max tokens of each map (summarise) call (default: %(default)s)")
    p.add_argument("--reduce-tokens", type=int, default=48,
                   help="max tokens of the reduce call (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=2,
                   help="timed runs per side; latency is their median (default: %(default)s)")
    p.add_argument("--quantization", default="none", choices=("none", "int8", "int4"),
                   help="agentrt's weight format (int4 = the GGUF's own Q4_1 groups: the same "
                        "weights HF runs dequantized, so greedy outputs stay identical)")
    p.add_argument("--skip-hf", action="store_true",
                   help="skip the LangChain + HF transformers side (the slowest: ~15-18 tok/s)")
    args = p.parse_args(argv)
    if args.chunks < 1 or args.repeats < 1 or args.chunk_tokens < 8:
        p.error("need --chunks >= 1, --repeats >= 1, --chunk-tokens >= 8")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.perf_counter()
    print(f"command: {shlex.join(sys.orig_argv)}")
    print(f"load average at the start: {load_average()}")
    engine = Engine(dtype="float32", quantization=args.quantization)
    llm = ChatAgentRT(engine=engine)
    splitter = make_splitter(engine.tokenizer, args.chunk_tokens)
    document = build_document(splitter, args.module, args.chunks)
    sizes = [len(engine.tokenizer.encode(c, add_special_tokens=False))
             for c in splitter.split_text(document)]
    chain = build_chain(llm.bind(max_tokens=args.map_tokens),
                        llm.bind(max_tokens=args.reduce_tokens), splitter)
    fast = compile_graph(chain)
    runners: dict[str, Any] = {"langchain": chain, "agentrt": fast}  # the same protocol: invoke

    def engine_counters() -> tuple[int, int, int]:
        s = engine.stats
        return s.num_prefill_tokens, s.num_cached_tokens, s.num_decode_tokens

    def count_tokens(text: str) -> int:
        return len(engine.tokenizer.encode(text, add_special_tokens=False))
    counters: dict[str, Counters] = {"langchain": engine_counters, "agentrt": engine_counters}
    print(f"engine: agentrt, SmolLM2-135M-Instruct float32 (quantization: {args.quantization}), "
          f"greedy; document: {args.module}'s "
          f"docstring, {len(sizes)} chunks of {', '.join(map(str, sizes))} tokens; max tokens "
          f"(every side): map {args.map_tokens}, reduce {args.reduce_tokens}")
    if args.skip_hf:
        print("LangChain + HF transformers: skipped (--skip-hf)")
    else:
        from importlib.metadata import version

        from _hf_peer import HFPeer

        hf = HFPeer(engine.core.model_path)
        runners["hf"] = build_chain(hf.chat(args.map_tokens), hf.chat(args.reduce_tokens),
                                    splitter)
        counters["hf"] = hf.counters
        print(f"peer: LangChain + HF transformers {version('transformers')} (torch "
              f"{version('torch')}, langchain-huggingface {version('langchain-huggingface')}), "
              f"float32 from {engine.core.model_path}, greedy, one pipeline per step")
    print("optimised agentrt graph (passes applied: "
          f"{', '.join(fast.graph.applied) or 'none'}):")
    print(fast.graph)
    print("warm-up (untimed): one run per side")
    for name in SIDES:
        if name in runners:
            runners[name].invoke(document)
    print(f"timing {args.repeats} run(s) per side (prefix cache cleared before every run):")
    runs = measure(engine, runners, counters, document, args.repeats)
    trace = list(fast.runtime.last_trace)

    print_trace(fast, trace)
    print()
    print_table(runs, args.repeats)
    same = check_outputs(runs, count_tokens)
    engine.close()
    print(f"load average at the end: {load_average()} (other processes share these 2 cores: "
          "absolute times are noisy; the ratios compare runs made side by side)")
    print(f"{time.perf_counter() - started:.0f} s in all; command: {shlex.join(sys.orig_argv)}")
    if not same:
        sys.exit("FAILED: LangChain+ChatAgentRT and agentrt (lowered) produced different greedy "
                 "summaries (see above)")


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
