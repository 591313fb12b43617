"""The tool worker: the loop that runs one tool session, in a forked process or a thread.

The caller talks to it over the data-only wire (:mod:`agentrt.agent.wire`) with the messages
below: JSON in both directions, each side decoding only the messages it expects. The tool itself
never crosses this wire: a process worker receives it from the template at fork, a thread worker
as an argument. Every ``FeedMsg`` gets a ``Fed`` reply (with the worker-side timestamps) and every
``FinishMsg`` a ``Finished`` reply, so the caller can tell how far the tool got. Before each piece
the worker peeks at its inbox and skips the piece if the call was aborted meanwhile. A failing
piece marks the call rejected; later pieces of that call are skipped. In a process, signals turn
into exceptions only while tool code runs: SIGXCPU (the CPU-time limit) into
:class:`~agentrt.agent.sandbox.ResourceLimitError`.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from agentrt.agent.parsers.base import Piece
from agentrt.agent.plugin import Invocation, LazyInvocation, Tool, ToolCallError, ToolSession
from agentrt.agent.sandbox import (
    ResourceLimitError,
    SandboxReport,
    WorkdirMount,
    apply_sandbox,
    begin_call,
    mount_workdir,
    worker_environment,
)
from agentrt.agent.wire import MAX_FRAME_BYTES, Channel

__all__ = [
    "CALL_REPLIES",
    "MAX_RECEIVED_CHARS",
    "MAX_TEXT_CHARS",
    "REPLIES",
    "REQUESTS",
    "AbortMsg",
    "CloseMsg",
    "Fed",
    "FeedMsg",
    "FinishMsg",
    "Finished",
    "OpenMsg",
    "Opened",
    "StartMsg",
    "bounded_text",
    "serve",
]

#: longest observation or error text a worker sends (the rest is cut, with a note)
MAX_TEXT_CHARS = MAX_FRAME_BYTES // 16
#: longest text the caller takes from a worker: MAX_TEXT_CHARS and the note of the worker's cut
MAX_RECEIVED_CHARS = MAX_TEXT_CHARS + 64
_SURROGATE = re.compile("[\ud800-\udfff]")  # a lone surrogate: no UTF-8, no token


@dataclass(frozen=True)
class OpenMsg:
    """Open the tool's session in ``workdir``; ``env``: the variables the tool may see."""

    tag: ClassVar[str] = "open"
    workdir: str
    in_process: bool
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class StartMsg:
    tag: ClassVar[str] = "start"
    call_id: int
    lazy: bool


@dataclass(frozen=True)
class FeedMsg:
    tag: ClassVar[str] = "feed"
    call_id: int
    index: int
    piece: Piece


@dataclass(frozen=True)
class FinishMsg:
    tag: ClassVar[str] = "finish"
    call_id: int


@dataclass(frozen=True)
class AbortMsg:
    tag: ClassVar[str] = "abort"
    call_id: int


@dataclass(frozen=True)
class CloseMsg:
    tag: ClassVar[str] = "close"


@dataclass(frozen=True)
class Opened:
    tag: ClassVar[str] = "opened"
    report: SandboxReport | None
    error: str | None = None


@dataclass(frozen=True)
class Fed:
    tag: ClassVar[str] = "fed"
    call_id: int
    index: int
    started: float
    ended: float
    error: str | None = None


@dataclass(frozen=True)
class Finished:
    tag: ClassVar[str] = "finished"
    call_id: int
    text: str
    is_error: bool
    started: float
    ended: float


#: what a worker accepts from its caller, and what the caller accepts from a worker
REQUESTS: dict[str, type] = {
    m.tag: m for m in (OpenMsg, StartMsg, FeedMsg, FinishMsg, AbortMsg, CloseMsg)
}
REPLIES: dict[str, type] = {m.tag: m for m in (Opened, Fed, Finished)}
#: what the caller accepts once the session is open
CALL_REPLIES: dict[str, type] = {m.tag: m for m in (Fed, Finished)}


_busy = threading.local()


def _on_cpu_limit(signum: int, frame: Any) -> None:
    if getattr(_busy, "value", False):
        raise ResourceLimitError("CPU time limit exceeded")


class _Worker:
    def __init__(self, channel: Channel, tool: Tool) -> None:
        self.channel = channel
        self.tool = tool
        self.inbox: deque[Any] = deque()
        self.session: ToolSession | None = None
        self.call: Invocation | None = None
        self.call_id = -1
        self.failure: str | None = None

    def next_message(self) -> Any:
        return self.inbox.popleft() if self.inbox else self.channel.recv()

    def send(self, msg: Any) -> None:
        self.channel.send(msg)

    def open(self, msg: OpenMsg) -> Opened:
        workdir = Path(msg.workdir)
        mount: WorkdirMount | None = None
        try:
            if msg.in_process:
                signal.signal(signal.SIGXCPU, _on_cpu_limit)
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                os.environ.update(msg.env)
                # NOTE: before open_session, so the tool's own files land in the tmpfs too
                mount = mount_workdir(self.tool.sandbox, workdir)
            self.session = self.tool.open_session(workdir)
            if not msg.in_process:
                return Opened(None)
            (workdir / "tmp").mkdir(exist_ok=True)
            _replace_environment(worker_environment(workdir, msg.env))
            return Opened(apply_sandbox(self.tool.sandbox, workdir, mount))
        except Exception as exc:  # the tool could not start: report, then exit
            return Opened(None, bounded_text(f"{self._name()}: could not open the tool: "
                                         f"{_describe(exc)}"))

    def start(self, msg: StartMsg) -> None:
        assert self.session is not None
        self.call_id, self.failure = msg.call_id, None
        if self.tool.isolation == "process":
            begin_call(self.tool.sandbox)
        started: list[Invocation] = []
        # NOTE: a session whose start() raises fails this call, never the worker loop
        self.failure = self._run(lambda: started.append(self.session.start()))
        if self.failure is None:
            self.call = LazyInvocation(started[0]) if msg.lazy else started[0]

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
        if msg.call_id != self.call_id or (call is None and self.failure is None):
            return Finished(msg.call_id, "the call was aborted", True, started, started)
        result: list[str] = []
        error = self.failure or self._run(lambda: result.append(call.finish()))
        text = error if error is not None else _text(result[0])
        return Finished(msg.call_id, text, error is not None, started, time.monotonic())

    def abort(self, msg: AbortMsg) -> None:
        if msg.call_id == self.call_id and self.call is not None:
            self._run(self.call.abort)
            self.call = None

    def _aborted(self, call_id: int) -> bool:
        while self.channel.poll(0):
            self.inbox.append(self.channel.recv())
        return any(isinstance(m, AbortMsg) and m.call_id == call_id for m in self.inbox)

    def _run(self, fn: Any) -> str | None:
        _busy.value = True
        try:
            fn()
        except ToolCallError as exc:
            return bounded_text(str(exc))
        except ResourceLimitError:
            return f"{self._name()}: CPU time limit of {self.tool.sandbox.max_cpu_s} s exceeded"
        except BaseException as exc:  # a tool bug or a limit: never kill the worker loop
            return bounded_text(f"{self._name()}: {_describe(exc)}")
        finally:
            _busy.value = False
        return None

    def _name(self) -> str:
        return self.tool.name


def serve(channel: Channel, tool: Tool) -> None:
    """Run ``tool``'s worker loop until the channel closes or a ``CloseMsg`` arrives."""
    worker = _Worker(channel, tool)
    while True:
        try:
            msg = worker.next_message()
            if isinstance(msg, CloseMsg):
                break
            if isinstance(msg, OpenMsg):
                opened = worker.open(msg)
                worker.send(opened)
                if opened.error:
                    break
            elif isinstance(msg, StartMsg):
                worker.start(msg)
            elif isinstance(msg, FeedMsg):
                worker.send(worker.feed(msg))
            elif isinstance(msg, FinishMsg):
                worker.send(worker.finish(msg))
            elif isinstance(msg, AbortMsg):
                worker.abort(msg)
        except (EOFError, OSError):
            break
    if worker.session is not None:
        try:
            worker.session.close()
        except Exception:
            pass


def _replace_environment(env: dict[str, str]) -> None:
    """Make ``env`` the whole environment of this process (``os.environ`` and the C one)."""
    os.environ.clear()
    os.environ.update(env)


def _text(value: Any) -> str:
    if not isinstance(value, str):
        return bounded_text(f"the tool returned {type(value).__name__}, not str: {value!r}")
    return bounded_text(value)


def bounded_text(text: str, max_chars: int = MAX_TEXT_CHARS) -> str:
    """``text`` as an observation: valid Unicode (a lone surrogate, which no tokenizer or JSON
    encoder takes, becomes U+FFFD) and at most ``max_chars`` characters. The worker applies it
    to what it sends, the caller again (MAX_RECEIVED_CHARS) to what it receives: a worker may
    be hostile."""
    text = _SURROGATE.sub("\ufffd", text)
    if len(text) <= max_chars:
        return text
    cut = len(text) - max_chars
    return f"{text[:max_chars]}\n[... {cut} more characters cut]"


def _describe(exc: BaseException) -> str:
    lines = traceback.format_exception_only(type(exc), exc)
    return "".join(lines).strip()
