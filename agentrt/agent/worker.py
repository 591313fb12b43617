"""The tool worker: the loop that runs one tool session, in a forked process or a thread.

The caller talks to it over a duplex connection with the messages below; every ``FeedMsg`` gets a
``Fed`` reply (with the worker-side timestamps) and every ``FinishMsg`` a ``Finished`` reply, so the
caller can tell how far the tool got. Before each piece the worker peeks at its inbox and skips the
piece if the call was aborted meanwhile. A failing piece marks the call rejected; later pieces of
that call are skipped. In a process, signals turn into exceptions only while tool code runs:
SIGXCPU (the CPU-time limit) into :class:`~agentrt.agent.sandbox.ResourceLimitError`.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from agentrt.agent.parsers.base import Piece
from agentrt.agent.plugin import Invocation, LazyInvocation, Tool, ToolCallError, ToolSession
from agentrt.agent.sandbox import ResourceLimitError, SandboxReport, apply_sandbox, begin_call

__all__ = [
    "AbortMsg",
    "CloseMsg",
    "Connection",
    "Fed",
    "FeedMsg",
    "FinishMsg",
    "Finished",
    "OpenMsg",
    "Opened",
    "StartMsg",
    "serve",
]


class Connection(Protocol):
    """The duplex channel between caller and worker (a multiprocessing Connection or a twin)."""

    def send(self, obj: Any) -> None: ...
    def recv(self) -> Any: ...
    def poll(self, timeout: float | None = 0.0) -> bool: ...


@dataclass(frozen=True)
class OpenMsg:
    tool: Tool
    workdir: str
    in_process: bool


@dataclass(frozen=True)
class StartMsg:
    call_id: int
    lazy: bool


@dataclass(frozen=True)
class FeedMsg:
    call_id: int
    index: int
    piece: Piece


@dataclass(frozen=True)
class FinishMsg:
    call_id: int


@dataclass(frozen=True)
class AbortMsg:
    call_id: int


@dataclass(frozen=True)
class CloseMsg:
    pass


@dataclass(frozen=True)
class Opened:
    report: SandboxReport | None
    error: str | None = None


@dataclass(frozen=True)
class Fed:
    call_id: int
    index: int
    started: float
    ended: float
    error: str | None = None


@dataclass(frozen=True)
class Finished:
    call_id: int
    text: str
    is_error: bool
    started: float
    ended: float


_busy = threading.local()


def _on_cpu_limit(signum: int, frame: Any) -> None:
    if getattr(_busy, "value", False):
        raise ResourceLimitError("CPU time limit exceeded")


class _Worker:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.inbox: deque[Any] = deque()
        self.session: ToolSession | None = None
        self.tool: Tool | None = None
        self.call: Invocation | None = None
        self.call_id = -1
        self.failure: str | None = None

    def next_message(self) -> Any:
        return self.inbox.popleft() if self.inbox else self.conn.recv()

    def open(self, msg: OpenMsg) -> Opened:
        self.tool = msg.tool
        workdir = Path(msg.workdir)
        try:
            if msg.in_process:
                _redirect_std_fds(workdir)
                signal.signal(signal.SIGXCPU, _on_cpu_limit)
                signal.signal(signal.SIGINT, signal.SIG_IGN)
            self.session = msg.tool.open_session(workdir)
            report = apply_sandbox(msg.tool.sandbox, workdir) if msg.in_process else None
        except Exception as exc:  # the tool could not start: report, then exit
            return Opened(None, f"{msg.tool.name}: could not open the tool: {_describe(exc)}")
        return Opened(report)

    def start(self, msg: StartMsg) -> None:
        assert self.session is not None and self.tool is not None
        self.call_id, self.failure = msg.call_id, None
        if self.tool.isolation == "process":
            begin_call(self.tool.sandbox)
        call = self.session.start()
        self.call = LazyInvocation(call) if msg.lazy else call

    def feed(self, msg: FeedMsg) -> Fed:
        started = time.monotonic()
        call = self.call
        skip = msg.call_id != self.call_id or call is None or self.failure
        if skip or self._aborted(msg.call_id):
            return Fed(msg.call_id, msg.index, started, started)
        error = self._run(lambda: call.feed(msg.piece))
        self.failure = error
        return Fed(msg.call_id, msg.index, started, time.monotonic(), error)

    def finish(self, msg: FinishMsg) -> Finished:
        started = time.monotonic()
        call, self.call = self.call, None
        if msg.call_id != self.call_id or call is None:
            return Finished(msg.call_id, "the call was aborted", True, started, started)
        result: list[str] = []
        error = self.failure or self._run(lambda: result.append(call.finish()))
        text = error if error is not None else result[0]
        return Finished(msg.call_id, text, error is not None, started, time.monotonic())

    def abort(self, msg: AbortMsg) -> None:
        if msg.call_id == self.call_id and self.call is not None:
            self._run(self.call.abort)
            self.call = None

    def _aborted(self, call_id: int) -> bool:
        while self.conn.poll(0):
            self.inbox.append(self.conn.recv())
        return any(isinstance(m, AbortMsg) and m.call_id == call_id for m in self.inbox)

    def _run(self, fn: Any) -> str | None:
        _busy.value = True
        try:
            fn()
        except ToolCallError as exc:
            return str(exc)
        except ResourceLimitError:
            limit = self.tool.sandbox.max_cpu_s if self.tool else None
            return f"{self._name()}: CPU time limit of {limit} s exceeded"
        except BaseException as exc:  # a tool bug or a limit: never kill the worker loop
            return f"{self._name()}: {_describe(exc)}"
        finally:
            _busy.value = False
        return None

    def _name(self) -> str:
        return self.tool.name if self.tool else "tool"


def serve(conn: Connection) -> None:
    """Run the worker loop until the connection closes or a ``CloseMsg`` arrives."""
    worker = _Worker(conn)
    while True:
        try:
            msg = worker.next_message()
        except (EOFError, OSError):
            break
        if isinstance(msg, CloseMsg):
            break
        if isinstance(msg, OpenMsg):
            opened = worker.open(msg)
            conn.send(opened)
            if opened.error:
                break
        elif isinstance(msg, StartMsg):
            worker.start(msg)
        elif isinstance(msg, FeedMsg):
            conn.send(worker.feed(msg))
        elif isinstance(msg, FinishMsg):
            conn.send(worker.finish(msg))
        elif isinstance(msg, AbortMsg):
            worker.abort(msg)
    if worker.session is not None:
        try:
            worker.session.close()
        except Exception:
            pass


def _redirect_std_fds(workdir: Path) -> None:
    """Send what C code writes to fds 1 and 2 into a log file the caller can show on a crash."""
    fd = os.open(workdir / ".worker.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _describe(exc: BaseException) -> str:
    lines = traceback.format_exception_only(type(exc), exc)
    return "".join(lines).strip()
