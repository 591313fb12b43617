"""N agents behind one long system prompt: prefill without prefix sharing vs agentrt's sharing.

Each of N agents (``--agents``, default 1,4,16) sends one chat request: the same ~1,000-token
system prompt (real text: standard-library docstrings, ``agentrt_tools.rag.chunk_corpus()``)
and its own short question; greedy, ``--max-tokens`` (16) new tokens each. The shared prefix
P is the longest common token prefix of all the prompts (the system turn and the user
turn's opening); every prompt is P plus a short suffix.

- without sharing: an engine built with ``EngineConfig(enable_prefix_cache=False)`` (the
  option is a frozen config field: it is set at construction), the N requests submitted
  together (``Engine.generate(prompts)``, continuous batching): N × the full prompt is
  prefilled;
- with sharing (agentrt's path): an engine with the prefix cache on; the shared prefix is
  filled once (``generate(P, SamplingParams(max_tokens=1))`` leaves its KV pages in the
  radix cache: Parrot's Fill into a parent context) and then the N requests are submitted
  together; each adopts the cached prefix and prefills only its own suffix. The fill is part
  of the timed work. (A Parrot-style semantic-function API, ``agentrt.semantic``, was
  not in this tree when this benchmark was written, so it drives the engine directly.)

Both engines are built once, warmed up with one untimed request, and measured alternately
(which side goes first alternates from one timed pair to the next); the prefix cache of the
sharing engine is cleared before every timed run. Reported per N and side: prefill tokens computed,
prefix-cache hit tokens and decode tokens (deltas of ``engine.stats``), the wall time until
all N requests are done (median of ``--repeats``), and the shared-prefix work per agent:
``(computed − Σ suffix tokens) / N`` — P for every N without sharing, ideally P / N with it
(Parrot's target: prefill work of the shared part ∝ 1/N). The greedy tokens of every agent
must be identical on both sides.

    python benchmarks/shared_prefix.py                     # N = 1, 4, 16
    python benchmarks/shared_prefix.py --agents 4 --repeats 1 --prefix-tokens 600
"""

from __future__ import annotations

import argparse
import gc
import os
import shlex
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from agentrt import Engine, RequestOutput, SamplingParams
from agentrt_tools.rag import chunk_corpus

QUESTIONS = (
    "Which module in the reference parses command-line options?",
    "Name one function the reference mentions.",
    "What does the reference say about JSON?",
    "Summarise the reference in five words.",
    "Is the reference about Python or Java?",
    "Which module handles heaps?",
    "What is a docstring?",
    "Give one example of a module named in the reference.",
    "Does the reference mention regular expressions?",
    "What is the first module described?",
    "Which word appears most often in the reference?",
    "How many modules does the reference describe?",
    "Who is the reference written for?",
    "What does the typing module provide?",
    "Name a module for comparing sequences.",
    "What would you read to learn about collections?",
)


# --- workload --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Workload:
    prompts: list[list[int]]
    """One chat prompt per agent (token ids), ``len(QUESTIONS)`` of them."""
    prefix: list[int]
    """The longest common token prefix of all the prompts."""
    num_system_tokens: int
    """Tokens of the system prompt's text alone."""

    def suffix_tokens(self, n: int) -> int:
        """Σ of the first ``n`` prompts' tokens after the shared prefix."""
        return sum(len(p) - len(self.prefix) for p in self.prompts[:n])


def build_workload(tokenizer, prefix_tokens: int) -> Workload:
    """A system prompt of at least ``prefix_tokens`` tokens of docstring text, one chat
    prompt per question."""
    parts, n = [], 0
    for chunk in chunk_corpus():
        parts.append(chunk)
        n += len(tokenizer.encode(chunk + "\n\n", add_special_tokens=False))
        if n >= prefix_tokens:
            break
    reference = "\n\n".join(parts)
    system = ("You are a helpful assistant. Answer the user's question in one short sentence, "
              f"using this reference:\n\n{reference}")
    prompts = []
    for question in QUESTIONS:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                             tokenize=False)
        prompts.append(tokenizer.encode(text, add_special_tokens=False))
    prefix = prompts[0]
    for p in prompts[1:]:
        k = 0
        while k < min(len(prefix), len(p)) and prefix[k] == p[k]:
            k += 1
        prefix = prefix[:k]
    return Workload(prompts, prefix, len(tokenizer.encode(system, add_special_tokens=False)))


# --- the two sides: one call shape -------------------------------------------------------------
class Side(Protocol):
    name: str
    engine: Engine

    def run(self, prompts: list[list[int]]) -> list[RequestOutput]:
        """All ``prompts`` at once; returns when every one is done."""
        ...


class NoSharing:
    """The baseline: every request prefills its whole prompt."""

    name = "no sharing"

    def __init__(self, params: SamplingParams) -> None:
        self.engine = Engine(dtype="float32", enable_prefix_cache=False)
        self.params = params

    def run(self, prompts: list[list[int]]) -> list[RequestOutput]:
        return self.engine.generate(prompts, self.params)


class Sharing:
    """agentrt: fill the shared prefix once into the radix cache, then fork the N requests."""

    name = "agentrt sharing"

    def __init__(self, params: SamplingParams, prefix: list[int], backend: str) -> None:
        self.engine = Engine(dtype="float32", attention_backend=backend)
        self.params, self.prefix = params, prefix

    def run(self, prompts: list[list[int]]) -> list[RequestOutput]:
        self.engine.generate(self.prefix, SamplingParams(max_tokens=1))
        return self.engine.generate(prompts, self.params)


# --- measurement -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Run:
    seconds: float
    outputs: list[list[int]]
    texts: list[str]
    num_prefill: int
    num_cached: int
    num_decode: int


def timed(side: Side, prompts: list[list[int]]) -> Run:
    """One run on a cold prefix cache: wall time until all done, and counter deltas."""
    side.engine.clear_prefix_cache()
    s = side.engine.stats
    before = (s.num_prefill_tokens, s.num_cached_tokens, s.num_decode_tokens)
    start = time.perf_counter()
    outs = side.run(prompts)
    seconds = time.perf_counter() - start
    prefill, cached, decode = (b - a for a, b in zip(
        before, (s.num_prefill_tokens, s.num_cached_tokens, s.num_decode_tokens), strict=True))
    return Run(seconds, [list(o.token_ids) for o in outs], [o.text for o in outs],
               prefill, cached, decode)


def measure(sides: list[Side], work: Workload, agents: Sequence[int], repeats: int
            ) -> dict[tuple[int, str], list[Run]]:
    """``repeats`` runs per N and side; the side going first alternates run by run."""
    runs: dict[tuple[int, str], list[Run]] = {}
    for j, n in enumerate(agents):
        for i in range(repeats):
            for side in sides if (i + j) % 2 == 0 else sides[::-1]:
                run = timed(side, work.prompts[:n])
                runs.setdefault((n, side.name), []).append(run)
                print(f"  N={n:<3} {side.name:<16} {run.seconds:6.2f} s  prefill "
                      f"{run.num_prefill:>6}  cached {run.num_cached:>6}", flush=True)
    return runs


# --- report ----------------------------------------------------------------------------------
def print_table(runs: dict[tuple[int, str], list[Run]], work: Workload, agents: Sequence[int],
                names: list[str]) -> None:
    base, ours = names
    p = len(work.prefix)
    rows = [["N", "side", "prefill computed", "cache hits", "decode", "computed / agent",
             "shared-prefix work / agent", "wall (all N done)"]]
    for n in agents:
        seconds = {}
        for name in names:
            run = runs[(n, name)][-1]
            seconds[name] = statistics.median(r.seconds for r in runs[(n, name)])
            prefix_work = (run.num_prefill - work.suffix_tokens(n)) / n
            rows.append([str(n), name, f"{run.num_prefill:,}", f"{run.num_cached:,}",
                         f"{run.num_decode:,}", f"{run.num_prefill / n:,.0f}",
                         f"{prefix_work:,.0f}", f"{seconds[name]:.2f} s"])
        a, b = runs[(n, base)][-1].num_prefill, runs[(n, ours)][-1].num_prefill
        rows.append([str(n), f"{base} / {ours}", f"{a / b:.2f}×", "", "", "",
                     f"ideal P/N = {p / n:,.0f}", f"{seconds[base] / seconds[ours]:.2f}×"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for k, row in enumerate(rows):
        cells = [c.ljust(w) if i < 2 else c.rjust(w)
                 for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        print("| " + " | ".join(cells) + " |")
        if k == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    print(f"P = {p} shared prefix tokens; prompts {min(map(len, work.prompts))}–"
          f"{max(map(len, work.prompts))} tokens. shared-prefix work / agent = (computed − Σ "
          "suffix tokens) / N: P for every N without sharing; target ∝ 1/N with sharing (the "
          "cache shares whole KV blocks, so each request may recompute < block_size prefix "
          "tokens). Ratios: no sharing / agentrt (> 1: agentrt does less / is faster).")


def check_outputs(runs: dict[tuple[int, str], list[Run]], agents: Sequence[int],
                  names: list[str]) -> bool:
    """Compare every agent's tokens across the sides, run by run; print each mismatch."""
    base, ours = names
    same = total = 0
    for n in agents:
        for a_run, b_run in zip(runs[(n, base)], runs[(n, ours)], strict=True):
            for i, (a, b) in enumerate(zip(a_run.outputs, b_run.outputs, strict=True)):
                total += 1
                if a == b:
                    same += 1
                    continue
                print(f"MISMATCH (N={n}, agent {i}):\n  {base}: {a_run.texts[i]!r}\n"
                      f"  {ours}: {b_run.texts[i]!r}")
    print(f"greedy tokens identical on both sides: {same}/{total} (agent, run) pairs")
    return same == total


# --- main ------------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    doc = __doc__ or ""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n\n".join(doc.split("\n\n")[1:]))
    p.add_argument("--agents", default="1,4,16",
                   help=f"comma-separated N values, each 1..{len(QUESTIONS)} "
                        "(default: %(default)s)")
    p.add_argument("--prefix-tokens", type=int, default=1000,
                   help="tokens of reference text in the system prompt, at least "
                        "(default: %(default)s)")
    p.add_argument("--max-tokens", type=int, default=16,
                   help="new tokens per agent (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=1,
                   help="timed runs per N and side; the wall time is their median "
                        "(default: %(default)s)")
    p.add_argument("--attention-backend", default="torch",
                   help="attention backend of the sharing engine, e.g. torch_cascade (a "
                        "shared prefix attended once per group; default: %(default)s)")
    args = p.parse_args(argv)
    args.agents = [int(x) for x in args.agents.split(",") if x.strip()]
    if not args.agents or not all(1 <= n <= len(QUESTIONS) for n in args.agents):
        p.error(f"--agents values must be in 1..{len(QUESTIONS)}")
    if args.repeats < 1:
        p.error("--repeats must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.perf_counter()
    print(f"command: {shlex.join(sys.orig_argv)}")
    print(f"load average at the start: {load_average()}")
    params = SamplingParams(max_tokens=args.max_tokens)
    baseline = NoSharing(params)
    work = build_workload(baseline.engine.tokenizer, args.prefix_tokens)
    ours = Sharing(params, work.prefix, args.attention_backend)
    sides: list[Side] = [baseline, ours]
    print(f"model: SmolLM2-135M-Instruct float32, greedy, max_tokens {args.max_tokens}; system "
          f"prompt {work.num_system_tokens} tokens, shared prefix P = {len(work.prefix)} tokens; "
          f"sharing engine's attention backend: {args.attention_backend}")
    for side in sides:  # warm-up, untimed
        side.engine.generate(work.prompts[-1], params)
    print(f"timing N = {', '.join(map(str, args.agents))}, {args.repeats} repeat(s) each "
          "(prefix cache cleared before every run):")
    runs = measure(sides, work, args.agents, args.repeats)
    for side in sides:
        side.engine.close()
    del sides, baseline, ours
    gc.collect()

    print()
    names = [NoSharing.name, Sharing.name]
    print_table(runs, work, args.agents, names)
    same = check_outputs(runs, args.agents, names)
    print(f"load average at the end: {load_average()} (other processes share these 2 cores: "
          "times are noisy; token counts are exact)")
    print(f"{time.perf_counter() - started:.0f} s in all; command: {shlex.join(sys.orig_argv)}")
    if not same:
        sys.exit("FAILED: the two sides produced different greedy tokens (see above)")


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
