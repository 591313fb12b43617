"""Serving benchmark: ``agentrt serve`` vs llama-cpp-python's OpenAI server, same clients.

Both servers are started by this script, one after the other (so they never share the
cores), on loopback, with the same model: agentrt runs the embedded SmolLM2-135M-Instruct
GGUF dequantized to float32 on its own engine; llama.cpp runs that very GGUF file (Q4_1)
with ``--n_threads`` threads. Each is then driven by the same code — the official
``openai`` async client — so switching servers changes only the command that starts it:

- ``--clients`` concurrent clients (default 8), each sending ``--requests`` chat requests
  (default 2) one after another, streamed, greedy, ``max_tokens`` = ``--max-tokens`` (64),
  the prompts taken in order from a fixed list of story prompts (long answers, so most
  requests generate the full ``max_tokens``);
- one warm-up request first, not measured.

Printed for each server, from one run: request throughput (requests / wall time), mean and
median time to first token (request sent → first content chunk), output tokens/s (all
clients' output tokens / wall time), mean output tokens per request, and the ratios
agentrt / llama.cpp. Output tokens are counted by re-tokenizing each answer with the
model's tokenizer on both sides (llama-cpp-python's stream carries no usage).

llama-cpp-python's server runs one request at a time (its default ``interrupt_requests``
would even cut a streaming answer short when another request waits; this script turns
that off); agentrt batches all clients continuously.

    python benchmarks/serve.py                          # N=8, both servers
    python benchmarks/serve.py --clients 16 --no-llamacpp
    python benchmarks/serve.py --llamacpp-python /opt/lcpp/bin/python
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

MODEL = "SmolLM2-135M-Instruct"
DEFAULT_LLAMACPP_PYTHON = "/tmp/lcpp/bin/python"
PROMPTS = [f"Write a long story about {topic}." for topic in (
    "a dragon who learns to bake bread", "a lighthouse keeper and a storm",
    "a robot that paints sunsets", "two friends crossing a desert",
    "a violin found in an attic", "a city built on the back of a whale",
    "a librarian who can read minds", "the last train of the night",
    "a garden that grows at midnight", "a comet passing close to Earth",
    "a detective cat in Paris", "a river that flows uphill",
    "a castle made of ice", "a child who talks to the wind",
    "an astronaut lost on Mars", "a clockmaker who stops time",
)]


# --- servers: one command each, everything else shared -------------------------------------------
@dataclass(frozen=True)
class ServerSpec:
    name: str
    command: Callable[[int], list[str]]
    """The command line that serves the model on ``127.0.0.1:<port>``."""


def agentrt_spec(clients: int, quantization: str = "none") -> ServerSpec:
    def command(port: int) -> list[str]:
        return [sys.executable, "-m", "agentrt", "serve", "--host", "127.0.0.1",
                "--port", str(port), "--max-batch", str(max(clients, 1)),
                "--quantization", quantization, "--log-level", "warning"]

    return ServerSpec("agentrt", command)


def llamacpp_spec(python: str, gguf: Path, threads: int) -> ServerSpec:
    def command(port: int) -> list[str]:
        return [python, "-m", "llama_cpp.server", "--model", str(gguf),
                "--model_alias", MODEL, "--host", "127.0.0.1", "--port", str(port),
                "--n_threads", str(threads), "--n_threads_batch", str(threads),
                "--n_ctx", "4096", "--interrupt_requests", "false", "--verbose", "false"]

    return ServerSpec("llama.cpp", command)


class RunningServer:
    """A server subprocess on a free port; ``with`` waits for it and kills it at the end."""

    def __init__(self, spec: ServerSpec, start_timeout: float = 300.0) -> None:
        self.spec = spec
        self.port = _free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.start_timeout = start_timeout
        self.log = Path(tempfile.mkstemp(prefix=f"serve-{spec.name}-", suffix=".log")[1])
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> RunningServer:
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(self.spec.command(self.port), stdout=out,
                                            stderr=subprocess.STDOUT)
        self._wait_ready()
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        assert self.process is not None
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if exc_type is None:
            self.log.unlink(missing_ok=True)  # kept, and named in the error, on failure

    def _wait_ready(self) -> None:
        import httpx

        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.spec.name} exited with {self.process.returncode}; "
                                   f"log {self.log}:\n{self.log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.base_url}/models", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"{self.spec.name} was not ready after {self.start_timeout:.0f} s; "
                           f"log {self.log}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- clients: the same OpenAI client code for every server ---------------------------------------
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
    def req_per_s(self) -> float:
        return len(self.requests) / self.wall

    @property
    def tok_per_s(self) -> float:
        return self.output_tokens / self.wall

    @property
    def ttft_mean(self) -> float:
        return statistics.fmean(r.ttft for r in self.requests)

    @property
    def ttft_median(self) -> float:
        return statistics.median(r.ttft for r in self.requests)

    @property
    def tokens_per_request(self) -> float:
        return self.output_tokens / len(self.requests)


async def one_request(client, prompt: str, max_tokens: int) -> RequestResult:
    """One streamed, greedy chat request; times its first content chunk and its end."""
    start = time.perf_counter()
    ttft, parts = None, []
    stream = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens,
        temperature=0.0, stream=True)
    async for chunk in stream:
        piece = chunk.choices[0].delta.content if chunk.choices else None
        if piece:
            ttft = ttft if ttft is not None else time.perf_counter() - start
            parts.append(piece)
    seconds = time.perf_counter() - start
    return RequestResult(ttft if ttft is not None else seconds, seconds, "".join(parts))


async def drive(base_url: str, clients: int, requests: int, max_tokens: int
                ) -> tuple[float, list[RequestResult]]:
    """Warm up, then ``clients`` concurrent clients × ``requests`` sequential requests each."""
    import openai

    async with openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0,
                                  timeout=600) as client:
        await one_request(client, "Say hello.", 8)

        async def worker(c: int) -> list[RequestResult]:
            return [await one_request(client, PROMPTS[(c * requests + i) % len(PROMPTS)],
                                      max_tokens) for i in range(requests)]

        start = time.perf_counter()
        per_client = await asyncio.gather(*(worker(c) for c in range(clients)))
        wall = time.perf_counter() - start
    return wall, [r for rs in per_client for r in rs]


def run(spec: ServerSpec, args: argparse.Namespace, tokenizer) -> RunResult:
    with RunningServer(spec) as server:
        wall, results = asyncio.run(drive(server.base_url, args.clients, args.requests,
                                          args.max_tokens))
    tokens = sum(len(tokenizer.encode(r.text, add_special_tokens=False)) for r in results)
    return RunResult(spec.name, wall, results, tokens)


# --- the peer's availability ---------------------------------------------------------------------
def llamacpp_python(args: argparse.Namespace) -> tuple[str | None, str]:
    """The python that runs llama-cpp-python's server, or None and why not."""
    if args.no_llamacpp:
        return None, "skipped (--no-llamacpp)"
    python = args.llamacpp_python
    if python is None:
        if not os.path.exists(DEFAULT_LLAMACPP_PYTHON):
            return None, (f"not run: no --llamacpp-python given and {DEFAULT_LLAMACPP_PYTHON} "
                          "does not exist (pip install 'llama-cpp-python[server]' into a venv "
                          "and pass its python)")
        python = DEFAULT_LLAMACPP_PYTHON
    check = subprocess.run([python, "-c", "import llama_cpp.server, llama_cpp; "
                            "print(llama_cpp.__version__)"], capture_output=True, text=True)
    if check.returncode != 0:
        last = (check.stderr.strip().splitlines() or ["?"])[-1]
        return None, f"not run: {python} cannot import llama_cpp.server ({last})"
    return python, (f"llama-cpp-python {check.stdout.strip()} server ({python}), same GGUF, "
                    f"--n_threads {args.threads}, one request at a time")


# --- report --------------------------------------------------------------------------------------
def report(results: list[RunResult]) -> None:
    rows = [
        ("requests/s", lambda r: r.req_per_s, "{:.3f}"),
        ("TTFT mean (s)", lambda r: r.ttft_mean, "{:.3f}"),
        ("TTFT median (s)", lambda r: r.ttft_median, "{:.3f}"),
        ("output tok/s", lambda r: r.tok_per_s, "{:.1f}"),
        ("output tokens / request", lambda r: r.tokens_per_request, "{:.1f}"),
        ("wall time (s)", lambda r: r.wall, "{:.2f}"),
    ]
    names = [r.name for r in results]
    ratio = len(results) == 2
    header = f"{'':26}" + "".join(f"{n:>12}" for n in names)
    print("\n" + header + (f"{'agentrt / ' + names[1]:>22}" if ratio else ""))
    for label, get, fmt in rows:
        line = f"{label:26}" + "".join(f"{fmt.format(get(r)):>12}" for r in results)
        if ratio:
            line += f"{get(results[0]) / get(results[1]):>21.2f}x"
        print(line)
    if ratio:
        print("(ratios above 1 favour agentrt for requests/s and tok/s, below 1 for TTFT)")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", type=int, default=8, help="concurrent clients (8)")
    p.add_argument("--requests", type=int, default=2, help="requests per client (2)")
    p.add_argument("--max-tokens", type=int, default=64, help="max_tokens per request (64)")
    p.add_argument("--threads", type=int, default=2, help="llama.cpp --n_threads (2)")
    p.add_argument("--llamacpp-python", default=None,
                   help=f"python with llama-cpp-python[server] (default "
                        f"{DEFAULT_LLAMACPP_PYTHON} when it exists)")
    p.add_argument("--no-llamacpp", action="store_true", help="run agentrt only")
    p.add_argument("--quantization", default="none", choices=["none", "int8", "int4"],
                   help="agentrt serve --quantization (default: none = float32 weights)")
    args = p.parse_args(argv)
    if min(args.clients, args.requests, args.max_tokens, args.threads) < 1:
        p.error("--clients, --requests, --max-tokens and --threads must be positive")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from agentrt.models import load_tokenizer, resolve_model
    from agentrt.models.files import default_gguf

    tokenizer = load_tokenizer(resolve_model(None))
    gguf = default_gguf()
    print(f"model: {MODEL} ({gguf.name}); {args.clients} clients x {args.requests} requests, "
          f"max_tokens={args.max_tokens}, greedy, streamed; {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f} before the run")
    specs = [agentrt_spec(args.clients, args.quantization)]
    python, note = llamacpp_python(args)
    print(f"agentrt: agentrt serve, float32 compute, --quantization {args.quantization}, "
          f"--max-batch {args.clients}")
    print(f"llama.cpp: {note}")
    if python is not None:
        specs.append(llamacpp_spec(python, gguf, args.threads))
    results = []
    for spec in specs:
        print(f"running {spec.name} ...", flush=True)
        results.append(run(spec, args, tokenizer))
    report(results)


if __name__ == "__main__":
    main()
