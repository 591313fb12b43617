"""Serving benchmark: ``agentrt serve`` against llama.cpp's own ``llama-server``, same clients.

Each server is started by this script for each workload, one after the other (so they never
share the cores), on loopback, on the same GGUF file (default: the embedded
SmolLM2-135M-Instruct's, Q4_1): ``agentrt serve`` with its default flags (plus
``--agentrt-args``); ``llama-server`` with ``-np`` = the workload's clients (one parallel
slot each, continuous batching), ``-c`` = slots x ``--ctx-per-slot``, ``-t`` = ``--threads``.
llama-cpp-python's server (one request at a time) is an extra column with
``--llamacpp-python``. Every server is driven by the same code — the official ``openai``
async client — so switching servers changes only the command that starts it.

Workloads (``--sizes``, default 8 16 32, and ``--mix-clients``, default 16):

- ``N clients``: N concurrent clients, each sending ``--requests`` (2) requests one after
  another: a short story prompt, streamed, greedy, ``ignore_eos`` (both servers accept it),
  ``max_tokens`` = ``--max-tokens`` (64), so every request generates the same length;
- ``mix N``: the same, but every prompt is one long shared system prompt (~700 tokens, the
  prefix caches' case) followed by a question of 5 to ~400 tokens, the lengths mixed.

One warm-up request first, not measured. On ``/v1/completions`` (default; raw text, no chat
template) or ``/v1/chat/completions`` (``--endpoint chat``). Printed, one run each: output
tokens/s (all clients' output tokens / wall time; the answers re-tokenized with the model's
tokenizer on every side), mean and median time to first token (request sent -> first text
chunk), requests/s, and the ratios agentrt / llama-server.

    python benchmarks/serve.py                               # 8, 16, 32 clients and mix 16
    python benchmarks/serve.py --sizes 8 --mix-clients 8 --requests 1
    python benchmarks/serve.py --agentrt-args="--gguf-activations int8"
    python benchmarks/serve.py --llama-server-args="--poll 0"   # a machine others load
    python benchmarks/serve.py --llama-server /tmp/llama-server/llama-server --endpoint chat
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from _serve_sides import (
    MODEL,
    RunningServer,
    ServerSpec,
    agentrt_spec,
    find_llama_server,
    llama_server_spec,
    llamacpp_python,
    llamacpp_python_spec,
)

TOPICS = ("a dragon who learns to bake bread", "a lighthouse keeper and a storm",
          "a robot that paints sunsets", "two friends crossing a desert",
          "a violin found in an attic", "a city built on the back of a whale",
          "a librarian who can read minds", "the last train of the night",
          "a garden that grows at midnight", "a comet passing close to Earth",
          "a detective cat in Paris", "a river that flows uphill",
          "a castle made of ice", "a child who talks to the wind",
          "an astronaut lost on Mars", "a clockmaker who stops time")
SYSTEM = " ".join(
    f"Rule {i}: when the user asks about {topic}, answer in plain words, cite the manual's "
    f"section {i}, never invent a number, and keep the answer under two paragraphs."
    for i, topic in enumerate(TOPICS, 1))
"""The long system prompt every ``mix`` request starts with (~700 tokens)."""
MIX_WORDS = (5, 40, 120, 300)
"""Words of filler in a ``mix`` request's question, cycled over the requests."""


@dataclass(frozen=True)
class Workload:
    name: str
    clients: int
    mixed: bool

    def prompt(self, n: int) -> tuple[str | None, str]:
        """Request ``n``'s (system prompt, user text)."""
        topic = TOPICS[n % len(TOPICS)]
        if not self.mixed:
            return None, f"Write a long story about {topic}."
        filler = " ".join(f"detail{j} of {topic.split()[-1]}"
                          for j in range(MIX_WORDS[n % len(MIX_WORDS)] // 3))
        return SYSTEM, f"I have a question about {topic}. Context: {filler}. What should I do?"


@dataclass(frozen=True)
class RequestResult:
    ttft: float
    seconds: float
    text: str


@dataclass(frozen=True)
class RunResult:
    name: str
    wall: float
    requests: list[RequestResult]
    output_tokens: int

    @property
    def tok_per_s(self) -> float:
        return self.output_tokens / self.wall

    @property
    def ttft_mean(self) -> float:
        return statistics.fmean(r.ttft for r in self.requests)

    @property
    def ttft_p50(self) -> float:
        return statistics.median(r.ttft for r in self.requests)

    @property
    def req_per_s(self) -> float:
        return len(self.requests) / self.wall


async def one_request(client, endpoint: str, system: str | None, user: str,
                      max_tokens: int) -> RequestResult:
    """One streamed, greedy request with ``ignore_eos``; times its first text and its end."""
    start = time.perf_counter()
    ttft, parts = None, []
    common = dict(model=MODEL, max_tokens=max_tokens, temperature=0.0, stream=True,
                  extra_body={"ignore_eos": True})
    if endpoint == "chat":
        messages = ([{"role": "system", "content": system}] if system else []) + \
            [{"role": "user", "content": user}]
        stream = await client.chat.completions.create(messages=messages, **common)
    else:
        prompt = (f"{system}\n\n" if system else "") + f"User: {user}\nAssistant:"
        stream = await client.completions.create(prompt=prompt, **common)
    async for chunk in stream:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        piece = choice.delta.content if endpoint == "chat" else choice.text
        if piece:
            ttft = ttft if ttft is not None else time.perf_counter() - start
            parts.append(piece)
    seconds = time.perf_counter() - start
    return RequestResult(ttft if ttft is not None else seconds, seconds, "".join(parts))


async def drive(base_url: str, work: Workload, args: argparse.Namespace
                ) -> tuple[float, list[RequestResult]]:
    """Warm up, then ``work.clients`` concurrent clients x ``--requests`` requests each."""
    import openai

    async with openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0,
                                  timeout=900) as client:
        await one_request(client, args.endpoint, None, "Say hello.", 8)

        async def worker(c: int) -> list[RequestResult]:
            return [await one_request(client, args.endpoint,
                                      *work.prompt(c * args.requests + i), args.max_tokens)
                    for i in range(args.requests)]

        start = time.perf_counter()
        per_client = await asyncio.gather(*(worker(c) for c in range(work.clients)))
        wall = time.perf_counter() - start
    return wall, [r for rs in per_client for r in rs]


def run(spec: ServerSpec, work: Workload, args: argparse.Namespace, tokenizer) -> RunResult:
    print(f"  {spec.name} ...", flush=True)
    with RunningServer(spec) as server:
        wall, results = asyncio.run(drive(server.base_url, work, args))
    tokens = sum(len(tokenizer.encode(r.text, add_special_tokens=False)) for r in results)
    return RunResult(spec.name, wall, results, tokens)


METRICS = (("output tok/s", lambda r: r.tok_per_s, "{:.1f}"),
           ("TTFT mean s", lambda r: r.ttft_mean, "{:.3f}"),
           ("TTFT p50 s", lambda r: r.ttft_p50, "{:.3f}"),
           ("req/s", lambda r: r.req_per_s, "{:.2f}"))


def report(table: list[tuple[Workload, list[RunResult]]]) -> None:
    """One block per workload: each side's row, then agentrt / llama-server."""
    print("\n" + f"{'workload':12}{'side':24}" + "".join(f"{m[0]:>14}" for m in METRICS))
    for work, results in table:
        for i, r in enumerate(results):
            print(f"{work.name if i == 0 else '':12}{r.name:24}"
                  + "".join(f"{fmt.format(get(r)):>14}" for _, get, fmt in METRICS))
        mine = next(r for r in results if r.name == "agentrt")
        for peer in (r for r in results if r.name != "agentrt"):
            print(f"{'':12}{'agentrt / ' + peer.name:24}"
                  + "".join(f"{get(mine) / get(peer):>13.2f}x" for _, get, _f in METRICS))
    print("(above 1 favours agentrt for tok/s and req/s, below 1 for TTFT)")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="*", default=[8, 16, 32],
                   help="concurrent clients of the story workloads (8 16 32)")
    p.add_argument("--mix-clients", type=int, default=16,
                   help="clients of the shared-system-prompt mix (16; 0 = skip it)")
    p.add_argument("--requests", type=int, default=2, help="requests per client (2)")
    p.add_argument("--max-tokens", type=int, default=64, help="max_tokens per request (64)")
    p.add_argument("--endpoint", choices=["completions", "chat"], default="completions",
                   help="/v1/completions (default) or /v1/chat/completions")
    p.add_argument("--gguf", type=Path, default=None,
                   help="the GGUF both serve (default: the embedded model's file)")
    p.add_argument("--agentrt-args", default="",
                   help="extra `agentrt serve` flags, e.g. '--gguf-activations int8'")
    p.add_argument("--llama-server", default=None,
                   help="llama-server program (default: $LLAMA_SERVER, PATH, "
                        "/tmp/llama-server/llama-server)")
    p.add_argument("--no-llama-server", action="store_true", help="do not run llama-server")
    p.add_argument("--llama-server-args", default="",
                   help="extra llama-server flags, e.g. '--poll 0' on a machine others load")
    p.add_argument("--ctx-per-slot", type=int, default=2048,
                   help="llama-server context per slot (2048); -c = slots x this")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help="llama.cpp threads (default: one per core)")
    p.add_argument("--llamacpp-python", default=None,
                   help="python with llama-cpp-python[server]: adds its server as a column")
    args = p.parse_args(argv)
    if min([args.requests, args.max_tokens, args.threads, args.ctx_per_slot, *args.sizes]) < 1:
        p.error("--sizes, --requests, --max-tokens, --threads and --ctx-per-slot must be "
                "positive")
    if args.mix_clients < 0:
        p.error("--mix-clients must be >= 0")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from agentrt.models import load_tokenizer, resolve_model
    from agentrt.models.sources import default_gguf

    tokenizer = load_tokenizer(resolve_model(None))
    gguf = args.gguf or default_gguf()
    extra = shlex.split(args.agentrt_args)
    agentrt_cmd = agentrt_spec([*extra, *(["--model", str(gguf)] if args.gguf else [])])
    binary = None if args.no_llama_server else find_llama_server(args.llama_server)
    python, note = llamacpp_python(args.llamacpp_python)
    print(f"model: {gguf.name}; --requests {args.requests} per client, max_tokens "
          f"{args.max_tokens}, ignore_eos, greedy, streamed, /v1/{args.endpoint}; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} before the run")
    print(f"agentrt: agentrt serve {' '.join(extra) or '(default flags)'}")
    print(f"llama-server: {binary or 'not run'} -np <clients> -c <clients x "
          f"{args.ctx_per_slot}> -t {args.threads} {args.llama_server_args}")
    print(f"llama-cpp-python: {note}")
    works = [Workload(f"{n} clients", n, False) for n in args.sizes]
    if args.mix_clients:
        works.append(Workload(f"mix {args.mix_clients}", args.mix_clients, True))
    table = []
    for work in works:
        print(f"{work.name}:", flush=True)
        specs = [agentrt_cmd]
        if binary:
            specs.append(llama_server_spec(binary, gguf, work.clients, args.ctx_per_slot,
                                           args.threads, shlex.split(args.llama_server_args)))
        if python:
            specs.append(llamacpp_python_spec(python, gguf, args.threads))
        table.append((work, [run(spec, work, args, tokenizer) for spec in specs]))
        report(table[-1:])  # NOTE: each workload as it ends; the whole table at the end
    report(table)


if __name__ == "__main__":
    main()
