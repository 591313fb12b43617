"""What the chain benchmarks (chain_rag.py, map_reduce.py) share: three sides run in one
process, timed the same way and reported in one table.

- ``hf``: the chain run by LangChain on Hugging Face transformers (``_hf_peer.py``);
- ``langchain``: the same chain run by LangChain on ``ChatAgentRT``;
- ``agentrt``: that ChatAgentRT chain through ``agentrt.graph.compile`` (lowered).

Every timed call starts on a cold prefix cache; each side's counters (prefill tokens
computed, prefix-cache hits, decode tokens) are read before and after it.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentrt import Engine
from agentrt.core.openmp import release_openmp_pool

TARGET = 1.5
"""The issue's target: agentrt end-to-end latency ≥ 1.5× better than LangChain's."""
SIDES = ("hf", "langchain", "agentrt")
LABELS = {"hf": "LangChain + HF transformers", "langchain": "LangChain + ChatAgentRT",
          "agentrt": "agentrt (lowered)"}
SHORT = {"hf": "LC+HF", "langchain": "LC+ChatAgentRT", "agentrt": "agentrt"}
RATIOS = {"hf": "HF / agentrt-lowered", "langchain": "LangChain+ChatAgentRT / agentrt-lowered"}
PEERS = ("hf", "langchain")

Counters = Callable[[], tuple[int, int, int]]
"""A side's running totals: (prefill tokens computed, prefix-cache hit tokens, decode tokens)."""
Pair = tuple[str, str, str]
"""(label, a side's output, agentrt's output) for one timed call."""


@dataclass(frozen=True)
class Run:
    """One timed call: wall seconds, its outputs and the side's counters' deltas."""

    seconds: float
    outputs: list[str]
    num_prefill: int
    num_cached: int
    num_decode: int


def doc_parser(doc: str | None) -> argparse.ArgumentParser:
    """A parser whose ``--help`` is the script's docstring: its first paragraph, then the rest."""
    paragraphs = (doc or "").split("\n\n")
    return argparse.ArgumentParser(description=paragraphs[0], epilog="\n\n".join(paragraphs[1:]),
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def add_side_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quantization", default="none", choices=("none", "int8", "int4"),
                   help="agentrt's weight format (int4 = the GGUF's own Q4_1 groups: the same "
                        "weights HF runs dequantized, so greedy outputs stay identical)")
    p.add_argument("--skip-hf", action="store_true",
                   help="skip the LangChain + HF transformers side (the slowest: ~15-18 tok/s)")


def engine_counters(engine: Engine) -> Counters:
    def read() -> tuple[int, int, int]:
        s = engine.stats
        return s.num_prefill_tokens, s.num_cached_tokens, s.num_decode_tokens
    return read


def add_hf_side(engine: Engine, runners: dict[str, Any], counters: dict[str, Counters],
                build: Callable[[Any], Any]) -> None:
    """Add the ``hf`` side: ``build(peer)`` makes the chain from an :class:`HFPeer`."""
    from importlib.metadata import version

    from _hf_peer import HFPeer

    hf = HFPeer(engine.model_info.path)
    runners["hf"], counters["hf"] = build(hf), hf.counters
    print(f"peer: LangChain + HF transformers {version('transformers')} (torch "
          f"{version('torch')}, langchain-huggingface {version('langchain-huggingface')}), "
          f"float32 from {engine.model_info.path}, greedy, one pipeline per step")


def warm_up(runners: dict[str, Any], sides: Sequence[str], value: Any) -> None:
    """One untimed ``invoke(value)`` per side (models loaded, kernels warm)."""
    for name in sides:
        if name in runners:
            runners[name].invoke(value)
            release_openmp_pool()  # see timed()


def timed(engine: Engine, counters: Counters, call: Callable[[], Any]) -> Run:
    """Run ``call`` on a cold prefix cache; its wall time, outputs and counter deltas."""
    engine.clear_prefix_cache()
    before = counters()
    start = time.perf_counter()
    out = call()
    seconds = time.perf_counter() - start
    # NOTE: HF's generate leaves an OpenMP pool in this thread, and while any thread holds one
    # libgomp throttles every pool's spin-wait: the next side's engine thread would pay for it
    release_openmp_pool()
    prefill, cached, decode = (b - a for a, b in zip(before, counters(), strict=True))
    return Run(seconds, out if isinstance(out, list) else [out], prefill, cached, decode)


def rotated(sides: Sequence[str], i: int) -> list[str]:
    """``sides`` starting at the ``i``-th: the side that goes first rotates."""
    k = i % len(sides)
    return [*sides[k:], *sides[:k]]


# --- report ----------------------------------------------------------------------------------
class Table:
    """One row per measure: each side's value, then each peer's ratio to agentrt."""

    def __init__(self, sides: Sequence[str]) -> None:
        self.keys = [k for k in SIDES if k in sides]
        self.peers = [k for k in PEERS if k in sides]
        header = [""] + [LABELS[k] for k in self.keys]
        for k in self.peers:
            header += [RATIOS[k], "target"]
        self.rows = [header]

    def latency(self, label: str, seconds: dict[str, float]) -> None:
        row = [label] + [f"{seconds[k]:.2f} s" for k in self.keys]
        for k in self.peers:
            ratio = seconds[k] / seconds["agentrt"]
            row += [f"{ratio:.2f}×", f"≥ {TARGET:.1f}× ({'met' if ratio >= TARGET else 'not met'})"]
        self.rows.append(row)

    def count(self, label: str, values: dict[str, float | None]) -> None:
        row = [label] + ["—" if values[k] is None else f"{values[k]:,.0f}" for k in self.keys]
        for k in self.peers:
            a, b = values[k], values["agentrt"]
            row += ["—" if a is None or not b else f"{a / b:.2f}×", ""]
        self.rows.append(row)

    def print(self) -> None:
        widths = [max(len(r[i]) for r in self.rows) for i in range(len(self.rows[0]))]
        for k, row in enumerate(self.rows):
            cells = [c.ljust(w) if i == 0 else c.rjust(w)
                     for i, (c, w) in enumerate(zip(row, widths, strict=True))]
            print("| " + " | ".join(cells) + " |")
            if k == 0:
                print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
        print("A ratio > 1 means agentrt (lowered) is faster (less time, or fewer tokens).")
        if "hf" in self.keys:
            print("HF has no prefix cache: its prefill tokens are the sum of the prompts every "
                  "model.generate call received. Decode tokens, every side: tokens fed through "
                  "a decode step (all generated tokens but the last of each reply).")


def print_trace(fast: Any, trace: list[tuple[str, float, float]], title: str) -> None:
    """Where an agentrt run's time went: each op's span, from the run's start."""
    if not trace:
        return
    nodes = {n.id: n for n in fast.graph}
    t0 = min(start for _, start, _ in trace)
    print(f"agentrt trace of {title} (op spans, s from the start; an LLM op's span includes "
          "waiting for the engine):")
    for node_id, start, end in sorted(trace, key=lambda t: (t[1], t[2])):
        node = nodes.get(node_id)
        label = f"{node.kind.value} {node.name}" if node is not None else node_id
        print(f"  {node_id:<4} {label:<45} {start - t0:6.2f} → {end - t0:6.2f}  "
              f"({end - start:5.2f})")


def first_difference(a: str, b: str, count_tokens: Callable[[str], int]) -> str:
    """Where ``a`` and ``b`` first differ: character offset, tokens of the common prefix, and
    both texts from a little before there."""
    i = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
             min(len(a), len(b)))
    lo = max(0, i - 20)
    return (f"at character {i} (after {count_tokens(a[:i])} tokens of common text): "
            f"…{a[lo:i + 40]!r} vs agentrt …{b[lo:i + 40]!r}")


def check_outputs(pairs: dict[str, list[Pair]], noun: str,
                  count_tokens: Callable[[str], int]) -> bool:
    """LangChain+ChatAgentRT vs agentrt-lowered must be identical: print every mismatch and
    return False if any. HF vs agentrt-lowered: report how many match and where they differ."""
    bad = [(label, a, b) for label, a, b in pairs["langchain"] if a != b]
    for label, a, b in bad:
        print(f"MISMATCH ({label}):\n  LangChain+ChatAgentRT: {a!r}\n"
              f"  agentrt (lowered):     {b!r}")
    total = len(pairs["langchain"])
    print(f"greedy {noun} identical, LangChain+ChatAgentRT vs agentrt (lowered): "
          f"{total - len(bad)}/{total}")
    if "hf" in pairs:
        diff = [(label, a, b) for label, a, b in pairs["hf"] if a != b]
        total = len(pairs["hf"])
        print(f"greedy {noun} identical, LangChain + HF transformers vs agentrt (lowered): "
              f"{total - len(diff)}/{total}"
              + (f"; {len(diff)} differ (reported, not a failure):" if diff else ""))
        for label, a, b in diff:
            print(f"  HF differs ({label}) {first_difference(a, b, count_tokens)}")
    return not bad


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def start() -> float:
    print(f"command: {shlex.join(sys.orig_argv)}")
    print(f"load average at the start: {load_average()}")
    return time.perf_counter()


def finish(started: float, same: bool) -> None:
    print(f"load average at the end: {load_average()} (other processes share these 2 cores: "
          "absolute times are noisy; the ratios compare runs made side by side)")
    print(f"{time.perf_counter() - started:.0f} s in all; command: {shlex.join(sys.orig_argv)}")
    if not same:
        sys.exit("FAILED: LangChain+ChatAgentRT and agentrt (lowered) produced different greedy "
                 "outputs (see above)")
