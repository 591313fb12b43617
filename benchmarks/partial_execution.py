"""Partial vs lazy tool execution on agentrt's engine: Conveyor's six workloads and an r sweep.

Each run is one request, greedy, on the real model (SmolLM2-135M-Instruct) at its real decode
speed through :class:`agentrt.Engine`, with the real tools in their sandboxed worker processes.
The latency ``L`` is measured from submitting the request to every observation being ready:

- **partial** — the decoded tokens go into :class:`agentrt.agent.ToolStream` as they are sampled
  (the request's hook): each piece runs the moment it is complete, a rejected call stops
  decoding (``"abort"``), a complete call pauses the request [Conveyor];
- **lazy** — the baseline without partial execution: ``ToolStream(lazy=True)`` buffers every piece
  in the tool until the call is complete (live decoding), or receives the reply's tokens only
  after the whole reply is decoded (replays: a multi-call plan runs after it is written).

Improvement is ``L_lazy / L_partial − 1`` on the means. ``g`` is the decode time (submit → last
decoded token) and ``t`` the tool time left after decoding in lazy mode, so ``r = t / g``;
with a fixed r the best possible improvement is ``min(r, 1/r)`` (Conveyor §3.4).

**Decode source.** ``model``: the model writes the call itself after a forced start of the reply
in the prompt (``reply_prefix``). ``replay``: the 135M model cannot write the workload's output
(a script, a plan), so a recorded reply is replayed: the engine runs one real forward pass per
trace token (``ignore_eos``, exactly ``len(trace)`` steps) and ``forced_token_ids`` puts the
trace's token in place of the sampled one, so the ToolStream and the KV both see the recorded
reply. The timing is the real per-token decode of the real forward pass.

Workloads (Conveyor's → here):

- CodeGen — a fenced sympy script: a cold ``import sympy`` and two ``sleep`` steps that stand for
  I/O, sized so that the script's tool time ≈ ``--codegen-r`` × its decode time on this machine;
- Search — BM25 over the standard library's docstrings (starts when ``query`` closes);
- Planning — a 3-stage plan in one reply: python (sympy), search, calculator;
- Validation — a SQL call naming a missing column, written by the model: time to the rejection;
- SQLite — a query written by the model; Calculator — ``200 * 701``.

The sweep replays a fenced script of ``--sweep-steps`` sleeps totalling r × its decode time.

    python benchmarks/partial_execution.py                      # 30 runs per workload
    python benchmarks/partial_execution.py --runs 5 --workloads codegen,calculator --sweep ""
"""

from __future__ import annotations

import argparse
import json
import shlex
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agentrt import Engine, SamplingParams
from agentrt.agent import Tool, ToolRuntime, ToolStream
from agentrt_tools.sqlite import SqliteTool

Mode = Literal["lazy", "partial"]
MODES: tuple[Mode, ...] = ("lazy", "partial")
SYSTEM = (
    "You are a helpful assistant. Call a tool by writing "
    '<tool_call>{{"name": ..., "arguments": {{...}}}}</tool_call>. Tools: {tools}'
)
SQL_DESCRIPTION = "Run SQL on the shop database: orders(id, customer_id, total)"


# --- workloads -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Workload:
    """One request: the question, its tools, and the reply (replayed, or its forced start)."""

    name: str
    question: str
    tools: tuple[str, ...]
    syntax: str
    reply: str
    source: Literal["model", "replay"]
    max_tokens: int = 48


def tool_call(name: str, **arguments: object) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def codegen_code(sleep_s: float) -> str:
    return (
        f"import sympy\nfrom time import sleep\nsleep({sleep_s:.2f})\n"
        f"y = sympy.sin(sympy.pi / 7)\nsleep({sleep_s:.2f})\nprint(y.evalf())\n"
    )


def sweep_script(sleep_s: float, num_steps: int) -> str:
    return "```python\nimport time\n" + f"time.sleep({sleep_s:.2f})\n" * num_steps + "```"


def codegen(sleep_s: float) -> Workload:
    return Workload("CodeGen", "Compute sin(pi/7) with sympy.",
                    ("python_repl",), "fenced_code", f"```python\n{codegen_code(sleep_s)}```",
                    "replay")


def fixed_workloads() -> list[Workload]:
    sql = '<tool_call>{"name": "sqlite", "arguments": {"query": "SELECT'
    plan = "\n".join([
        tool_call("python_repl", code="import sympy\nprint(sympy.prime(2000))"),
        tool_call("search", query="prime numbers"),
        tool_call("calculator", expression="2000 * log(2000)"),
    ])
    return [
        Workload("Search", "How do I print Hello World?", ("search",), "json_toolcall",
                 tool_call("search", query="print hello world", k=3), "replay"),
        Workload("Planning", "What is the 2000th prime, and how close is n log n?",
                 ("python_repl", "search", "calculator"), "json_toolcall", plan, "replay"),
        Workload("Validation", "Which customers have orders over 3?", ("sqlite",),
                 "json_toolcall", sql + " nosuchcolumn FROM", "model"),
        Workload("SQLite", "Show me all orders of customer 3.", ("sqlite",), "json_toolcall",
                 sql, "model"),
        Workload("Calculator", "What is 200 times 701?", ("calculator",), "json_toolcall",
                 tool_call("calculator", expression="200 * 701"), "replay"),
    ]


def make_database(folder: Path) -> Path:
    path = folder / "shop.db"
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, total REAL)"
        )
        rows = [(i % 7, round(1.5 * i, 2)) for i in range(40)]
        conn.executemany("INSERT INTO orders (customer_id, total) VALUES (?, ?)", rows)
    conn.close()
    return path


# --- one run ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Run:
    """One request: latency to all observations, decode time, tokens decoded, observations."""

    latency: float
    decode: float
    num_tokens: int
    observation: str
    is_error: bool

    @property
    def tool(self) -> float:
        return self.latency - self.decode


class _Hook:
    """The request's hook: times each step and hands the step's tokens to ``feed``.

    With a ``trace`` (replay) the engine is asked to force the trace's tokens in place of the
    sampled ones (``forced_token_ids``), so the KV holds exactly the replayed reply.
    """

    def __init__(self, feed: Callable[[object, list[int]], str], trace: Sequence[int] = ()) -> None:
        self.feed, self.trace = feed, list(trace)
        self.tokens: list[int] = []
        self.decode_end = 0.0

    def __call__(self, request: object, token_ids: list[int]) -> str:
        self.tokens += token_ids
        decision = self.feed(request, token_ids)
        self.decode_end = time.monotonic()
        return decision


class Bench:
    """Runs workloads on one engine and one tool runtime; a fresh tool session per run."""

    def __init__(self, engine: Engine, runtime: ToolRuntime) -> None:
        self.engine, self.runtime = engine, runtime
        self.tokenizer = engine.tokenizer
        self._num_sessions = 0

    def prompt(self, wl: Workload) -> list[int]:
        tools = json.dumps([_brief_spec(self.runtime.tools[name]) for name in wl.tools])
        system = SYSTEM.format(tools=tools)
        messages = [{"role": "system", "content": system}, {"role": "user", "content": wl.question}]
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                  tokenize=False)
        return self.encode(text + (wl.reply if wl.source == "model" else ""))

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def run(self, wl: Workload, mode: Mode) -> Run:
        """One request of ``wl``; the tool session is opened before and closed after timing."""
        session = self._open_session(wl)
        stream = ToolStream(self.tokenizer, self.runtime, parser=wl.syntax, session=session,
                            lazy=mode == "lazy")
        prompt = self.prompt(wl)
        hook, params = self._hook(wl, mode, stream)
        start = time.monotonic()
        out = self.engine.generate(prompt, params, hook=hook, forced_token_ids=hook.trace)
        if mode == "lazy" and wl.source == "replay":
            stream.on_tokens(hook.tokens)  # the reply is complete: now the tools get it
        stream.close()
        stream.observation()
        latency = time.monotonic() - start
        if out.is_paused:
            self.engine.release(out.request_id)
        self.runtime.close_session(session)
        observations = stream.observations
        text = "\n".join(o.text for o in observations)
        is_error = any(o.is_error for o in observations)
        return Run(latency, hook.decode_end - start, len(hook.tokens), text, is_error)

    def decode_time(self, wl: Workload) -> float:
        """Seconds to decode ``wl``'s reply (replay) on this machine, tools off."""
        trace = self.encode(wl.reply)
        params = SamplingParams(max_tokens=len(trace), ignore_eos=True)
        hook = _Hook(_keep_going, trace)
        start = time.monotonic()
        self.engine.generate(self.prompt(wl), params, hook=hook, forced_token_ids=trace)
        return hook.decode_end - start

    def _hook(self, wl: Workload, mode: Mode, stream: ToolStream) -> tuple[_Hook, SamplingParams]:
        if wl.source == "model":
            stream.feed_text(wl.reply)  # the forced start of the reply is part of the call
            return _Hook(stream.engine_hook), SamplingParams(max_tokens=wl.max_tokens)
        trace = self.encode(wl.reply)
        params = SamplingParams(max_tokens=len(trace), ignore_eos=True)
        if mode == "partial":
            return _Hook(lambda request, ids: stream.on_tokens(ids), trace), params
        return _Hook(_keep_going, trace), params  # lazy: the hook only buffers the tokens

    def _open_session(self, wl: Workload) -> str:
        self._num_sessions += 1
        session = f"{wl.name}-{self._num_sessions}"
        for name in wl.tools:
            self.runtime.sandbox_report(name, session=session)  # fork the worker now, untimed
        return session


def _brief_spec(tool: Tool) -> dict[str, object]:
    """A tool as the system prompt lists it: argument types only (the 135M model copies more)."""
    properties = tool.parameters["properties"]
    arguments = {key: spec["type"] for key, spec in properties.items()}
    description = SQL_DESCRIPTION if tool.name == "sqlite" else tool.description
    return {"name": tool.name, "description": description, "parameters": arguments}


def _keep_going(request: object, token_ids: list[int]) -> str:
    return "continue"


# --- measurements ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Result:
    """All runs of one workload in both modes."""

    workload: Workload
    runs: dict[Mode, list[Run]]

    def mean(self, mode: Mode, field: str = "latency") -> float:
        return statistics.fmean(getattr(r, field) for r in self.runs[mode])

    def std(self, mode: Mode) -> float:
        values = [r.latency for r in self.runs[mode]]
        return statistics.stdev(values) if len(values) > 1 else 0.0

    @property
    def improvement(self) -> float:
        return self.mean("lazy") / self.mean("partial") - 1

    @property
    def r(self) -> float:
        return self.mean("lazy", "tool") / self.mean("lazy", "decode")

    @property
    def is_same_observation(self) -> bool:
        texts = {r.observation for runs in self.runs.values() for r in runs}
        return len(texts) == 1


def measure(bench: Bench, wl: Workload, num_runs: int) -> Result:
    """``num_runs`` of each mode, alternating which goes first, after one warm-up run."""
    bench.run(wl, "partial")  # the prompt's KV into the prefix cache, the tools' code loaded
    runs: dict[Mode, list[Run]] = {"lazy": [], "partial": []}
    for i in range(num_runs):
        for mode in MODES if i % 2 == 0 else MODES[::-1]:
            runs[mode].append(bench.run(wl, mode))
    return Result(wl, runs)


def calibrate_codegen(bench: Bench, target_r: float) -> Workload:
    """Size CodeGen's two sleep steps so that tool time ≈ target_r × decode time."""
    decode = statistics.median(bench.decode_time(codegen(1.0)) for _ in range(2))
    fixed = min(_script_time(bench.runtime, codegen_code(0.0), f"codegen-{i}") for i in range(2))
    return codegen(max(0.0, (target_r * decode - fixed) / 2))


def _script_time(runtime: ToolRuntime, code: str, session: str) -> float:
    """Seconds to run ``code`` in a fresh python_repl session (its worker forked beforehand)."""
    runtime.sandbox_report("python_repl", session=session)
    start = time.monotonic()
    runtime.run("python_repl", {"code": code}, session=session)
    elapsed = time.monotonic() - start
    runtime.close_session(session)
    return elapsed


def sweep(bench: Bench, ratios: Sequence[float], num_runs: int, num_steps: int) -> list[tuple]:
    """For each r: a script of ``num_steps`` sleeps totalling r × its decode time."""
    decode = statistics.median(
        bench.decode_time(sweep_workload(1.0, num_steps)) for _ in range(2)
    )
    rows = []
    for r in ratios:
        wl = sweep_workload(r * decode / num_steps, num_steps)
        rows.append((r, measure(bench, wl, num_runs)))
    return rows


def sweep_workload(sleep_s: float, num_steps: int) -> Workload:
    return Workload("sweep", "Wait a little.", ("python_repl",), "fenced_code",
                    sweep_script(sleep_s, num_steps), "replay")


# --- report ----------------------------------------------------------------------------------
def print_workloads(results: list[Result], ms_per_token: float) -> None:
    head = (f"{'workload':<11} {'decode':<7} {'runs':>4} {'tokens':>9} {'lazy L (s)':>14} "
            f"{'partial L (s)':>14} {'improv.':>8} {'r=t/g':>6} {'bound':>6}  observation")
    print(f"\nPartial vs lazy, one request at a time; decode ≈ {ms_per_token:.0f} ms/token")
    print(head)
    print("-" * len(head))
    for res in results:
        n = len(res.runs["lazy"])
        tokens = f"{res.mean('lazy', 'num_tokens'):.0f}"
        if res.mean("partial", "num_tokens") != res.mean("lazy", "num_tokens"):
            tokens += f"→{res.mean('partial', 'num_tokens'):.0f}"
        bound = min(res.r, 1 / res.r) if res.r > 0 else 0.0
        same = "same" if res.is_same_observation else "differs"
        error = " (rejected)" if res.runs["partial"][0].is_error else ""
        print(f"{res.workload.name:<11} {res.workload.source:<7} {n:>4} {tokens:>9} "
              f"{_pm(res, 'lazy'):>14} {_pm(res, 'partial'):>14} {res.improvement:>+8.1%} "
              f"{res.r:>6.2f} {bound:>6.0%}  {same}{error}")
    print("decode: model = the model writes the call (after a forced start of the reply);"
          " replay = a recorded reply,\n  one real forward pass per token, the trace's token"
          " forced in place of the sampled one. tokens: decoded per run\n  (lazy→partial when"
          " an early abort stopped decoding). L: submit → all observations ready.")


def print_sweep(rows: list[tuple]) -> None:
    head = (f"{'r target':>8} {'r meas.':>8} {'lazy L (s)':>14} {'partial L (s)':>14} "
            f"{'improv.':>8} {'min(r,1/r)':>10}")
    print("\nSweep of r = tool time / decode time (replay, fenced python script of sleeps)")
    print(head)
    print("-" * len(head))
    for r, res in rows:
        bound = min(res.r, 1 / res.r) if res.r > 0 else 0.0
        print(f"{r:>8.2f} {res.r:>8.2f} {_pm(res, 'lazy'):>14} {_pm(res, 'partial'):>14} "
              f"{res.improvement:>+8.1%} {bound:>10.0%}")


def _pm(res: Result, mode: Mode) -> str:
    return f"{res.mean(mode):.3f} ± {res.std(mode):.3f}"


# --- main ------------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    names = ["codegen", *(wl.name.lower() for wl in fixed_workloads())]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    p.add_argument("--runs", type=int, default=30, help="runs per workload and mode (30)")
    p.add_argument("--workloads", default=",".join(names),
                   help=f"comma-separated subset of {','.join(names)}")
    p.add_argument("--codegen-r", type=float, default=1.0,
                   help="CodeGen's tool time / decode time (sizes its sleep steps; 1.0)")
    p.add_argument("--sweep", default="0.25,0.5,1,2,4",
                   help="r values of the sweep, comma-separated ('' to skip)")
    p.add_argument("--sweep-runs", type=int, default=3, help="runs per sweep point and mode (3)")
    p.add_argument("--sweep-steps", type=int, default=3, help="sleep statements per script (3)")
    args = p.parse_args(argv)
    args.workloads = [w.strip().lower() for w in args.workloads.split(",") if w.strip()]
    unknown = sorted(set(args.workloads) - set(names))
    if unknown:
        p.error(f"unknown workloads {unknown}; choose from {names}")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.monotonic()
    engine = Engine(dtype="float32")
    with tempfile.TemporaryDirectory() as folder:
        db = make_database(Path(folder))
        tools = ["python_repl", "search", "calculator", SqliteTool(path=str(db))]
        with ToolRuntime(tools) as runtime:
            bench = Bench(engine, runtime)
            workloads = [wl for wl in fixed_workloads() if wl.name.lower() in args.workloads]
            if "codegen" in args.workloads:
                workloads.insert(0, calibrate_codegen(bench, args.codegen_r))
            results = [measure(bench, wl, args.runs) for wl in workloads]
            ratios = [float(r) for r in args.sweep.split(",") if r.strip()]
            rows = sweep(bench, ratios, args.sweep_runs, args.sweep_steps) if ratios else []
    engine.close()
    step = _ms_per_token(results)
    print_workloads(results, step)
    if rows:
        print_sweep(rows)
    print(f"\n{time.monotonic() - started:.0f} s in all; command: {_command(argv)}")


def _ms_per_token(results: list[Result]) -> float:
    replays = [r for res in results if res.workload.source == "replay" for r in res.runs["lazy"]]
    return 1000 * sum(r.decode for r in replays) / max(1, sum(r.num_tokens for r in replays))


def _command(argv: Sequence[str] | None) -> str:
    args = list(argv if argv is not None else sys.argv[1:])
    return shlex.join(["python", "benchmarks/partial_execution.py", *args])


if __name__ == "__main__":
    main()
