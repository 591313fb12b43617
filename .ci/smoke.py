"""Smoke test of the installed wheels (CI's non-editable job, run outside the checkout):
int4 generation on the default model with the C++ kernels built from the wheel's sources,
ChatAgentRT with langchain-core alone, the LlamaIndex imports, and `agentrt serve` answering
one request on loopback."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
import warnings
from pathlib import Path

from agentrt_kernels.cpu.build import KERNELS, KernelFallbackWarning, load_library

warnings.simplefilter("error", KernelFallbackWarning)  # NOTE: a fallback here is a broken wheel


def check_installed_not_editable() -> None:
    import agentrt
    import langchain_agentrt

    for module in (agentrt, langchain_agentrt):
        assert "site-packages" in module.__file__, f"{module.__name__} from {module.__file__}"
    print(f"smoke: agentrt {agentrt.__version__} from {Path(agentrt.__file__).parent}")


def check_int4_generate() -> None:
    from agentrt import Engine, SamplingParams

    for name in KERNELS:
        load_library(name)  # raises KernelUnavailable with the reason
    with Engine(quantization="int4") as engine:
        out = engine.generate("The capital of France is", SamplingParams(max_tokens=8))
    assert out.text.strip(), out
    print(f"smoke: int4 generate: {out.text!r}")


def check_langchain_core_only() -> None:
    from langchain_agentrt import ChatAgentRT

    reply = ChatAgentRT(max_tokens=8).invoke("What is the capital of France?")
    assert reply.content.strip() and reply.usage_metadata["output_tokens"] > 0, reply
    print(f"smoke: ChatAgentRT invoke: {reply.content!r}")
    for absent in ("langchain", "langchain_classic"):
        try:
            __import__(absent)
        except ImportError:
            continue
        raise AssertionError(f"{absent} is installed: langchain-agentrt must need only core")
    import agentrt

    try:
        agentrt.Executor  # noqa: B018
    except ImportError as exc:
        assert "pip install 'langchain-agentrt[executor]'" in str(exc), exc
        print(f"smoke: agentrt.Executor without langchain-classic: {exc}")
    else:
        raise AssertionError("agentrt.Executor imported without langchain-classic")


def check_llama_index_imports() -> None:
    from llama_index.embeddings.agentrt import AgentRTEmbedding  # noqa: F401
    from llama_index.llms.agentrt import AgentRT

    print(f"smoke: LlamaIndex: {AgentRT.class_name()}")


def check_serve() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cli = Path(sys.executable).parent / "agentrt"
    server = subprocess.Popen([str(cli), "serve", "--host", "127.0.0.1", "--port", str(port),
                               "--log-level", "warning"])
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(base, server)
        body = json.dumps({"messages": [{"role": "user", "content": "Say hello."}],
                           "max_tokens": 8}).encode()
        request = urllib.request.Request(f"{base}/v1/chat/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:
            answer = json.load(response)
        text = answer["choices"][0]["message"]["content"]
        assert text.strip(), answer
        print(f"smoke: agentrt serve on port {port}: {text!r}")
    finally:
        server.terminate()
        server.wait(timeout=30)


def _wait_healthy(base: str, server: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"agentrt serve exited with {server.returncode}")
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=5):
                return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"agentrt serve not healthy after {timeout}s")


if __name__ == "__main__":
    check_installed_not_editable()
    check_int4_generate()
    check_langchain_core_only()
    check_llama_index_imports()
    check_serve()
    print("smoke: all checks passed")
