"""Interception policies on the real engine: agent requests that pause for tools, measured.

One run serves the same Poisson stream of agent requests with six policies — a fresh
:class:`agentrt.Engine` per policy, identical config otherwise — on the real default model
(SmolLM2-135M-Instruct, float32, this CPU), and prints InferCept's metrics side by side with
ratios to the vLLM-like baseline. ``benchmarks/sim_interception.py`` is the same experiment in
the simulator at A100 scale; this is its measured twin.

Workload: InferCept's Table 1 mixture, sampled by :func:`agentrt.sim.workload.table1_requests`
(kinds math, qa, ve, chatbot, image, tts uniformly; per request the number of interceptions,
their durations and the context length from the table; the token layout is described there).
Two scale factors make a run take minutes on a CPU, and both are printed:

- ``--duration-scale``: every interception's duration is multiplied by it;
- ``--token-scale``: prompt, decode-segment and observation lengths are multiplied by it
  (interception counts are not scaled).

Each request is an asyncio task. Its first segment is ``agenerate(prompt, keep_kv=True,
pause=Pause(kind, None))``: the engine learns each kind's duration itself. It then sleeps the
tool's (scaled) duration and ``aresume``s with the tool's observation tokens appended; the last
segment has ``keep_kv=False``. Prompts and observations are real text (standard-library
docstrings), a contiguous slice of it per request. Two decode modes, both in one run:

- trace: decode content is a pre-built trace of real text tokens, forced with
  ``forced_token_ids`` — the real forward pass runs every step, only the sampled token is
  replaced by the trace's; ``max_tokens`` = the segment's length, EOS ignored;
- free: greedy generation, ``max_tokens`` = the segment's length (EOS may end it early).

Policies (handling of a paused request's KV + admission order):
discard+fcfs (vLLM-like: drop the KV, a resumed request queues at the tail), discard+arrival
(InferCept's ImprovedDiscard), preserve, swap, least-waste+arrival (InferCept) and
least-waste+lamps (InferCept's handling with LAMPS's memory-over-time order). Every engine has
the prefix cache on, so a discarded context whose pages survive in it is not recomputed (a
vLLM with automatic prefix caching, stronger than InferCept's baseline).

The KV pool is deliberately small (``--num-blocks``) and the arrival rate high, so memory binds
and requests queue: throughput then measures how much work each policy wastes.

Metrics: throughput = completed requests / makespan (from the start of the arrival clock to
the last completion); KV = mean share of the device KV pool held (neither free nor evictable
prefix cache) and queue = mean requests waiting for admission, sampled every 0.1 s (both high:
memory binds); normalised latency = median over requests of (E2E − intercepted time) / output
tokens; mean TTFT; recompute share = engine ``recompute_seconds / forward_seconds``; waste in
GB·s (preserved idle KV, recompute stalls and synchronous swaps, memory × time); tokens
recomputed; tokens swapped (out + in); preemptions; P/D/S = how many interceptions ended
preserved / discarded / swapped.

    python benchmarks/interception.py              # ~11 min on 2 cores shared with other work
    python benchmarks/interception.py --quick      # ~3 min smoke test (too small to saturate)
    python benchmarks/interception.py --modes trace --policies discard+fcfs,least-waste+lamps
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import importlib
import inspect
import math
import os
import random
import shlex
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from agentrt import Engine, EngineConfig, Pause, SamplingParams
from agentrt.engine.llm_engine import EngineStats
from agentrt.intercept.cost import CostModel
from agentrt.models import load_tokenizer
from agentrt.models.config import ModelConfig
from agentrt.models.files import resolve_model
from agentrt.sim.workload import RequestSpec, Segment, table1_requests

BLOCK_SIZE = 16
TRACE_NOTE = ("trace replay: the real forward pass runs every step; only the sampled token is "
              "replaced by the trace's token (forced_token_ids)")
FREE_NOTE = "free generation: greedy, max_tokens = segment length; EOS may end a segment early"
_TEXT_MODULES = ("argparse", "json", "doctest", "typing", "difflib", "collections", "heapq",
                 "subprocess", "re", "pickle", "unittest", "inspect", "itertools", "pydoc",
                 "http.client", "urllib.request", "statistics", "threading", "textwrap",
                 "functools", "string", "logging", "pathlib", "decimal")
# InferCept's A100 profile for GPT-J-6B (the simulator's), for the CPU-vs-GPU comparison.
A100_GPTJ = CostModel(kv_bytes_per_token=2 * 28 * 4096 * 2, fwd_a=24.1e-3, fwd_b=0.328e-3,
                      fwd_c=1.3e-8, swap_seconds_per_token=40e-6, saturation_tokens=384)


@dataclass(frozen=True)
class Policy:
    key: str
    """Name for ``--policies``."""
    label: str
    handling: str
    order: str


POLICIES = (
    Policy("discard+fcfs", "vLLM-like (discard+fcfs)", "discard", "fcfs"),
    Policy("discard+arrival", "discard+arrival", "discard", "arrival"),
    Policy("preserve", "preserve+arrival", "preserve", "arrival"),
    Policy("swap", "swap+arrival", "swap", "arrival"),
    Policy("least-waste+arrival", "least-waste+arrival", "least-waste", "arrival"),
    Policy("least-waste+lamps", "least-waste+lamps", "least-waste", "lamps"),
)
BASELINE = POLICIES[0]
MODES = ("trace", "free")


# --- workload --------------------------------------------------------------------------------
@dataclass(frozen=True)
class RequestTokens:
    """The real text tokens of one request: its prompt, and per segment the trace of its
    decoded tokens and (except the last) the observation the tool returns."""

    prompt: list[int]
    outputs: list[list[int]]
    observations: list[list[int]]


def corpus_text() -> str:
    """~48k tokens of English prose: docstrings of standard-library modules and their public
    classes and functions (deterministic for a given Python version)."""
    parts = []
    for name in _TEXT_MODULES:
        mod = importlib.import_module(name)
        parts.append(inspect.cleandoc(mod.__doc__ or ""))
        for attr in sorted(vars(mod)):
            obj = vars(mod)[attr]
            if attr.startswith("_") or getattr(obj, "__module__", None) != mod.__name__:
                continue
            if inspect.isclass(obj) or inspect.isfunction(obj):
                parts.append(inspect.getdoc(obj) or "")
    return "\n\n".join(p for p in parts if p)


def sample_specs(args: argparse.Namespace) -> list[RequestSpec]:
    """The first ``--requests`` requests of the Table 1 stream, token counts scaled."""
    horizon = args.requests / args.rate
    while True:
        specs = table1_requests(args.rate, horizon, args.seed, args.duration_scale,
                                max_context_len=_unscaled_context_cap(args))
        if len(specs) >= args.requests:
            break
        horizon *= 1.5  # same seed: the stream only grows at its end
    return [scale_tokens(s, args.token_scale) for s in specs[: args.requests]]


def _unscaled_context_cap(args: argparse.Namespace) -> int:
    """Cap Table 1 contexts so one scaled request fits in half the KV pool."""
    return int(args.num_blocks * BLOCK_SIZE * 0.5 / args.token_scale)


def scale_tokens(spec: RequestSpec, scale: float) -> RequestSpec:
    segments = tuple(
        replace(seg, decode_len=max(1, round(seg.decode_len * scale)),
                observation_len=max(1, round(seg.observation_len * scale)) if seg.kind else 0)
        for seg in spec.segments)
    return replace(spec, prompt_len=max(8, round(spec.prompt_len * scale)), segments=segments)


def context_len(spec: RequestSpec) -> int:
    """Tokens of the whole request: prompt, every segment's output and observation."""
    return spec.prompt_len + sum(s.decode_len + s.observation_len for s in spec.segments)


def build_tokens(specs: Sequence[RequestSpec], corpus: list[int], seed: int
                 ) -> list[RequestTokens]:
    """Per request, a contiguous slice of the corpus from a random offset, cut into its
    prompt, decode traces and observations (so a request's context reads as one text)."""
    rng = random.Random(seed)
    out = []
    for spec in specs:
        start = rng.randrange(len(corpus))
        ids = [corpus[(start + i) % len(corpus)] for i in range(context_len(spec))]
        pos = spec.prompt_len
        outputs, observations = [], []
        for seg in spec.segments:
            outputs.append(ids[pos : pos + seg.decode_len])
            pos += seg.decode_len
            if seg.kind:
                observations.append(ids[pos : pos + seg.observation_len])
                pos += seg.observation_len
        out.append(RequestTokens(ids[: spec.prompt_len], outputs, observations))
    return out


# --- one request -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Record:
    """What one completed request measured."""

    kind: str
    e2e: float
    ttft: float
    intercepted: float
    output_tokens: int

    @property
    def normalized_latency(self) -> float:
        return (self.e2e - self.intercepted) / max(1, self.output_tokens)


def segment_call(seg: Segment, trace: list[int], mode: str, last: bool
                 ) -> tuple[SamplingParams, dict]:
    """Sampling params and engine kwargs of one segment."""
    kwargs: dict = {"keep_kv": not last}
    if not last:
        kwargs["pause"] = Pause(seg.kind or "tool", None)  # duration learned by the engine
    if mode == "trace":
        kwargs["forced_token_ids"] = trace
        return SamplingParams(max_tokens=len(trace), ignore_eos=True), kwargs
    return SamplingParams(max_tokens=seg.decode_len, temperature=0.0), kwargs


async def run_request(engine: Engine, spec: RequestSpec, tokens: RequestTokens, mode: str,
                      clock0: float) -> Record:
    await asyncio.sleep(max(0.0, clock0 + spec.arrival_time - time.monotonic()))
    start = time.monotonic()
    rid, num_out, out = spec.request_id, 0, None
    for i, seg in enumerate(spec.segments):
        last = i == len(spec.segments) - 1
        params, kwargs = segment_call(seg, tokens.outputs[i], mode, last)
        if i == 0:
            out = await engine.agenerate(tokens.prompt, params, request_id=rid, **kwargs)
        else:
            out = await engine.aresume(rid, tokens.observations[i - 1], params, **kwargs)
        num_out += len(out.token_ids)
        if not last:
            await asyncio.sleep(seg.duration)  # the tool runs
    first = out.stats.first_token_time
    return Record(spec.segments[0].kind or "", time.monotonic() - start,
                  (first - start) if first is not None else math.nan,
                  out.stats.intercepted_seconds, num_out)


# --- one run ---------------------------------------------------------------------------------
@dataclass
class RunResult:
    policy: Policy
    mode: str
    num_requests: int
    records: list[Record]
    makespan: float
    stats: EngineStats
    cost: CostModel
    """The engine's own T_fwd fit and swap cost at the end of the run."""
    setup_seconds: float = 0.0
    """Engine construction: model load and the start-up T_fwd profile."""
    kv_held: float = math.nan
    """Mean share of the device KV pool held (not free, not evictable prefix cache)."""
    queue: float = math.nan
    """Mean number of requests waiting for admission (new, resumed or preempted)."""

    @property
    def throughput(self) -> float:
        return len(self.records) / self.makespan if self.makespan > 0 else math.nan

    @property
    def median_normalized_latency(self) -> float:
        values = [r.normalized_latency for r in self.records]
        return statistics.median(values) if values else math.nan

    @property
    def mean_ttft(self) -> float:
        values = [r.ttft for r in self.records if not math.isnan(r.ttft)]
        return statistics.fmean(values) if values else math.nan

    @property
    def recompute_share(self) -> float:
        s = self.stats
        return s.recompute_seconds / s.forward_seconds if s.forward_seconds else math.nan

    @property
    def waste_gb_seconds(self) -> float:
        return self.stats.interceptions.waste_gb_seconds

    @property
    def swapped_tokens(self) -> int:
        it = self.stats.interceptions
        return it.num_swapped_out_tokens + it.num_swapped_in_tokens


def engine_config(policy: Policy, args: argparse.Namespace) -> EngineConfig:
    return EngineConfig(dtype="float32", block_size=BLOCK_SIZE, num_blocks=args.num_blocks,
                        host_kv_cache_gb=args.host_gb,
                        max_num_batched_tokens=args.max_batched_tokens,
                        interception_handling=policy.handling,
                        scheduling_policy=policy.order, profile_on_start=True,
                        num_threads=args.threads)


def run(policy: Policy, mode: str, specs: Sequence[RequestSpec],
        tokens: Sequence[RequestTokens], args: argparse.Namespace) -> RunResult:
    t0 = time.monotonic()
    engine = Engine(config=engine_config(policy, args))
    setup = time.monotonic() - t0
    try:
        records, makespan, load = asyncio.run(_drive(engine, mode, specs, tokens,
                                                     args.run_timeout))
    finally:
        engine.close()  # aborts whatever the timeout left unfinished
    return RunResult(policy, mode, len(specs), records, makespan, copy.deepcopy(engine.stats),
                     engine.cost_model, setup, *load)


async def _drive(engine: Engine, mode: str, specs: Sequence[RequestSpec],
                 tokens: Sequence[RequestTokens], timeout: float
                 ) -> tuple[list[Record], float, tuple[float, float]]:
    """Run every request; returns the records, the makespan and the mean (KV held, queue)."""
    clock0 = time.monotonic()
    tasks = [asyncio.create_task(run_request(engine, s, t, mode, clock0))
             for s, t in zip(specs, tokens, strict=True)]
    samples: list[tuple[float, int]] = []
    sampler = asyncio.create_task(_sample_load(engine, samples))
    done, pending = await asyncio.wait(tasks, timeout=timeout)
    ended = time.monotonic()
    sampler.cancel()
    for task in pending:
        task.cancel()
    await asyncio.gather(sampler, *pending, return_exceptions=True)
    records = [t.result() for t in done]  # a failed request raises here: a bug to look at
    load = (statistics.fmean(h for h, _ in samples), statistics.fmean(q for _, q in samples)) \
        if samples else (math.nan, math.nan)
    return records, ended - clock0, load  # the wait returns at the last completion


async def _sample_load(engine: Engine, out: list[tuple[float, int]], every: float = 0.1) -> None:
    """Every ``every`` s: share of the KV pool held, requests waiting (``Engine.load`` in a
    worker thread: it waits for the step in flight, the event loop does not)."""
    while True:
        load = await asyncio.to_thread(engine.load)
        out.append((load.kv_usage, load.num_waiting))
        await asyncio.sleep(every)


# --- report ----------------------------------------------------------------------------------
def _ratio(value: float, base: float | None) -> str:
    if not base or math.isnan(value) or math.isnan(base):
        return "    -"
    return f"{value / base:5.2f}×"


def _psd(r: RunResult) -> str:
    it = r.stats.interceptions
    return f"{it.num_preserve}/{it.num_discard}/{it.num_swap}"


HEADER = (f"{'policy':26} {'done':>7} {'makespan':>8} {'KV':>4} {'queue':>5} {'thr req/s':>14} "
          f"{'norm lat s/tok':>15} "
          f"{'TTFT s':>13} {'recomp':>6} {'waste GB·s':>15} {'recomp tok':>10} "
          f"{'swap tok':>9} {'preempt':>7} {'P/D/S':>11}")


def result_line(r: RunResult, base: RunResult | None) -> str:
    """One row; ratios to ``base`` (dashes without one)."""

    def of(metric: str) -> str:
        return _ratio(getattr(r, metric), getattr(base, metric) if base else None)

    return (f"{r.policy.label:26} {len(r.records):>3}/{r.num_requests:<3} {r.makespan:7.1f}s "
            f"{r.kv_held:4.0%} {r.queue:5.1f} {r.throughput:7.4f} {of('throughput')} "
            f"{r.median_normalized_latency:8.3f} {of('median_normalized_latency')} "
            f"{r.mean_ttft:6.2f} {of('mean_ttft')} "
            f"{r.recompute_share:6.1%} "
            f"{r.waste_gb_seconds:8.2f} {of('waste_gb_seconds')} "
            f"{r.stats.num_recomputed_tokens:>10,} {r.swapped_tokens:>9,} "
            f"{r.stats.num_preemptions:>7} {_psd(r):>11}")


def print_mode(mode: str, results: list[RunResult]) -> None:
    base = next((r for r in results if r.policy is BASELINE), None)
    print(f"\nmode {mode} — {TRACE_NOTE if mode == 'trace' else FREE_NOTE}")
    print(HEADER)
    for r in results:
        print(result_line(r, base))


def print_header(args: argparse.Namespace, specs: Sequence[RequestSpec], m_bytes: int,
                 corpus_tokens: int) -> None:
    pool = args.num_blocks * BLOCK_SIZE
    host_tokens = int(args.host_gb * 2**30 // (m_bytes * BLOCK_SIZE)) * BLOCK_SIZE
    print("MEASURED on this machine (real model, real forward passes; not a simulation)")
    print(f"model: default (SmolLM2-135M-Instruct), dtype float32, torch "
          f"{args.threads} thread(s) (--threads), {os.cpu_count()} CPUs, load average "
          f"{_load()} at start")
    print(f"KV pool: {args.num_blocks} blocks × {BLOCK_SIZE} = {pool:,} tokens "
          f"({pool * m_bytes / 1e6:.0f} MB, M = {m_bytes:,} B/token); host pool "
          f"{args.host_gb:g} GiB = {host_tokens:,} tokens; step budget "
          f"{args.max_batched_tokens} tokens; prefix cache on; fresh engine per run")
    kinds = Counter(s.segments[0].kind for s in specs)
    n_int = sum(len(s.segments) - 1 for s in specs)
    tool_s = sum(seg.duration for s in specs for seg in s.segments)
    print(f"workload: InferCept Table 1 mixture (agentrt.sim.workload), {len(specs)} "
          f"requests, Poisson {args.rate:g} req/s, seed {args.seed}: "
          + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    print(f"  interception durations × {args.duration_scale:g} (--duration-scale); prompt, "
          f"segment and observation tokens × {args.token_scale:g} (--token-scale); "
          f"interception counts unscaled")
    print(f"  {n_int} interceptions, {tool_s:.1f} s of tool time in all; tokens: prompts "
          f"{sum(s.prompt_len for s in specs):,}, decoded "
          f"{sum(s.output_len for s in specs):,}, observations "
          f"{sum(seg.observation_len for s in specs for seg in s.segments):,}; longest "
          f"request {max(context_len(s) for s in specs):,} tokens")
    print(f"  text: standard-library docstrings ({corpus_tokens:,} tokens), a contiguous "
          "slice per request (prompt | trace | observation | trace | ...)")
    print("  per segment: agenerate/aresume with keep_kv=True and pause=Pause(kind, None), "
          "asyncio.sleep(tool duration), aresume with the observation; last keep_kv=False")
    print("ratios (×) are to the vLLM-like baseline (discard+fcfs) of the same mode; KV = mean "
          "share of the KV pool held; queue = mean requests waiting for admission; recomp = "
          "recompute share of forward time; P/D/S = interceptions ended "
          "preserved/discarded/swapped; swap tok = out + in")


def print_verdict(by_mode: dict[str, list[RunResult]]) -> None:
    print("\ntarget: least-waste+lamps ≥ 1.6× the vLLM-like throughput at equal normalised "
          "latency (here: one offered load for every policy, so 'met' = ≥ 1.6× the completed "
          "requests/s with a median normalised latency no worse than the baseline's)")
    for mode, results in by_mode.items():
        base = next((r for r in results if r.policy is BASELINE), None)
        best = next((r for r in results if r.policy.key == "least-waste+lamps"), None)
        if base is None or best is None:
            continue
        thr = best.throughput / base.throughput
        lat = best.median_normalized_latency / base.median_normalized_latency
        met = thr >= 1.6 and lat <= 1.0 and len(best.records) == best.num_requests
        print(f"  {mode}: throughput {thr:.2f}×, median normalised latency {lat:.2f}×, "
              f"recompute share {base.recompute_share:.0%} → {best.recompute_share:.0%} "
              f"→ {'met' if met else 'not met'}")


def print_costs(by_mode: dict[str, list[RunResult]], specs: Sequence[RequestSpec]) -> None:
    """This CPU's cost profile next to the A100's, and what recompute costs on each."""
    runs = [r for rs in by_mode.values() for r in rs]
    if not runs:
        return
    a = statistics.median(r.cost.fwd_a for r in runs)
    b = statistics.median(r.cost.fwd_b for r in runs)
    swap = statistics.median(r.cost.swap_seconds_per_token for r in runs)
    steps = sum(r.stats.num_steps for r in runs)
    fwd = sum(r.stats.forward_seconds for r in runs)
    ctx = statistics.fmean(context_len(s) for s in specs)
    cpu = CostModel(runs[0].cost.kv_bytes_per_token, a, b)
    print("\ncost profile (engines' own online T_fwd fits, median over runs) vs InferCept's A100:")
    print(f"  this CPU: T_fwd(x) ≈ {a * 1e3:.1f} ms + {b * 1e3:.2f} ms·x; mean step "
          f"{fwd / steps * 1e3:.0f} ms over {steps:,} steps; swap {swap * 1e6:.1f} µs/token")
    print("  A100 GPT-J-6B: T_fwd(x) = 24.1 ms + 0.328 ms·x + 1.3e-5 ms·x²; swap 40 µs/token")
    for name, cost, c in (("this CPU", cpu, ctx), ("A100", A100_GPTJ, 1451.0)):
        extra = cost.t_fwd(c) - cost.fwd_a  # what c recomputed tokens add to an iteration
        print(f"  recomputing a mean context ({c:,.0f} tokens) on {name} adds {extra:.2f} s = "
              f"{extra / cost.t_fwd(1):.1f} decode steps; one token of prefill costs "
              f"{cost.fwd_b / cost.t_fwd(1):.3f} decode steps; a batch-8 decode step costs "
              f"{cost.t_fwd(8) / cost.t_fwd(1):.2f}× a batch-1 step")


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# --- main ------------------------------------------------------------------------------------
QUICK = dict(requests=6, rate=3.0, duration_scale=0.02, token_scale=0.05, num_blocks=24)
DEFAULTS = dict(requests=16, rate=2.0, duration_scale=0.05, token_scale=0.08, num_blocks=40)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    d, q = DEFAULTS, QUICK
    p.add_argument("--quick", action="store_true",
                   help=f"a ~3 min smoke test, too small to saturate the engine: defaults "
                        f"become {_fmt_defaults(q)}")
    p.add_argument("--requests", type=int, help=f"agent requests per run ({d['requests']})")
    p.add_argument("--rate", type=float,
                   help=f"Poisson arrival rate, req/s ({d['rate']:g}; high on purpose: the "
                        "engine must be saturated)")
    p.add_argument("--num-blocks", type=int,
                   help=f"device KV pool in {BLOCK_SIZE}-token blocks ({d['num_blocks']}; small "
                        "on purpose so memory binds)")
    p.add_argument("--duration-scale", type=float,
                   help=f"multiply Table 1 interception durations ({d['duration_scale']:g})")
    p.add_argument("--token-scale", type=float,
                   help=f"multiply prompt/segment/observation token counts "
                        f"({d['token_scale']:g})")
    p.add_argument("--seed", type=int, default=0, help="workload seed (0)")
    p.add_argument("--modes", default=",".join(MODES),
                   help="comma-separated decode modes: trace, free (both)")
    p.add_argument("--policies", default=",".join(pol.key for pol in POLICIES),
                   help="comma-separated policies (all): "
                        + ", ".join(pol.key for pol in POLICIES))
    p.add_argument("--host-gb", type=float, default=0.25, help="host swap pool, GiB (0.25)")
    p.add_argument("--max-batched-tokens", type=int, default=128,
                   help="token budget of one engine step (128: on this CPU a 128-token step "
                        "costs ~6 decode steps, as InferCept's S = 384 does on the A100)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (1: on 2 cores shared with other work, 2 threads contend "
                        "and a 256-token prefill ran ~1.5× slower than with 1)")
    p.add_argument("--run-timeout", type=float, default=240.0,
                   help="seconds before a run's unfinished requests are aborted (240)")
    args = p.parse_args(argv)
    for key, value in (q if args.quick else d).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.modes = _choose(p, args.modes, MODES, "--modes")
    keys = _choose(p, args.policies, tuple(pol.key for pol in POLICIES), "--policies")
    args.policies = [pol for pol in POLICIES if pol.key in keys]
    if args.requests < 1 or args.rate <= 0 or args.num_blocks < 8:
        p.error("need --requests >= 1, --rate > 0, --num-blocks >= 8")
    if not 0 < args.token_scale <= 1 or args.duration_scale < 0:
        p.error("need 0 < --token-scale <= 1 and --duration-scale >= 0")
    return args


def _fmt_defaults(values: dict) -> str:
    return ", ".join(f"--{k.replace('_', '-')} {v:g}" for k, v in values.items())


def _choose(p: argparse.ArgumentParser, text: str, allowed: Sequence[str], flag: str
            ) -> list[str]:
    chosen = [x.strip() for x in text.split(",") if x.strip()]
    unknown = sorted(set(chosen) - set(allowed))
    if unknown or not chosen:
        p.error(f"{flag}: choose from {', '.join(allowed)} (got {text!r})")
    return chosen


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.monotonic()
    model = ModelConfig.from_folder(resolve_model(None))
    corpus = load_tokenizer(resolve_model(None)).encode(corpus_text(), add_special_tokens=False)
    specs = sample_specs(args)
    tokens = build_tokens(specs, corpus, args.seed)
    m_bytes = model.kv_bytes_per_token  # float32
    print_header(args, specs, m_bytes, len(corpus))
    by_mode: dict[str, list[RunResult]] = {}
    for k, mode in enumerate(args.modes):
        results = by_mode.setdefault(mode, [])
        # NOTE: the second mode runs the policies in reverse order, so a drift in the machine's
        # load over the run does not favour the same policies in both modes
        order = args.policies if k % 2 == 0 else args.policies[::-1]
        print(f"\nrunning mode {mode} (progress; ratios in the tables below):", flush=True)
        for policy in order:
            r = run(policy, mode, specs, tokens, args)
            results.append(r)
            print(f"  {result_line(r, None)}   [setup {r.setup_seconds:.1f} s, load {_load()}]",
                  flush=True)
        results.sort(key=lambda r: POLICIES.index(r.policy))
    print("\n=== results ===")
    for mode, results in by_mode.items():
        print_mode(mode, results)
    print_verdict(by_mode)
    print_costs(by_mode, specs)
    print(f"\n{time.monotonic() - started:.0f} s in all; load average at the end {_load()}")
    print(f"command: {_command(argv)}")


def _command(argv: Sequence[str] | None) -> str:
    """The command line as run (interpreter relative to the working directory)."""
    args = list(argv if argv is not None else sys.argv[1:])
    return shlex.join([os.path.relpath(sys.executable), sys.argv[0], *args])


if __name__ == "__main__":
    main()
