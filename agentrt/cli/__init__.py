"""The ``agentrt`` command line: ``agentrt run "prompt"``, ``agentrt chat``, ``agentrt serve``,
``agentrt models``, ``agentrt pull``.

All run on the embedded default model (SmolLM2-135M-Instruct) unless ``--model`` names a .gguf
file, a Hugging Face folder, a hub id in the local Hugging Face cache or
``ollama:[HOST[:PORT]/][NAMESPACE/]NAME[:TAG]``; nothing is downloaded but by ``agentrt pull``
or ``--pull``. ``serve`` imports the
server (the ``[server]`` extra) only when it runs.

Exit statuses: 0 done, 1 an error (a model not found, a prompt over the context, an address in
use), 2 a usage error (argparse's, and sampling values SamplingParams refuses), 130 Ctrl-C.
Messages go to stderr; stdout carries only answers, tables and JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import math
import os
import sys
import time
from collections.abc import Callable
from typing import get_args

from agentrt import env
from agentrt._version import __version__
from agentrt.backends import BACKENDS
from agentrt.cli.models import PULL_EPILOG, cmd_models, cmd_pull
from agentrt.cli.repl import (
    CHAT_EPILOG,
    chat_command,
    chat_turn,
    read_message,
    render,
    system_messages,
)
from agentrt.cli.stats import AnswerTiming
from agentrt.config import CpuDecodeThreads, DType, GGUFActivations, Quantization

__all__ = ["main"]


def _add_model_group(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--model", default=None, type=_model_name,
                   help="a .gguf file, a Hugging Face model folder, a hub id already in the "
                        "local Hugging Face cache (org/name[:QUANT]) or "
                        "ollama:[HOST[:PORT]/][NAMESPACE/]NAME[:TAG]; "
                        "`agentrt models` lists what is here (default: the embedded "
                        "SmolLM2-135M-Instruct, or $AGENTRT_MODEL)")
    g.add_argument("--pull", action="store_true",
                   help="download --model from the Hugging Face hub first if it is not on this "
                        "machine (org/name[:QUANT], into the HF cache; as `agentrt pull`)")
    g.add_argument("--device", default="auto", type=_device,
                   help="where the engine runs: auto, cpu, cuda or cuda:N (default: auto = "
                        "cuda when torch sees a GPU, else cpu)")
    g.add_argument("--dtype", default="auto",
                   choices=get_args(DType),
                   help="weight and KV-cache dtype (default: auto = float32 on CPU, bfloat16 "
                        "on a GPU that has it, else float16)")
    g.add_argument("--quantization", default="auto",
                   choices=get_args(Quantization),
                   help="weights: auto (default) = a GGUF file's own block formats on CPU, a "
                        "float folder as floats; gguf; none (= dtype); int8 / int4 = GGUF Q8_0 "
                        "/ Q4_1 groups re-quantized from floats (float32 compute)")
    g.add_argument("--gguf-activations", default="auto", choices=get_args(GGUFActivations),
                   help="how a GGUF file's blocks meet the activations: auto (default) = "
                        "int8 for the block formats where its quality is measured to hold "
                        "and its batched kernels are batch-invariant (none yet: docs/"
                        "quantization.md), float32 elsewhere; float32 = exact against the file's "
                        "values; int8 = llama.cpp's integer "
                        "dot products (faster decode, slightly different numbers)")
    g.add_argument("--threads", type=_positive_int, default=None, metavar="N",
                   help="CPU threads the engine computes on (default: torch's, one per core)")
    g.add_argument("--cpu-decode-threads", default="adaptive",
                   choices=get_args(CpuDecodeThreads),
                   help="adaptive (default): a CPU decode step runs fewer threads while other "
                        "processes take cores (a tool's subprocess, a build), and probes back "
                        "up; fixed: always --threads, as llama.cpp runs its -t")


def _model_name(value: str) -> str:
    if not value.strip():
        raise argparse.ArgumentTypeError("is empty (leave --model out for the default model)")
    return value


def _device(value: str) -> str:
    from agentrt.config import DEVICE_PATTERN

    if not DEVICE_PATTERN.fullmatch(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not auto, cpu, cuda or cuda:N")
    return value


def _add_model_args(p: argparse.ArgumentParser) -> None:
    _add_model_group(p)
    g = p.add_argument_group("sampling")
    g.add_argument("--max-tokens", type=int, default=256, metavar="N",
                   help="most tokens to generate (default 256)")
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    g.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (1 = off)")
    g.add_argument("--top-k", type=int, default=0, help="keep the k likeliest tokens (0 = off)")
    g.add_argument("--seed", type=int, default=None, help="seed for sampling")
    g.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    g.add_argument("--system", default=None, help="system prompt for the chat template")


def _add_verbose_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--verbose", "--stats", dest="verbose", action="store_true",
                        help="after each answer, print its timings on stderr as Ollama's "
                             "--verbose does (load, prompt eval and eval counts, durations, "
                             "rates)")


class _UsageError(ValueError):
    """A bad argument found after parsing; reported as argparse reports its own (status 2)."""


def _params(args: argparse.Namespace):
    from agentrt import SamplingParams

    try:
        return SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature,
                              top_p=args.top_p, top_k=args.top_k, seed=args.seed,
                              stop=tuple(args.stop))
    except (TypeError, ValueError) as exc:
        raise _UsageError(str(exc)) from None


def _engine(args: argparse.Namespace):
    from agentrt import Engine

    return Engine(args.model, download=args.pull, device=args.device, dtype=args.dtype,
                  quantization=args.quantization, gguf_activations=args.gguf_activations,
                  num_threads=args.threads, cpu_decode_threads=args.cpu_decode_threads)


def cmd_run(args: argparse.Namespace) -> int:
    """Answer one prompt, streaming the reply to stdout. The prompt is the argument, or stdin
    when the argument is left out or is -."""
    text, params = _prompt(args), _params(args)
    start = time.perf_counter()
    engine = _engine(args)
    timing = AnswerTiming(load_s=time.perf_counter() - start)
    try:
        prompt = text if args.raw else render(
            engine, system_messages(args.system) + [{"role": "user", "content": text.strip()}])
        for delta in engine.stream(prompt, params):
            print(timing.see(delta).text, end="", flush=True)
    finally:
        engine.close()
    print()
    if args.verbose:
        timing.print()
    return 0


def _prompt(args: argparse.Namespace) -> str:
    if args.raw and args.system is not None:
        raise _UsageError("--system goes into the chat template, which --raw skips")
    text = args.prompt
    if text is None or text == "-":
        if text is None and sys.stdin.isatty():
            raise _UsageError("give the prompt as an argument, or on stdin: "
                              "echo 'Hello' | agentrt run")
        text = sys.stdin.read()
    if not text.strip():
        raise _UsageError("the prompt is empty")
    return text


def cmd_chat(args: argparse.Namespace) -> int:
    """Chat with the model, one line a message; the conversation so far is served from the
    prefix cache. On a terminal it prompts with you> and assistant>; with stdin from a pipe or
    a file each line is a message and stdout holds only the answers, each ending with a
    newline."""
    params = _params(args)
    start = time.perf_counter()
    engine = _engine(args)
    load_s = time.perf_counter() - start  # reported with the first answer, as Ollama does
    tty = sys.stdin.isatty()
    if tty:
        print("agentrt chat: /? for help, /bye or Ctrl-D to quit", file=sys.stderr)
    messages = system_messages(args.system)
    try:
        while (line := read_message(tty)) is not None:
            if line.startswith("/"):
                if not chat_command(line, messages, args.system):
                    break
            elif line:
                timing = AnswerTiming(load_s) if args.verbose else None
                if chat_turn(engine, params, messages, line, tty, timing):
                    load_s = 0.0
    finally:
        engine.close()
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    """Serve an OpenAI-compatible HTTP API (chat completions with tools and streaming,
    completions, models, health, Prometheus metrics) on the local engine, and SGLang's native
    API (/generate, sessions, /abort_request) with the endpoints sglang-router needs from a
    worker. Concurrent clients share the engine's continuous batching; a client that
    disconnects frees its request. With --backend sglang --backend-url URL it fronts an
    SGLang server or router instead: chat templates, tool calls, grammars and both APIs
    here, the tokens there (no pause in place; KV gauges from the backend's /get_load)."""
    try:
        from agentrt.server import serve
    except ImportError as exc:
        if exc.name not in _SERVER_DEPS:
            raise
        print(f"agentrt: error: `agentrt serve` needs {exc.name}: "
              "pip install 'agentrt[server]'", file=sys.stderr)
        return 1
    if (args.backend == "local") == (args.backend_url is not None):
        print("agentrt: error: --backend-url goes with --backend sglang (and it needs one)",
              file=sys.stderr)
        return 2
    if args.backend != "local" and args.pull:
        print("agentrt: error: --pull goes with --backend local (the SGLang server loads its "
              "own model)", file=sys.stderr)
        return 2
    if args.backend == "local" and args.backend_api_key is not None:
        print("agentrt: error: --backend-api-key goes with --backend sglang", file=sys.stderr)
        return 2
    _check_address(args.host, args.port)
    engine_options = {} if args.backend != "local" else dict(
        device=args.device, dtype=args.dtype, quantization=args.quantization,
        download=args.pull, gguf_activations=args.gguf_activations, max_num_seqs=args.max_batch,
        kv_cache_gb=args.kv_cache_gb, num_threads=args.threads,
        cpu_decode_threads=args.cpu_decode_threads)
    try:
        serve(args.model, host=args.host, port=args.port, model_names=args.served_model_name,
              log_level=args.log_level, backend=args.backend, backend_url=args.backend_url,
              api_key=args.api_key or env.api_key(),
              max_body_bytes=int(args.max_body_mb * 2**20),
              embedding_model=args.embedding_model, cors_origins=args.cors_origin,
              backend_api_key=None if args.backend == "local"
              else args.backend_api_key or env.backend_api_key(), **engine_options)
    except (ConnectionError, ValueError) as exc:  # NOTE: ValueError: a bad name or origin
        print(f"agentrt: error: {exc}", file=sys.stderr)
        return 1
    return 0


def _check_address(host: str, port: int) -> None:
    """Raise OSError if the server could not listen on host:port, before the model loads
    (uvicorn finds out only once it starts)."""
    import socket

    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            probe.bind(address)
    except OSError as exc:
        raise OSError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


_SERVER_DEPS = frozenset({"fastapi", "uvicorn", "starlette", "prometheus_client", "pydantic"})
_SERVE_EPILOG = """examples:
  agentrt serve                          # SmolLM2-135M-Instruct on http://127.0.0.1:8000/v1
  agentrt serve --host 0.0.0.0 --port 8080 --max-batch 32 --served-model-name smol

  curl http://127.0.0.1:8000/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{"model": "SmolLM2-135M-Instruct", "messages": [{"role": "user", "content": "Hi"}]}'

  from openai import OpenAI             # any OpenAI client; the key is checked only
  client = OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="x")  # with --api-key
  client.chat.completions.create(model="SmolLM2-135M-Instruct",
                                 messages=[{"role": "user", "content": "Hi"}])

  # a front server for an SGLang server or router (tokenizer from its /model_info path,
  # or from --model): chat templates, tool calls and grammars here, the tokens there
  agentrt serve --port 8000 --backend sglang --backend-url http://127.0.0.1:30000

  # several workers behind SGLang's router (pip install sglang-router), cache-aware:
  agentrt serve --port 8001 & agentrt serve --port 8002 &
  python -m sglang_router.launch_router --host 127.0.0.1 --port 8000 --policy cache_aware \\
    --worker-urls http://127.0.0.1:8001 http://127.0.0.1:8002

OpenAI requests without "temperature" are greedy; without "model", they use the served
model. Native /generate requests keep SGLang's defaults (temperature 1, 128 new tokens)."""


def _add_serve_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("server")
    g.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; 0.0.0.0 for all interfaces)")
    g.add_argument("--port", type=_port, default=8000,
                   help="port to listen on, 0-65535 (default 8000; 0 = a free port, which "
                        "the startup line names)")
    g.add_argument("--served-model-name", nargs="+", default=[], metavar="NAME",
                   help="name(s) clients pass as `model` and /v1/models lists "
                        "(default: the model's short name, e.g. SmolLM2-135M-Instruct)")
    g.add_argument("--log-level", default="info",
                   choices=["critical", "error", "warning", "info", "debug"],
                   help="uvicorn's log level (default info)")
    g.add_argument("--backend", default="local", choices=BACKENDS.names(),
                   help="where the tokens come from: local (this process's engine, the "
                        "default) or sglang (the SGLang server or router at --backend-url; "
                        "--model then only says where its tokenizer is, if the server's "
                        "own model path is not on this machine)")
    g.add_argument("--backend-url", default=None, metavar="URL",
                   help="the SGLang server or router for --backend sglang, e.g. "
                        "http://127.0.0.1:30000")
    g.add_argument("--api-key", default=None, metavar="KEY",
                   help="require 'Authorization: Bearer KEY' on every route but /health and "
                        "/metrics, as vLLM's and SGLang's --api-key (default: "
                        "$AGENTRT_API_KEY; unset = no key)")
    g.add_argument("--max-body-mb", type=_positive_float, default=32, metavar="MB",
                   help="largest request body accepted, in MiB; a larger one is a 413, "
                        "unread (default 32)")
    g.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                   help="let browsers on ORIGIN (scheme://host[:port] or '*') call the API; "
                        "repeatable (default: none)")
    g.add_argument("--embedding-model", default=None, metavar="NAME",
                   help="serve /v1/embeddings with NAME beside the chat model "
                        "(all-minilm-l6-v2, in agentrt[rag]; default: none)")
    g.add_argument("--backend-api-key", default=None, metavar="KEY",
                   help="with --backend sglang: the key the SGLang server was started with "
                        "(its --api-key), sent as 'Authorization: Bearer KEY' on every call "
                        "to it (default: $AGENTRT_BACKEND_API_KEY; unset = none)")
    _add_model_group(p)
    g = p.add_argument_group("engine")
    g.add_argument("--max-batch", type=_positive_int, default=64,
                   help="most requests decoded together; more wait for a slot (default 64)")
    g.add_argument("--kv-cache-gb", type=float, default=1.0,
                   help="size of the KV-cache pool shared by all requests (default 1.0)")


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number, 0-65535, got {value}")
    return value


COMMANDS: dict[str, tuple[Callable[[argparse.Namespace], int], str]] = {
    "run": (cmd_run, "answer one prompt on the local engine and stream the reply"),
    "chat": (cmd_chat, "chat interactively with the local engine"),
    "serve": (cmd_serve, "serve an OpenAI-compatible HTTP API on the local engine"),
    "models": (cmd_models, "list the models on this machine (embedded, Ollama, HF cache)"),
    "pull": (cmd_pull, "download a model from the Hugging Face hub into its cache"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentrt",
        description="agentrt: a local agent runtime with its own paged-KV LLM engine. "
                    "Runs on CPU with the embedded SmolLM2-135M-Instruct by default.",
        epilog='examples:\n  agentrt run "What is the capital of France?"\n'
               "  agentrt chat --system 'You are terse.'\n"
               "  agentrt run --model ./my-qwen2-folder --max-tokens 64 'Hello'\n"
               "  agentrt models              # what --model can name on this machine\n"
               "  agentrt pull Qwen/Qwen3-4B-GGUF:Q4_K_M   # download a model (the only "
               "download)\n"
               "  agentrt serve --port 8000   # OpenAI-compatible API at /v1",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-V", "--version", action="version", version=f"agentrt {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = sub.add_parser("run", help=COMMANDS["run"][1],
                         description=inspect.cleandoc(cmd_run.__doc__ or ""),
                         epilog=_RUN_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("prompt", nargs="?", default=None,
                     help="the user message (or raw text with --raw); - or left out: read it "
                          "from stdin")
    run.add_argument("--raw", action="store_true",
                     help="send the prompt as raw text, without the chat template")
    _add_verbose_arg(run)
    _add_model_args(run)
    chat = sub.add_parser("chat", help=COMMANDS["chat"][1], epilog=CHAT_EPILOG,
                          description=inspect.cleandoc(cmd_chat.__doc__ or ""),
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_verbose_arg(chat)
    _add_model_args(chat)
    serve = sub.add_parser("serve", help=COMMANDS["serve"][1], epilog=_SERVE_EPILOG,
                           description=inspect.cleandoc(cmd_serve.__doc__ or ""),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_serve_args(serve)
    models = sub.add_parser("models", help=COMMANDS["models"][1],
                            description=inspect.cleandoc(cmd_models.__doc__ or ""))
    models.add_argument("--json", action="store_true", help="print JSON instead of a table")
    pull = sub.add_parser("pull", help=COMMANDS["pull"][1], epilog=PULL_EPILOG,
                          description=inspect.cleandoc(cmd_pull.__doc__ or ""),
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    pull.add_argument("name", type=_model_name,
                      help="org/name[@REVISION][:QUANT or FILE.gguf]")
    pull.add_argument("-q", "--quiet", action="store_true",
                      help="no progress bars; print only the path")
    for subparser in sub.choices.values():
        subparser.set_defaults(usage_error=subparser.error)
    return parser


_RUN_EPILOG = """examples:
  agentrt run "What is the capital of France?"
  echo "What is 2 + 2?" | agentrt run --max-tokens 64
  agentrt run - < question.txt
  agentrt run --raw --stop . "The capital of France is"
  agentrt run --temperature 0.8 --seed 1 --stats "Write a haiku about rain\""""


def main(argv: list[str] | None = None) -> int:
    """Run the command line on ``argv`` (default: ``sys.argv[1:]``) and return the exit status:
    0 done, 1 an error, 2 a usage error (argparse exits with it itself), 130 Ctrl-C."""
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command][0](args)
    except _UsageError as exc:
        args.usage_error(str(exc))  # exits with status 2
    except BrokenPipeError:  # a reader that left (| head): no traceback, no flush error at exit
        with contextlib.suppress(OSError, ValueError):  # stdout may have no file descriptor
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except (OSError, ValueError) as exc:
        print(f"agentrt: error: {exc}", file=sys.stderr)
        return 1
    return 2  # pragma: no cover (usage_error exits)


if __name__ == "__main__":
    sys.exit(main())
