"""Small tools for the runtime tests (imported by name inside the workers)."""

from __future__ import annotations

import os
import textwrap
import threading
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from agentrt.agent import ArgumentInvocation, Invocation, SandboxConfig, Tool, ToolCallError


@dataclass(frozen=True)
class EchoTool(Tool):
    """Echoes its arguments; ``reject`` makes the argument with that value invalid."""

    name: ClassVar[str] = "echo"
    description: ClassVar[str] = "echo the arguments"
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"text": {"type": "string"}, "n": {"type": "integer"}},
    }
    main_argument: ClassVar[str | None] = "text"
    reject: str = "bad"

    def start(self) -> Invocation:
        return _Echo(self)


class _Echo(ArgumentInvocation):
    def on_value(self, key: str, value: Any) -> None:
        if value == self.tool.reject:
            raise ToolCallError(f"echo: {key}={value!r} is not allowed")

    def run(self, arguments: dict[str, Any]) -> str:
        return " ".join(f"{k}={v}" for k, v in sorted(arguments.items()))


@dataclass(frozen=True)
class MisbehavingTool(Tool):
    """``how``: "sleep" (forever), "exit" (the process dies), "raise" (a bug in the tool)."""

    name: ClassVar[str] = "misbehaving"
    description: ClassVar[str] = "a tool that goes wrong"
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"how": {"type": "string"}},
    }
    sandbox: SandboxConfig = field(default_factory=lambda: SandboxConfig(max_wall_s=0.5))

    def start(self) -> Invocation:
        return _Misbehave(self)


class _Misbehave(ArgumentInvocation):
    def on_value(self, key: str, value: Any) -> None:
        if value == "sleep":
            time.sleep(3600)
        elif value == "exit":
            os._exit(7)
        elif value == "raise":
            raise ZeroDivisionError("a bug in the tool")

    def run(self, arguments: dict[str, Any]) -> str:
        return f"pid {os.getpid()}"


@dataclass(frozen=True)
class ThreadAtOpenTool(EchoTool):
    """Starts a thread while its session opens, before the sandbox (refused by the worker)."""

    name: ClassVar[str] = "thread_at_open"

    def open_session(self, workdir):
        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
        return super().open_session(workdir)


@dataclass(frozen=True)
class ThreadEchoTool(EchoTool):
    name: ClassVar[str] = "thread_echo"
    isolation: ClassVar[str] = "thread"


SPIN_UNWATCHED = textwrap.dedent("""
    import os, signal, threading
    import agentrt_tools.python_repl as repl
    repl._cpu_time = lambda: 0.0  # the watchdog sees no CPU spent
    _ = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGXCPU})
    def spin():
        while True:
            pass
    threading.Thread(target=spin, daemon=True).start()
    print(os.getpid())
""")
"""python_repl code that switches off the REPL's own watchdog and leaves a thread spinning
between calls (prints the worker's pid): what only the caller's CPU checks can stop."""
