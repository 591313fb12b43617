"""Interception policies in the simulator at GPU scale: SIMULATION, not a measurement.

The same six policies as the real-engine benchmark (``benchmarks/interception.py``) run in
:mod:`agentrt.sim.simulator`, which drives agentrt's production policy code (scheduling
order, preserve/discard/swap handling, swap budget, duration estimator) over a bookkeeping
model of the KV pools. Nothing runs on a GPU; every time below is the cost model's.

Machine: GPT-J-6B in fp16 on one A100-40GB, InferCept's published profile:

- T_fwd(x) = 1.3e-5·x² + 0.328·x + 24.1 ms for an iteration of x scheduled tokens;
- swap 40 µs per token each way; saturation point S = 384 tokens per iteration (the token
  budget; chunked prefill and recompute fill what decodes leave);
- M = 2 (K, V) · 28 layers · 4096 hidden · 2 bytes = 458,752 bytes of KV per token;
- KV capacity = (0.9 × 40 GiB [vLLM's default memory share] − 12.11 GB of weights
  [6,053,381,344 parameters × 2 bytes] − 2 GiB for activations and workspace [assumed])
  / M = 53,188 tokens;
- host swap pool 128 GiB (``--swap-space 128`` in InferCept's 6B scripts) = 299,593 tokens.

Workload: InferCept's Table 1 mixture (math, QA, VE, chatbot, image, TTS, uniformly), Poisson
arrivals for ``--duration`` seconds, interception durations × ``--duration-scale``; the token
layout is described in :mod:`agentrt.sim.workload`. Every run lasts until its last
request completes (at most 3 × ``--duration``).

Why the default rates are below the paper's 1–4 req/s: with this T_fwd fit one iteration
computes at most ~2,500 tokens/s (384 tokens in 152 ms), and a Table 1 request needs its
~1,450 context tokens computed at least once — so even a policy that never recomputed would
saturate below ~1.7 req/s, and the vLLM-like baseline, which recomputes the context at every
interception (VE requests stop 28 times), saturates far below that.

Metrics (:mod:`agentrt.sim.sim_stats`): throughput = completed requests / simulated
seconds; normalised latency = median of (E2E − intercepted time) / output tokens; mean TTFT;
recompute share of forward time; waste in GB·s. Ratios are to the vLLM-like baseline
(discard + fcfs). P/D/S: where each interception's KV was when its tool returned
(preserved, discarded, swapped; in %). The sustainable rate is where a policy's median
normalised latency crosses ``--max-latency`` (linear interpolation between tested rates).

    python benchmarks/sim_interception.py
    python benchmarks/sim_interception.py --rates 0.5,1,2 --duration 300 --duration-scale 0.5
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from agentrt.intercept.cost import CostModel
from agentrt.sim.simulator import SimConfig, SimResult, simulate
from agentrt.sim.workload import table1_requests

GIB = 2**30
KV_BYTES_PER_TOKEN = 2 * 28 * 4096 * 2
GPTJ_WEIGHT_BYTES = 6_053_381_344 * 2
KV_CAPACITY_TOKENS = int((0.9 * 40 * GIB - GPTJ_WEIGHT_BYTES - 2 * GIB) // KV_BYTES_PER_TOKEN)
A100_GPTJ = CostModel(kv_bytes_per_token=KV_BYTES_PER_TOKEN, fwd_a=24.1e-3, fwd_b=0.328e-3,
                      fwd_c=1.3e-8, swap_seconds_per_token=40e-6, saturation_tokens=384)


@dataclass(frozen=True)
class Policy:
    label: str
    handling: str
    order: str


POLICIES = (
    Policy("vLLM-like (discard+fcfs)", "discard", "fcfs"),
    Policy("discard+arrival", "discard", "arrival"),
    Policy("preserve+arrival", "preserve", "arrival"),
    Policy("swap+arrival", "swap", "arrival"),
    Policy("least-waste+arrival", "least-waste", "arrival"),
    Policy("least-waste+lamps", "least-waste", "lamps"),
)
BASELINE = POLICIES[0]


def run(policy: Policy, rate: float, args: argparse.Namespace) -> SimResult:
    requests = table1_requests(rate, args.duration, args.seed, args.duration_scale)
    config = SimConfig(A100_GPTJ, KV_CAPACITY_TOKENS,
                       host_capacity_tokens=int(args.host_gib * GIB // KV_BYTES_PER_TOKEN),
                       policy=policy.order, handling=policy.handling,
                       score_refresh_interval=args.refresh, max_time=3 * args.duration)
    return simulate(config, requests)


# --- report ----------------------------------------------------------------------------------
def _ratio(value: float, base: float) -> str:
    return f"{value / base:5.2f}×" if base and math.isfinite(value / base) else "    -"


def _kept(r: SimResult) -> str:
    """Share of interceptions that ended preserved / discarded / swapped."""
    total = sum(r.strategy_counts.values()) or 1
    return "/".join(f"{100 * r.strategy_counts.get(s, 0) / total:.0f}"
                    for s in ("preserve", "discard", "swap"))


def print_rate(rate: float, results: dict[Policy, SimResult]) -> None:
    base = results[BASELINE]
    print(f"\nrate {rate:g} req/s — {base.num_requests} requests")
    print(f"{'policy':26} {'done':>9} {'thr req/s':>14} {'norm lat s/tok':>15} "
          f"{'TTFT s':>14} {'recompute':>9} {'waste GB·s':>16}  {'P/D/S %':>8}")
    for policy, r in results.items():
        print(f"{policy.label:26} {r.num_completed:>4}/{r.num_requests:<4} "
              f"{r.throughput:7.3f} {_ratio(r.throughput, base.throughput)} "
              f"{r.median_normalized_latency:8.3f} "
              f"{_ratio(r.median_normalized_latency, base.median_normalized_latency)} "
              f"{r.mean_ttft:7.2f} {_ratio(r.mean_ttft, base.mean_ttft)} "
              f"{r.recompute_share:9.1%} "
              f"{r.waste_gb_s:9.0f} {_ratio(r.waste_gb_s, base.waste_gb_s)}  {_kept(r):>8}")


def sustainable_rate(points: list[tuple[float, float]], limit: float) -> float | None:
    """Highest rate whose latency stays ≤ ``limit``, interpolated at the first crossing;
    None if even the lowest rate exceeds it, inf if no tested rate does."""
    if not points or points[0][1] > limit:
        return None
    for (r0, l0), (r1, l1) in zip(points, points[1:], strict=False):
        if l1 > limit:
            return r0 + (r1 - r0) * (limit - l0) / (l1 - l0)
    return math.inf


def print_sustainable(rates: list[float], table: dict[float, dict[Policy, SimResult]],
                      limit: float) -> None:
    print(f"\nsustainable rate at median normalised latency ≤ {limit:g} s/token "
          f"(interpolated between tested rates)")
    found = {p: sustainable_rate([(r, table[r][p].median_normalized_latency) for r in rates],
                                 limit) for p in POLICIES}
    base = found[BASELINE]
    for policy, rate in found.items():
        if rate is None:
            text, ratio = f"< {rates[0]:g}", "-"
        elif rate == math.inf:
            text, ratio = f"≥ {rates[-1]:g}", "-"
        else:
            text = f"{rate:.2f}"
            ratio = f"{rate / base:.2f}×" if base not in (None, math.inf) else "-"
        print(f"{policy.label:26} {text:>8} req/s   {ratio} vLLM-like")


# --- main ------------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    p.add_argument("--rates", default="0.25,0.375,0.5,0.75,1,1.25",
                   help="Poisson arrival rates in req/s, comma-separated "
                        "(0.25,0.375,0.5,0.75,1,1.25)")
    p.add_argument("--duration", type=float, default=600.0,
                   help="seconds of arrivals per run (600); runs end at the last completion "
                        "or 3× this")
    p.add_argument("--seed", type=int, default=0, help="workload seed (0)")
    p.add_argument("--duration-scale", type=float, default=1.0,
                   help="multiply Table 1 interception durations by this (1.0)")
    p.add_argument("--max-latency", type=float, default=0.2,
                   help="normalised latency (s/token) for the sustainable rate (0.2)")
    p.add_argument("--host-gib", type=float, default=128.0, help="host swap pool, GiB (128)")
    p.add_argument("--refresh", type=int, default=10,
                   help="LAMPS score refresh interval in iterations (10, as LAMPS on ToolBench)")
    args = p.parse_args(argv)
    args.rates = sorted(float(r) for r in args.rates.split(",") if r.strip())
    if not args.rates or min(args.rates) <= 0:
        p.error("--rates needs positive numbers")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.monotonic()
    print("SIMULATION (not measured): agentrt.sim.simulator with agentrt's policy code")
    print(f"GPT-J-6B fp16 on A100-40GB (InferCept profile): T_fwd = 1.3e-5·x² + 0.328·x + "
          f"24.1 ms, swap 40 µs/token, S = 384, M = {KV_BYTES_PER_TOKEN:,} B/token, "
          f"KV {KV_CAPACITY_TOKENS:,} tokens, host {args.host_gib:g} GiB")
    print(f"Table 1 mixture, {args.duration:g} s of arrivals, seed {args.seed}, "
          f"durations × {args.duration_scale:g}; ratios are to vLLM-like (discard+fcfs)")
    table = {}
    for rate in args.rates:
        table[rate] = {p: run(p, rate, args) for p in POLICIES}
        print_rate(rate, table[rate])
    print_sustainable(args.rates, table, args.max_latency)
    print(f"\n{time.monotonic() - started:.0f} s in all; command: {_command(argv)}")


def _command(argv: Sequence[str] | None) -> str:
    args = list(argv if argv is not None else sys.argv[1:])
    return shlex.join(["python", "benchmarks/sim_interception.py", *args])


if __name__ == "__main__":
    main()
