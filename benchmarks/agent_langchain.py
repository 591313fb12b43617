"""Agent benchmark: one LangChain agent on HF transformers, llama.cpp and agentrt, side by side.

What: the same agents — the ReAct agent (``create_react_agent``) and the tool-calling agent
(``create_tool_calling_agent``) — with the same prompts, real tools (calculator, sqlite,
python_repl, search, run in agentrt tool workers) and tasks as
``tests/integrations/langchain/test_langchain_executor.py``, the same model (the default
SmolLM2-135M-Instruct, float32), greedy, run by

  (a) ``AgentExecutor`` + ``ChatHuggingFace(HuggingFacePipeline(transformers.pipeline(...)))``
      — what a LangChain user runs today;
  (b) ``AgentExecutor`` + ``ChatLlamaCpp`` (langchain-community, llama-cpp-python; the
      package's Q4_1 GGUF of the same model) — when installed;
  (c) ``agentrt.Executor`` + ``ChatAgentRT`` — the whole run as one engine session;
  (d) ``AgentExecutor`` + ``ChatAgentRT`` — agentrt's engine (prefix cache on) without the
      session: (d)/(c) is the session's share of the speed-up, (a)/(d) the engine's.

Why: issue 5's acceptance asks for this comparison, with targets (c) >= 3x faster than (a)
and >= 1.5x faster than (b) in agent wall time.

Fairness:
- HF stops where agentrt stops. AgentExecutor streams, and ``HuggingFacePipeline._stream``
  turns the ``\\nObservation`` stop into token ids (``convert_tokens_to_ids`` gives
  ``[0]``), so stock HF never stops there. Here the pipeline gets transformers'
  ``stop_strings`` (with the tokenizer) per call, and the text is cut before the stop string
  as every LangChain LLM with ``stop`` does (otherwise "\\nObservation" ends up in the tool
  input). The steps of every backend are compared with (c)'s.
- Each task runs on every backend in turn (the order rotates per task), so a neighbour's load
  hits all alike; each run gets fresh tool sessions; agentrt's prefix cache and llama.cpp's
  KV are cleared before each run (no run reuses another run's KV); every backend and every
  tool is warmed up once before timing.
- Latency is the wall time of ``executor.invoke`` (agent, model and tools); the tools' share
  is shown apart.

Token counts: "prompt" is the sum of every call's full prompt (what a stateless backend
prefills); "prefilled" is what the backend computed: HF = its prompts (counted on
``model.generate``), (c) = ``session_stats.num_prefill_tokens`` (cross-checked with the
engine's counter), (d) = the engine's counter (prefix-cache hits shown as "cached"),
llama.cpp = the tokens its first ``eval`` of each call received.

    python benchmarks/agent_langchain.py                      # everything, 8 tasks per agent
    python benchmarks/agent_langchain.py --tasks 2 --agents react --skip-hf
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import itertools
import os
import resource
import shlex
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch  # noqa: E402
from langchain_classic.agents import (  # noqa: E402
    AgentExecutor,
    create_react_agent,
    create_tool_calling_agent,
)
from langchain_core.callbacks import BaseCallbackHandler  # noqa: E402
from langchain_core.language_models import BaseChatModel  # noqa: E402
from langchain_core.prompts import ChatPromptTemplate  # noqa: E402

from langchain_agentrt.react import react_prompt  # noqa: E402

# --- the workload: prompts and tasks of tests/integrations/langchain/test_langchain_executor.py
REACT = react_prompt()
CALLING = ChatPromptTemplate.from_messages([
    ("system", "You are a helpful assistant. Use the tools when they help."),
    ("human", "{input}"), ("placeholder", "{agent_scratchpad}")])
TASKS = [
    ("calculator", "What is 17 * 23?"),
    ("calculator", "Compute 2 ** 10 - 1."),
    ("sqlite", "How many rows does the fruit table have?"),
    ("sqlite", "What is the price of a banana in the fruit table?"),
    ("python_repl", "Use Python to print the sum of the numbers from 1 to 100."),
    ("python_repl", "Use Python to reverse the string 'agent'."),
    ("search", "Search the documentation: what does json.dumps do?"),
    ("search", "Search for the module that implements heap queues."),
]
AGENTS = {"react": "ReAct agent (create_react_agent)",
          "calling": "tool-calling agent (create_tool_calling_agent)"}
LLAMACPP_SLOW_BUILD = ("a pip source build takes >12 min on this machine; its measured "
                       "numbers are in /work/shared/PEERS.md")


def make_agent(kind: str, llm: BaseChatModel, tools: list) -> Any:
    if kind == "react":
        return create_react_agent(llm, tools, REACT)
    return create_tool_calling_agent(llm, tools, CALLING)


# --- counters ------------------------------------------------------------------------------
@dataclass
class Counts:
    """What one agent run cost a backend."""

    calls: int = 0
    prompt: int = 0
    """Sum of every call's full prompt (tokens)."""
    prefilled: int = 0
    """Prompt tokens the backend computed."""
    cached: int = 0
    """Prompt tokens served from a cache instead (agentrt's prefix cache)."""
    generated: int = 0
    tool_seconds: float = 0.0

    def __add__(self, other: Counts) -> Counts:
        return Counts(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))


class RunMeter(BaseCallbackHandler):
    """LangChain callbacks of one run: model calls with their usage, and time in tools."""

    def __init__(self) -> None:
        self.calls = self.input_tokens = self.output_tokens = 0
        self.tool_seconds = 0.0
        self._tool_start: dict[Any, float] = {}

    def on_llm_end(self, response: Any, **kwargs: Any) -> None:
        self.calls += 1
        for generations in response.generations:
            for g in generations:
                usage = getattr(getattr(g, "message", None), "usage_metadata", None) or {}
                self.input_tokens += usage.get("input_tokens", 0)
                self.output_tokens += usage.get("output_tokens", 0)

    def on_tool_start(self, serialized: Any, input_str: str, *, run_id: Any, **kw: Any) -> None:
        self._tool_start[run_id] = time.perf_counter()

    def on_tool_end(self, output: Any, *, run_id: Any, **kwargs: Any) -> None:
        self._tool_done(run_id)

    def on_tool_error(self, error: BaseException, *, run_id: Any, **kwargs: Any) -> None:
        self._tool_done(run_id)

    def _tool_done(self, run_id: Any) -> None:
        start = self._tool_start.pop(run_id, None)
        if start is not None:
            self.tool_seconds += time.perf_counter() - start


# --- (a) HF transformers through langchain_huggingface ------------------------------------------
class GenerateMeter:
    """Counts what ``model.generate`` receives and produces (wraps the instance's method)."""

    def __init__(self, model: Any) -> None:
        self.calls = self.prompt = self.generated = 0
        self._busy = 0
        self._idle = threading.Condition()
        original = model.generate

        def generate(*args: Any, **kwargs: Any) -> Any:
            ids = kwargs["input_ids"] if "input_ids" in kwargs else args[0]
            with self._idle:
                self._busy += 1
            try:
                out = original(*args, **kwargs)
                seq = getattr(out, "sequences", out)
                with self._idle:
                    self.calls += 1
                    self.prompt += ids.numel()
                    self.generated += seq.numel() - ids.numel()
                return out
            finally:
                with self._idle:
                    self._busy -= 1
                    self._idle.notify_all()

        model.generate = generate

    def wait_idle(self) -> None:
        """Until no generate call runs (the streaming path runs it in a thread of its own)."""
        with self._idle:
            self._idle.wait_for(lambda: self._busy == 0)


def cut_at_stop(text: str, stops: Sequence[str]) -> tuple[str, bool]:
    """``text`` before the earliest stop string, and whether one was found."""
    hits = [i for i in (text.find(s) for s in stops) if i >= 0]
    return (text[: min(hits)], True) if hits else (text, False)


def holdback(text: str, stops: Sequence[str]) -> int:
    """Characters at the end of ``text`` that may still grow into a stop string."""
    return max((k for s in stops for k in range(1, len(s)) if text.endswith(s[:k])), default=0)


def _make_stop_pipeline_class() -> type:
    from langchain_core.outputs import Generation, GenerationChunk, LLMResult
    from langchain_huggingface import HuggingFacePipeline

    class StopStringPipeline(HuggingFacePipeline):
        """``HuggingFacePipeline`` that honours LangChain's ``stop`` (see the module docs):
        transformers' ``stop_strings`` end generation, the text is cut before the stop."""

        meter: Any = None

        def _with_stop(self, stop: list[str] | None, kwargs: dict[str, Any]) -> dict[str, Any]:
            if not stop:
                return kwargs
            pipeline_kwargs = {**kwargs.get("pipeline_kwargs", {}), "stop_strings": list(stop),
                               "tokenizer": self.pipeline.tokenizer}
            return {**kwargs, "pipeline_kwargs": pipeline_kwargs}

        def _stream(self, prompt: str, stop: list[str] | None = None, run_manager: Any = None,
                    **kwargs: Any) -> Iterator[GenerationChunk]:
            stops, text, sent, done = stop or [], "", 0, False
            for chunk in super()._stream(prompt, None, None, **self._with_stop(stop, kwargs)):
                if done:
                    continue  # drain the streamer: generation ends at the stop string
                text += chunk.text
                text, done = cut_at_stop(text, stops)
                end = len(text) if done else len(text) - holdback(text, stops)
                if end > sent:
                    out = GenerationChunk(text=text[sent:end])
                    sent = end
                    if run_manager:
                        run_manager.on_llm_new_token(out.text, chunk=out)
                    yield out
            if sent < len(text):
                yield GenerationChunk(text=text[sent:])
            if self.meter is not None:
                self.meter.wait_idle()

        def _generate(self, prompts: list[str], stop: list[str] | None = None,
                      run_manager: Any = None, **kwargs: Any) -> LLMResult:
            result = super()._generate(prompts, None, run_manager, **self._with_stop(stop, kwargs))
            return LLMResult(generations=[
                [Generation(text=cut_at_stop(g.text, stop or [])[0]) for g in gens]
                for gens in result.generations])

    return StopStringPipeline


class HFBackend:
    key, label = "a", "AgentExecutor + ChatHuggingFace (HF transformers)"
    executor_cls = AgentExecutor

    def __init__(self, model_path: Path, max_new_tokens: int) -> None:
        import transformers
        from langchain_huggingface import ChatHuggingFace

        transformers.logging.set_verbosity_error()
        tok = transformers.AutoTokenizer.from_pretrained(str(model_path), local_files_only=True)
        model = transformers.AutoModelForCausalLM.from_pretrained(
            str(model_path), dtype=torch.float32, local_files_only=True)
        model.eval()
        self.meter = GenerateMeter(model)
        pipe = transformers.pipeline("text-generation", model=model, tokenizer=tok,
                                     max_new_tokens=max_new_tokens, do_sample=False,
                                     return_full_text=False)
        llm = _make_stop_pipeline_class()(pipeline=pipe, meter=self.meter)
        self.llm = ChatHuggingFace(llm=llm, tokenizer=tok)

    def chat(self, kind: str) -> BaseChatModel:
        return self.llm

    def unsupported(self, kind: str) -> str | None:
        return hf_tool_calling_gap(self.llm) if kind == "calling" else None

    def warm_up(self) -> None:
        self.llm.invoke("Say hi.")

    def begin(self) -> tuple[int, int, int]:
        return self.meter.calls, self.meter.prompt, self.meter.generated

    def end(self, before: tuple[int, int, int], executor: Any, meter: RunMeter) -> Counts:
        self.meter.wait_idle()
        calls, prompt, generated = (x - y for x, y in zip(self.begin(), before, strict=True))
        return Counts(calls=calls, prompt=prompt, prefilled=prompt, generated=generated,
                      tool_seconds=meter.tool_seconds)


def hf_tool_calling_gap(chat: Any) -> str | None:
    """Why ChatHuggingFace (pipeline) cannot run the tool-calling agent, or None."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    history = [HumanMessage("q"), AIMessage("", tool_calls=[{"name": "t", "args": {}, "id": "1"}]),
               ToolMessage("r", tool_call_id="1")]
    try:
        chat._to_chat_prompt(history)
    except ValueError as exc:
        return (f"ChatHuggingFace over a HuggingFacePipeline cannot render a tool-calling "
                f"history ({exc}); it also never shows the bound tools to the model (tools= is "
                "dropped on the way to the pipeline) nor parses tool calls from the output")
    return None


# --- (b) llama.cpp through langchain-community -------------------------------------------------
def llamacpp_unavailable() -> str | None:
    missing = [pkg for pkg, mod in (("llama-cpp-python", "llama_cpp"),
                                    ("langchain-community", "langchain_community"))
               if importlib.util.find_spec(mod) is None]
    if not missing:
        return None
    return f"{' and '.join(missing)} not installed ({LLAMACPP_SLOW_BUILD})"


class LlamaMeter:
    """Counts calls, prompt, evaluated-prompt and generated tokens of a ``llama_cpp.Llama``
    (wraps the instance's ``generate`` and ``eval``: the first ``eval`` of a call is its
    prefill, after llama.cpp's own reuse of the previous prompt's KV)."""

    def __init__(self, llama: Any) -> None:
        self.calls = self.prompt = self.prefilled = self.generated = 0
        self._fresh = False
        generate, evaluate = llama.generate, llama.eval

        def metered_generate(tokens: Sequence[int], *args: Any, **kwargs: Any) -> Iterator[int]:
            self.calls += 1
            self.prompt += len(tokens)
            self._fresh = True
            for token in generate(tokens, *args, **kwargs):
                self.generated += 1
                yield token

        def metered_eval(tokens: Sequence[int]) -> Any:
            if self._fresh:
                self.prefilled += len(tokens)
                self._fresh = False
            return evaluate(tokens)

        llama.generate, llama.eval = metered_generate, metered_eval

    def snapshot(self) -> tuple[int, int, int, int]:
        return self.calls, self.prompt, self.prefilled, self.generated


class LlamaCppBackend:
    key, label = "b", "AgentExecutor + ChatLlamaCpp (llama.cpp)"
    executor_cls = AgentExecutor

    def __init__(self, max_new_tokens: int, threads: int, n_ctx: int = 2048) -> None:
        from _llamacpp import llama_options
        from langchain_community.chat_models import ChatLlamaCpp

        from agentrt.models.files import default_gguf

        extra = llama_options(n_threads_batch=threads)
        # NOTE: greedy as on the other backends: ChatLlamaCpp defaults to temperature 0.8,
        # top_k 40, repeat_penalty 1.1 and n_batch 8 (slow prefill).
        self.llm = ChatLlamaCpp(model_path=str(default_gguf()), n_ctx=n_ctx, n_threads=threads,
                                n_batch=512, temperature=0.0, top_k=1, top_p=1.0,
                                repeat_penalty=1.0, max_tokens=max_new_tokens,
                                model_kwargs=extra, verbose=False)
        self.meter = LlamaMeter(self.llm.client)

    def chat(self, kind: str) -> BaseChatModel:
        return self.llm

    def unsupported(self, kind: str) -> str | None:
        return None

    def warm_up(self) -> None:
        self.llm.invoke("Say hi.")

    def begin(self) -> tuple[int, int, int, int]:
        self.llm.client.reset()  # no reuse of the previous run's KV
        return self.meter.snapshot()

    def end(self, before: tuple[int, ...], executor: Any, meter: RunMeter) -> Counts:
        calls, prompt, prefilled, generated = (
            x - y for x, y in zip(self.meter.snapshot(), before, strict=True))
        return Counts(calls=calls, prompt=prompt, prefilled=prefilled, generated=generated,
                      tool_seconds=meter.tool_seconds)


# --- (c), (d) agentrt ---------------------------------------------------------------------------
class AgentrtBackend:
    def __init__(self, engine: Any, max_new_tokens: int, *, session: bool) -> None:
        import agentrt
        from langchain_agentrt import ChatAgentRT

        self.engine = engine
        self.session = session
        self.key = "c" if session else "d"
        self.label = ("agentrt.Executor + ChatAgentRT" if session
                      else "AgentExecutor + ChatAgentRT (no session)")
        self.executor_cls = agentrt.Executor if session else AgentExecutor
        self.llm = ChatAgentRT(engine=engine, max_tokens=max_new_tokens, constrained=False)
        self.engine_prefill_checks: list[tuple[int, int]] = []
        """(c): (session_stats.num_prefill_tokens, engine counter delta) per run."""

    def chat(self, kind: str) -> BaseChatModel:
        return self.llm

    def unsupported(self, kind: str) -> str | None:
        return None

    def warm_up(self) -> None:
        self.llm.invoke("Say hi.")

    def begin(self) -> tuple[int, int]:
        self.engine.clear_prefix_cache()  # each run starts cold, like the peers
        s = self.engine.stats
        return s.num_prefill_tokens, s.num_cached_tokens

    def end(self, before: tuple[int, int], executor: Any, meter: RunMeter) -> Counts:
        s = self.engine.stats
        prefilled, cached = s.num_prefill_tokens - before[0], s.num_cached_tokens - before[1]
        counts = Counts(calls=meter.calls, prompt=meter.input_tokens, prefilled=prefilled,
                        cached=cached, generated=meter.output_tokens,
                        tool_seconds=meter.tool_seconds)
        if self.session:
            stats = executor.session_stats
            self.engine_prefill_checks.append((stats.num_prefill_tokens, prefilled))
            counts.calls, counts.prompt = stats.num_calls, stats.num_prompt_tokens
            counts.prefilled = stats.num_prefill_tokens
        return counts


# --- tools ----------------------------------------------------------------------------------
def make_runtime(folder: Path) -> Any:
    """The tool runtime of the test: calculator, python_repl, sqlite (a fruit table), search."""
    from agentrt.agent import ToolRuntime
    from agentrt_tools import SqliteTool

    db = folder / "shop.db"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE fruit (name TEXT, price REAL)")
        con.executemany("INSERT INTO fruit VALUES (?, ?)",
                        [("apple", 0.5), ("banana", 0.25), ("cherry", 3.0)])
    return ToolRuntime(["calculator", "python_repl", SqliteTool(path=str(db)), "search"])


def tools_for(runtime: Any, name: str, session: str) -> list:
    """calculator plus the task's tool, in a fresh tool session (as in the test)."""
    from langchain_agentrt.tools import to_langchain

    names = ("calculator",) if name == "calculator" else ("calculator", name)
    return [to_langchain(n, runtime, session=session) for n in names]


def warm_up_tools(runtime: Any) -> None:
    """Start the tool template process and import each tool once, outside the timings."""
    probes = {"calculator": {"expression": "1 + 1"}, "python_repl": {"code": "print(1)"},
              "sqlite": {"query": "SELECT 1"}, "search": {"query": "json"}}
    for name, args in probes.items():
        with contextlib.suppress(Exception):  # a probe argument a tool rejects still warms it
            runtime.run(name, args, session="warm-up")
    runtime.close_session("warm-up")


# --- runs -----------------------------------------------------------------------------------
@dataclass
class Run:
    seconds: float
    counts: Counts
    steps: list[tuple]
    output: str
    parse_errors: int


@dataclass
class KindResult:
    kind: str
    skipped: dict[str, str] = field(default_factory=dict)
    """backend key -> why it did not run this agent."""
    runs: list[dict[str, Run]] = field(default_factory=list)
    """Per task: backend key -> run."""


def steps_of(result: dict[str, Any]) -> list[tuple]:
    return [(a.tool, a.tool_input, a.log, str(obs)) for a, obs in result["intermediate_steps"]]


_sessions = itertools.count()


def run_once(backend: Any, kind: str, task: tuple[str, str], runtime: Any,
             args: argparse.Namespace) -> Run:
    tool_name, question = task
    session = f"bench-{next(_sessions)}"
    tools = tools_for(runtime, tool_name, session)
    executor = backend.executor_cls(
        agent=make_agent(kind, backend.chat(kind), tools), tools=tools,
        return_intermediate_steps=True, max_iterations=args.max_iterations,
        handle_parsing_errors=True)
    meter = RunMeter()
    before = backend.begin()
    t0 = time.perf_counter()
    result = executor.invoke({"input": question}, config={"callbacks": [meter]})
    seconds = time.perf_counter() - t0
    counts = backend.end(before, executor, meter)
    runtime.close_session(session)
    steps = steps_of(result)
    return Run(seconds, counts, steps, str(result["output"]),
               sum(s[0] == "_Exception" for s in steps))


def run_kind(kind: str, backends: list[Any], tasks: list[tuple[str, str]], runtime: Any,
             args: argparse.Namespace) -> KindResult:
    res = KindResult(kind)
    active = []
    for b in backends:
        reason = b.unsupported(kind)
        if reason:
            res.skipped[b.key] = reason
        else:
            active.append(b)
    for i, task in enumerate(tasks):
        order = active[i % len(active):] + active[: i % len(active)]
        runs = {b.key: run_once(b, kind, task, runtime, args) for b in order}
        res.runs.append(runs)
        print_task_progress(i, task, runs)
    return res


# --- report ---------------------------------------------------------------------------------
def ratio(num: float, den: float) -> str:
    return f"{num / den:.2f}×" if den > 0 else "—"


def short(text: str, n: int = 90) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= n else text[: n - 1] + "…"


def same_as(run: Run, ref: Run) -> str:
    return (f"steps {'=' if run.steps == ref.steps else '≠'}, "
            f"output {'=' if run.output == ref.output else '≠'}")


def first_difference(run: Run, ref: Run) -> str | None:
    for i, (x, y) in enumerate(zip(run.steps, ref.steps, strict=False)):
        if x != y:
            return f"step {i + 1}: {short(repr(x))}  vs (c) {short(repr(y))}"
    if len(run.steps) != len(ref.steps):
        return f"{len(run.steps)} steps vs (c) {len(ref.steps)}"
    if run.output != ref.output:
        return f"output {short(repr(run.output))} vs (c) {short(repr(ref.output))}"
    return None


def print_task_progress(i: int, task: tuple[str, str], runs: dict[str, Run]) -> None:
    print(f"  task {i + 1} [{task[0]}] {task[1]}", flush=True)
    ref = runs.get("c")
    for key in sorted(runs):
        r, c = runs[key], runs[key].counts
        line = (f"    ({key}) {r.seconds:6.2f} s  calls {c.calls}  prompt {c.prompt:5d}  "
                f"prefilled {c.prefilled:5d}  generated {c.generated:4d}  "
                f"tools {c.tool_seconds:4.2f} s  steps {len(r.steps)}  "
                f"parse errors {r.parse_errors}")
        if ref is not None and key != "c":
            line += f"  | vs (c): {same_as(r, ref)}"
        print(line, flush=True)
        diff = first_difference(r, ref) if ref is not None and key != "c" else None
        if diff:
            print(f"         first difference: {diff}", flush=True)
    if ref is not None:
        print(f"    (c) output: {short(repr(ref.output), 120)}", flush=True)


def print_table(rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for k, row in enumerate(rows):
        cells = [c.ljust(w) if i <= 1 else c.rjust(w)
                 for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        print("| " + " | ".join(cells) + " |")
        if k == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")


def totals(res: KindResult, key: str) -> tuple[float, Counts, int]:
    runs = [r[key] for r in res.runs if key in r]
    return (sum(r.seconds for r in runs), sum((r.counts for r in runs), Counts()),
            sum(r.parse_errors for r in runs))


def print_kind(res: KindResult, backends: list[Any]) -> dict[str, float]:
    """Per-task latency table and totals of one agent kind; returns total seconds per key."""
    keys = [b.key for b in backends if b.key not in res.skipped]
    print(f"\n## {AGENTS[res.kind]}")
    for key, why in res.skipped.items():
        print(f"({key}) skipped for this agent: {why}")
    if not res.runs:
        return {}
    peers = [k for k in keys if k != "c"]
    header = ["#", "task"] + [f"({k}) s" for k in keys] + [f"({k})/(c)" for k in peers]
    header += [f"({k}) same as (c)" for k in peers]
    rows = [header]
    for i, runs in enumerate(res.runs):
        c = runs["c"].seconds
        row = [str(i + 1), short(TASKS[i][1], 44)] + [f"{runs[k].seconds:.2f}" for k in keys]
        row += [ratio(runs[k].seconds, c) for k in peers]
        row += [same_as(runs[k], runs["c"]) for k in peers]
        rows.append(row)
    sums = {k: totals(res, k)[0] for k in keys}
    identical = {k: sum(r[k].steps == r["c"].steps and r[k].output == r["c"].output
                        for r in res.runs) for k in peers}
    rows.append(["", "total"] + [f"{sums[k]:.2f}" for k in keys]
                + [ratio(sums[k], sums["c"]) for k in peers]
                + [f"{identical[k]}/{len(res.runs)} identical" for k in peers])
    print_table(rows)
    print()
    rows = [["backend", "", "latency s", "tools s", "LLM calls", "prompt tok", "prefilled tok",
             "cached tok", "generated tok", "parse errors", "latency / (c)",
             "prefilled / (c)"]]
    c_seconds, c_counts, _ = totals(res, "c")
    for b in backends:
        if b.key not in keys:
            continue
        seconds, n, errors = totals(res, b.key)
        rows.append([f"({b.key})", b.label, f"{seconds:.2f}", f"{n.tool_seconds:.2f}",
                     str(n.calls), str(n.prompt), str(n.prefilled), str(n.cached),
                     str(n.generated), str(errors), ratio(seconds, c_seconds),
                     ratio(n.prefilled, c_counts.prefilled)])
    print_table(rows)
    return sums


def print_prefill_check(backend: AgentrtBackend) -> None:
    pairs = backend.engine_prefill_checks
    same = sum(a == b for a, b in pairs)
    session, engine = sum(a for a, _ in pairs), sum(b for _, b in pairs)
    print(f"(c) prefill cross-check: session_stats.num_prefill_tokens {session} vs engine "
          f"counter {engine} over {len(pairs)} runs ({same}/{len(pairs)} runs equal)")


def print_targets(all_sums: list[dict[str, float]], skipped: dict[str, str]) -> None:
    print("\n## Targets (issue 5), total agent latency over the agents each backend ran")
    for key, target in (("a", 3.0), ("b", 1.5)):
        pairs = [s for s in all_sums if key in s and "c" in s]
        if not pairs:
            print(f"({key}) / (c) >= {target}×: not measured ({skipped.get(key, 'not run')})")
            continue
        peer, ours = sum(s[key] for s in pairs), sum(s["c"] for s in pairs)
        verdict = "met" if peer / ours >= target else "NOT met"
        print(f"({key}) / (c) >= {target}×: {peer / ours:.2f}× — {verdict}")
    pairs = [s for s in all_sums if "d" in s and "c" in s]
    if pairs:
        d, c = sum(s["d"] for s in pairs), sum(s["c"] for s in pairs)
        print(f"(d) / (c) (the session's share): {d / c:.2f}×")


class CpuWatch:
    """CPU time the *other* processes of the machine used while we ran (Linux /proc/stat):
    the machine's busy time minus this process's own (and its reaped children's)."""

    def __init__(self) -> None:
        self.start = (self._machine_busy(), self._own(), time.perf_counter())

    @staticmethod
    def _machine_busy() -> float | None:
        try:
            with open("/proc/stat") as f:
                user, nice, system, _idle, _iowait, irq, softirq, steal = map(
                    int, f.readline().split()[1:9])
        except (OSError, ValueError):
            return None
        return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _own() -> float:
        return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                     resource.getrusage(resource.RUSAGE_CHILDREN)))

    def report(self) -> str:
        busy0, own0, t0 = self.start
        busy = self._machine_busy()
        if busy is None or busy0 is None:
            return "other processes' CPU use: unknown (no /proc/stat)"
        other = max(0.0, (busy - busy0) - (self._own() - own0))
        wall = time.perf_counter() - t0
        return (f"other processes used {other:.0f} CPU-seconds during the {wall:.0f} s of "
                f"timed runs ({other / wall:.2f} of {os.cpu_count()} cores on average; "
                "our tool workers are included)")


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def print_header(args: argparse.Namespace, model_path: Path) -> None:
    import langchain_classic
    import langchain_core
    import langchain_huggingface
    import transformers

    print(f"model: {model_path} (float32; HF loads these same weights, llama.cpp the Q4_1 GGUF)")
    print(f"torch {torch.__version__} ({args.threads} threads), transformers "
          f"{transformers.__version__}, langchain-core {langchain_core.__version__}, "
          f"langchain-classic {langchain_classic.__version__}, langchain-huggingface "
          f"{getattr(langchain_huggingface, '__version__', '?')}")
    print(f"agents: {', '.join(args.agents)}; {len(args.task_list)} tasks; max_iterations "
          f"{args.max_iterations}; handle_parsing_errors=True; max new tokens per step "
          f"{args.max_new_tokens}; greedy; ChatAgentRT(constrained=False)")
    print(f"load average before the run: {load_average()}")


# --- main -----------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n    python")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", type=int, default=len(TASKS),
                   help=f"run the first N tasks of each agent (1..{len(TASKS)}, default: all)")
    p.add_argument("--agents", default="react,calling",
                   help="comma-separated agent kinds: react, calling (default: %(default)s)")
    p.add_argument("--max-new-tokens", type=int, default=48,
                   help="most tokens generated per model call (default: %(default)s)")
    p.add_argument("--max-iterations", type=int, default=4,
                   help="AgentExecutor max_iterations (default: %(default)s)")
    p.add_argument("--threads", type=int, default=torch.get_num_threads(),
                   help="torch threads (HF and agentrt) and llama.cpp n_threads "
                        "(default: %(default)s, torch's default)")
    p.add_argument("--skip-hf", action="store_true", help="skip (a) HF transformers")
    p.add_argument("--skip-llamacpp", action="store_true", help="skip (b) llama.cpp")
    args = p.parse_args(argv)
    args.agents = [a.strip() for a in args.agents.split(",") if a.strip()]
    if not args.agents or set(args.agents) - set(AGENTS):
        p.error(f"--agents takes a comma-separated subset of {sorted(AGENTS)}")
    if not 1 <= args.tasks <= len(TASKS):
        p.error(f"--tasks must be between 1 and {len(TASKS)}")
    if args.max_new_tokens < 1 or args.max_iterations < 1 or args.threads < 1:
        p.error("--max-new-tokens, --max-iterations and --threads must be positive")
    args.task_list = TASKS[: args.tasks]
    return args


def make_backends(args: argparse.Namespace, model_path: Path) -> tuple[list[Any], dict]:
    """(a), (b) when asked for and available, (c), (d); and why the others are skipped."""
    from agentrt import Engine

    backends: list[Any] = []
    skipped: dict[str, str] = {}
    if args.skip_hf:
        skipped["a"] = "--skip-hf"
    else:
        backends.append(HFBackend(model_path, args.max_new_tokens))
    reason = "--skip-llamacpp" if args.skip_llamacpp else llamacpp_unavailable()
    if reason:
        skipped["b"] = reason
    else:
        backends.append(LlamaCppBackend(args.max_new_tokens, args.threads))
    engine = Engine(dtype="float32", num_threads=args.threads)
    backends.append(AgentrtBackend(engine, args.max_new_tokens, session=True))
    backends.append(AgentrtBackend(engine, args.max_new_tokens, session=False))
    for key, why in skipped.items():
        print(f"({key}) skipped: {why}")
    return backends, skipped


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    from agentrt.models.files import resolve_model

    model_path = resolve_model(None)
    print_header(args, model_path)
    backends, skipped = make_backends(args, model_path)
    with tempfile.TemporaryDirectory() as folder, make_runtime(Path(folder)) as runtime:
        warm_up_tools(runtime)
        for b in backends:
            b.warm_up()
        print(f"warmed up: {', '.join(f'({b.key})' for b in backends)} and the tools")
        cpu = CpuWatch()
        results = []
        for kind in args.agents:
            print(f"\nrunning the {AGENTS[kind]}", flush=True)
            results.append(run_kind(kind, backends, args.task_list, runtime, args))
    print("\n# Results (latency = wall time of executor.invoke: model + framework + tools)")
    sums = [print_kind(res, backends) for res in results]
    ours = next(b for b in backends if b.key == "c")
    print_prefill_check(ours)
    for res in results:  # a backend skipped for one agent kind is reported in the targets
        skipped.update({k: f"{AGENTS[res.kind]}: {v}" for k, v in res.skipped.items()
                        if k not in skipped})
    print_targets(sums, skipped)
    print(f"\n{cpu.report()}; load average at the end: {load_average()} (it counts this "
          "run's own threads too). Other processes' load slows every backend; interleaving "
          "the backends per task keeps the ratios fairer than the absolute times.")
    ours.engine.close()
    print("command: " + shlex.join(sys.orig_argv))


if __name__ == "__main__":
    main()
