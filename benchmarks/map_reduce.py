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
import statistics
from collections.abc import Sequence
from typing import Any

from _three_sides import (
    SHORT,
    SIDES,
    Counters,
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
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import PromptTemplate
from langchain_core.runnables import Runnable, RunnableLambda
from langchain_text_splitters import RecursiveCharacterTextSplitter

from agentrt import Engine
from agentrt.graph import compile as compile_graph
from agentrt_tools.search.corpus import stdlib_corpus
from langchain_agentrt import ChatAgentRT

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
def measure(engine: Engine, runners: dict[str, Any], counters: dict[str, Counters],
            document: str, repeats: int) -> dict[str, list[Run]]:
    sides = [s for s in SIDES if s in runners]
    runs: dict[str, list[Run]] = {name: [] for name in sides}
    for i in range(repeats):
        for name in rotated(sides, i):
            run = timed(engine, counters[name], lambda r=runners[name]: r.invoke(document))
            runs[name].append(run)
            print(f"  [{i + 1}/{repeats}] {SHORT[name]:<14} {run.seconds:6.2f} s  "
                  f"{run.outputs[0][:60]!r}", flush=True)
    return runs


# --- report ----------------------------------------------------------------------------------
def print_table(runs: dict[str, list[Run]], repeats: int) -> None:
    table = Table(list(runs))
    table.latency(f"latency, median of {repeats}",
                  {k: statistics.median(r.seconds for r in rs) for k, rs in runs.items()})
    last = {k: rs[-1] for k, rs in runs.items()}
    table.count("prefill tokens computed (last run)", {k: r.num_prefill for k, r in last.items()})
    table.count("prefix-cache hit tokens (last run)",  # HF has no prefix cache
                {k: None if k == "hf" else r.num_cached for k, r in last.items()})
    table.count("decode tokens (last run)", {k: r.num_decode for k, r in last.items()})
    table.print()


def summary_pairs(runs: dict[str, list[Run]], side: str) -> list[tuple[str, str, str]]:
    """(label, ``side``'s summary, agentrt's summary) for every timed run."""
    return [(f"run {i + 1}", a.outputs[0], b.outputs[0])
            for i, (a, b) in enumerate(zip(runs[side], runs["agentrt"], strict=True))]


# --- main ------------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = doc_parser(__doc__)
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
    add_side_args(p)
    args = p.parse_args(argv)
    if args.chunks < 1 or args.repeats < 1 or args.chunk_tokens < 8:
        p.error("need --chunks >= 1, --repeats >= 1, --chunk-tokens >= 8")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    started = start()
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
    counters: dict[str, Counters] = dict.fromkeys(runners, engine_counters(engine))
    print(f"engine: agentrt, SmolLM2-135M-Instruct float32 (quantization: {args.quantization}), "
          f"greedy; document: {args.module}'s "
          f"docstring, {len(sizes)} chunks of {', '.join(map(str, sizes))} tokens; max tokens "
          f"(every side): map {args.map_tokens}, reduce {args.reduce_tokens}")
    if args.skip_hf:
        print("LangChain + HF transformers: skipped (--skip-hf)")
    else:
        add_hf_side(engine, runners, counters, lambda hf: build_chain(
            hf.chat(args.map_tokens), hf.chat(args.reduce_tokens), splitter))
    print("optimised agentrt graph (passes applied: "
          f"{', '.join(fast.graph.applied) or 'none'}):")
    print(fast.graph)
    print("warm-up (untimed): one run per side")
    warm_up(runners, SIDES, document)
    print(f"timing {args.repeats} run(s) per side (prefix cache cleared before every run):")
    runs = measure(engine, runners, counters, document, args.repeats)
    print_trace(fast, list(fast.runtime.last_trace), "its last run")
    print()
    print_table(runs, args.repeats)
    pairs = {side: summary_pairs(runs, side) for side in ("hf", "langchain") if side in runs}
    same = check_outputs(pairs, "summaries", lambda text: len(
        engine.tokenizer.encode(text, add_special_tokens=False)))
    engine.close()
    finish(started, same)


if __name__ == "__main__":
    main()
