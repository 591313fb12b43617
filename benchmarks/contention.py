"""Decode speed beside busy processes: agentrt's adaptive threads vs a fixed team vs llama.cpp.

An agent's tools run next to the model: a Python REPL computing while the model keeps writing
(partial execution), a test suite, another agent. Each decode step splits its layers across a
team of threads that meets ~150 times a step; a core shared with another process stalls the
whole team at each meeting. agentrt's ``cpu_decode_threads="adaptive"`` (the default) shrinks
the team while threads are starved and probes back up (``agentrt.engine.cpu_threads``);
``"fixed"`` always runs the whole team, as llama.cpp does with its ``n_threads``.

One run measures each engine on the same GGUF file and prompt, first alone and then beside
``--busy`` busy processes (``--neighbour loop``: a Python loop, like a tool's computation;
``torch``: torch matmuls on as many OpenMP threads as cores, like another program), the
engines' calls alternating within each phase. Decode tok/s at batch 1 is
``(N - 1) / (T(N) - T(1))`` over ``--new-tokens`` N (median of ``--repeats``).

    python benchmarks/contention.py
    python benchmarks/contention.py --model $D/random-llama-0.5b-q4_k_m.gguf  # make_gguf.py
    python benchmarks/contention.py --neighbour torch --busy 1
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

NEIGHBOURS = {
    "loop": "import time\nend = time.time() + {seconds}\nwhile time.time() < end: pass\n",
    "torch": ("import time, torch\ntorch.set_num_threads({cores})\na = torch.randn(256, 256)\n"
              "end = time.time() + {seconds}\nwhile time.time() < end: a = torch.tanh(a @ a)\n"),
}


class Agentrt:
    """One agentrt engine run with its thread governor (``adaptive``) or without it
    (``fixed``, as ``cpu_decode_threads="fixed"`` builds it): both modes share one engine, so
    they run the same weights in the same memory."""

    def __init__(self, core, mode: str) -> None:
        self.name, self.core = f"agentrt {mode}", core
        steps = core.runner.cpu_steps
        self.governor = None if steps is None or mode == "fixed" else steps.governor

    def generate(self, prompt: list[int], n: int) -> None:
        from agentrt import SamplingParams

        if self.core.runner.cpu_steps is not None:
            self.core.runner.cpu_steps.governor = self.governor
        self.core.add_request(prompt, SamplingParams(max_tokens=n, ignore_eos=True))
        while self.core.has_unfinished():
            self.core.step()


class LlamaCpp:
    name = "llama.cpp"

    def __init__(self, path: Path, threads: int) -> None:
        from _llamacpp import open_llama

        self.llm = open_llama(path, n_ctx=512, n_threads=threads, n_threads_batch=threads)

    def generate(self, prompt: list[int], n: int) -> None:
        from _llamacpp import greedy

        greedy(self.llm, prompt, n)


def decode_rate(engine, prompt: list[int], n: int) -> float:
    t0 = time.perf_counter()
    engine.generate(prompt, 1)
    t1 = time.perf_counter()
    engine.generate(prompt, n)
    t2 = time.perf_counter()
    return (n - 1) / max((t2 - t1) - (t1 - t0), 1e-9)


def measure(engines: list, prompt: list[int], args: argparse.Namespace) -> dict[str, float]:
    rates: dict[str, list[float]] = {e.name: [] for e in engines}
    for e in engines:  # warm-up
        e.generate(prompt, 2)
    for r in range(args.repeats):
        for e in engines[r % len(engines):] + engines[:r % len(engines)]:
            rates[e.name].append(decode_rate(e, prompt, args.new_tokens))
    return {name: statistics.median(v) for name, v in rates.items()}


def start_neighbours(args: argparse.Namespace) -> list[subprocess.Popen]:
    code = NEIGHBOURS[args.neighbour].format(seconds=3600, cores=os.cpu_count() or 1)
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(args.busy)]
    time.sleep(1.0)  # started and spinning
    return procs


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--model", default=None,
                   help="a .gguf file or a name agentrt finds (default: the embedded SmolLM2)")
    p.add_argument("--threads", type=int, default=torch.get_num_threads(),
                   help="threads of every engine (default: torch's, %(default)s here)")
    p.add_argument("--busy", type=int, default=1, help="busy processes beside (default 1)")
    p.add_argument("--neighbour", choices=sorted(NEIGHBOURS), default="loop",
                   help="what each busy process runs (default: loop)")
    p.add_argument("--gguf-activations", default="auto", choices=["auto", "float32", "int8"],
                   help="agentrt's numeric path on GGUF blocks (default: auto)")
    p.add_argument("--new-tokens", type=int, default=48, help="tokens per call (default 48)")
    p.add_argument("--repeats", type=int, default=5, help="calls per engine and phase (default 5)")
    p.add_argument("--no-llamacpp", action="store_true", help="skip llama.cpp")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.new_tokens < 2 or args.repeats < 1 or args.busy < 0 or args.threads < 1:
        raise SystemExit("--new-tokens must be >= 2, --repeats and --threads >= 1, --busy >= 0")
    torch.set_num_threads(args.threads)
    from agentrt.models.sources import locate

    path, _ = locate(args.model)
    from agentrt import EngineConfig, LLMEngine

    core = LLMEngine(EngineConfig(model=args.model, num_threads=args.threads,
                                  profile_on_start=False, enable_prefix_cache=False,
                                  gguf_activations=args.gguf_activations))
    engines: list = [Agentrt(core, m) for m in ("adaptive", "fixed")]
    if args.no_llamacpp:
        print("llama.cpp: skipped (--no-llamacpp)")
    elif importlib.util.find_spec("llama_cpp") is None:
        print("llama.cpp: skipped (llama-cpp-python is not installed: `pip install -e .[bench]`)")
    else:
        engines.append(LlamaCpp(path, args.threads))
    prompt = engines[0].core.tokenizer.encode("The history of the printing press begins")
    print(f"model {path.name}, {args.threads} threads, {os.cpu_count()} cores, batch 1, "
          f"{args.new_tokens} new tokens, median of {args.repeats}; beside: {args.busy} x "
          f"{args.neighbour}")
    governor = engines[0].governor
    alone = measure(engines, prompt, args)
    shrinks_alone = governor.shrinks if governor is not None else 0
    procs = start_neighbours(args)
    try:
        busy = measure(engines, prompt, args)
    finally:
        for proc in procs:
            proc.kill()
    print(f"\n| engine | alone tok/s | beside {args.busy} busy tok/s | busy / alone |")
    print("|---|---|---|---|")
    for e in engines:
        print(f"| {e.name} | {alone[e.name]:.1f} | {busy[e.name]:.1f} | "
              f"{busy[e.name] / alone[e.name]:.2f} |")
    ours = busy["agentrt adaptive"]
    for peer in [e.name for e in engines[1:]]:
        print(f"beside busy processes: agentrt adaptive / {peer} = {ours / busy[peer]:.2f}x; "
              f"alone: {alone['agentrt adaptive'] / alone[peer]:.2f}x")
    if governor is None:
        print("(this model does not run the C++ decode step: nothing to govern)")
    else:
        print(f"agentrt adaptive: the team shrank {shrinks_alone} times alone, "
              f"{governor.shrinks - shrinks_alone} times beside the busy processes")


if __name__ == "__main__":
    main()
