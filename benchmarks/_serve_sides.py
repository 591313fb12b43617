"""The servers ``benchmarks/serve.py`` compares, each one command line on a free loopback port:
``agentrt serve`` (default flags), llama.cpp's own ``llama-server`` (parallel slots,
continuous batching) and, optionally, llama-cpp-python's server (one request at a time).

Nothing here is downloaded: ``llama-server`` is a program on this machine (a prebuilt one is
in the project's ``shared/peers/`` as a tarball; unpack it as its README says), and
llama-cpp-python's server runs from a Python that has it installed.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

MODEL = "SmolLM2-135M-Instruct"
LLAMA_SERVER_PLACES = ("/tmp/llama-server/llama-server",)
"""Where ``llama-server`` is looked for when ``--llama-server`` is not given (after
``$LLAMA_SERVER`` and ``PATH``): the README's ``tar xzf ... -C /tmp`` puts it here."""
DEFAULT_LLAMACPP_PYTHON = "/tmp/lcpp/bin/python"


@dataclass(frozen=True)
class ServerSpec:
    name: str
    command: Callable[[int], list[str]]
    """The command line that serves the model on ``127.0.0.1:<port>``."""
    ready_path: str = "/health"
    """A GET that answers 200 once the server serves requests."""


def agentrt_spec(extra: Sequence[str] = ()) -> ServerSpec:
    """``agentrt serve`` with its default flags, plus ``extra`` (e.g. ``--gguf-activations
    int8``)."""
    def command(port: int) -> list[str]:
        return [sys.executable, "-m", "agentrt", "serve", "--host", "127.0.0.1",
                "--port", str(port), "--served-model-name", MODEL, "--log-level", "warning",
                *extra]

    return ServerSpec("agentrt", command)


def llama_server_spec(binary: str, gguf: Path, slots: int, ctx_per_slot: int,
                      threads: int, extra: Sequence[str] = ()) -> ServerSpec:
    """llama.cpp's ``llama-server`` on ``gguf`` with ``slots`` parallel slots (``-np``), each
    ``ctx_per_slot`` tokens of context (``-c`` is their sum), ``threads`` threads, plus
    ``extra`` flags (e.g. ``--poll 0`` on a loaded machine: its threads spin-wait by
    default, which costs it seconds per token when other processes hold the cores)."""
    def command(port: int) -> list[str]:
        return [binary, "-m", str(gguf), "--jinja", "-np", str(slots),
                "-c", str(slots * ctx_per_slot), "-t", str(threads), "-tb", str(threads),
                "-a", MODEL, "--host", "127.0.0.1", "--port", str(port), *extra]

    return ServerSpec("llama-server", command)


def llamacpp_python_spec(python: str, gguf: Path, threads: int) -> ServerSpec:
    """llama-cpp-python's server (``interrupt_requests`` off, else a waiting request cuts a
    streamed answer short)."""
    def command(port: int) -> list[str]:
        return [python, "-m", "llama_cpp.server", "--model", str(gguf),
                "--model_alias", MODEL, "--host", "127.0.0.1", "--port", str(port),
                "--n_threads", str(threads), "--n_threads_batch", str(threads),
                "--n_ctx", "4096", "--interrupt_requests", "false", "--verbose", "false"]

    return ServerSpec("llama-cpp-python", command, ready_path="/v1/models")


def find_llama_server(given: str | None) -> str:
    """The ``llama-server`` to run, or ``SystemExit`` saying where it was looked for."""
    candidates = [given] if given else [os.environ.get("LLAMA_SERVER"),
                                        shutil.which("llama-server"), *LLAMA_SERVER_PLACES]
    for path in candidates:
        if path and os.access(path, os.X_OK):
            return path
    raise SystemExit(f"llama-server not found (looked at {[c for c in candidates if c]}): "
                     "unpack the prebuilt one, `tar xzf shared/peers/llama-server-*.tar.gz "
                     "-C /tmp`, or pass --llama-server PATH (or --no-llama-server)")


def llamacpp_python(given: str | None) -> tuple[str | None, str]:
    """The python that runs llama-cpp-python's server, or None and why not."""
    python = given or (DEFAULT_LLAMACPP_PYTHON if os.path.exists(DEFAULT_LLAMACPP_PYTHON)
                       else None)
    if python is None:
        return None, "not run (no --llamacpp-python)"
    check = subprocess.run([python, "-c", "import llama_cpp.server, llama_cpp; "
                            "print(llama_cpp.__version__)"], capture_output=True, text=True)
    if check.returncode != 0:
        last = (check.stderr.strip().splitlines() or ["?"])[-1]
        return None, f"not run: {python} cannot import llama_cpp.server ({last})"
    return python, f"llama-cpp-python {check.stdout.strip()} server ({python})"


class RunningServer:
    """A server subprocess on a free port; ``with`` waits for it and stops it at the end."""

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

        url = f"http://127.0.0.1:{self.port}{self.spec.ready_path}"
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.spec.name} exited with {self.process.returncode}; "
                                   f"log {self.log}:\n{self.log.read_text()[-2000:]}")
            try:
                if httpx.get(url, timeout=2).status_code == 200:
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
