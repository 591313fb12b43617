"""python_repl: a persistent Python interpreter that runs each statement as soon as it is written.

One interpreter per agent session, in a worker forked from the warm template (``preload`` names
modules imported there once). Statements come complete from the fenced-code parser, or are cut
from a streamed ``code`` argument by the same splitter, and each runs the moment it is complete,
compiled in interactive mode (a bare expression prints its ``repr``, like the Python prompt).
stdout and stderr are captured (only the first and last ``max_output_chars // 2`` characters
are kept: an output flood costs no memory); the first exception stops the script like it would
stop a file, rejects the rest of the call (the model need not finish writing code that will not
run), and its traceback ends the observation. Running the pieces as they stream and running the
whole script at once give the same observation. Limits and confinement:
:class:`agentrt.agent.SandboxConfig`.

A thread that model code leaves running keeps going between statements and between calls, where
the CPU-time limit (a signal raised in a running statement) stops nothing: a watchdog thread ends
the interpreter when CPU time is spent outside statements past the call's budget (``max_cpu_s``),
with a message the caller reports; the session's next call starts afresh. Like every limit kept
inside the worker, code that sets out to can switch it off; the caller's wall-time limit cannot be.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import io
import linecache
import os
import re
import resource
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from agentrt.agent import sandbox as sandbox_module
from agentrt.agent import worker as worker_module
from agentrt.agent.parsers.statements import PythonStatementSplitter
from agentrt.agent.plugin import Invocation, Tool, ToolCallError, ToolSession, check_argument
from agentrt.agent.sandbox import SandboxConfig

__all__ = ["PythonReplTool"]

_RUNTIME_FILES = frozenset({sandbox_module.__file__, worker_module.__file__})
_FENCE = re.compile(r"^\s*```[\w+-]*[ \t]*\n|\n?```\s*$")
#: how often the watchdog looks for CPU time spent outside statements, and how much is too much
_WATCH_INTERVAL_S = 0.5
_MAX_IDLE_CPU_S = 0.1


@dataclass(frozen=True)
class PythonReplTool(Tool):
    """Run Python in a persistent, sandboxed interpreter."""

    name: ClassVar[str] = "python_repl"
    description: ClassVar[str] = (
        "Run Python code in a persistent interpreter and return what it prints "
        "(stdout, stderr, the value of bare expressions, and any error)."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"code": {"type": "string", "description": "Python source to run"}},
        "required": ["code"],
    }
    main_argument: ClassVar[str | None] = "code"

    #: modules imported once in the template process (warm for every session)
    preload: tuple[str, ...] = ()
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    #: longest observation; the middle of longer output is cut
    max_output_chars: int = 20_000

    def open_session(self, workdir: Path) -> ToolSession:
        return _ReplSession(self)


class _ReplSession(ToolSession):
    def __init__(self, tool: PythonReplTool) -> None:
        super().__init__(tool)
        self.tool: PythonReplTool = tool
        self.namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
        self.num_statements = 0
        self.is_running = False  # a statement is executing
        self.is_watched = False
        self.cpu_budget = float("inf")  # the process's CPU seconds at which this call's run out

    def start(self) -> Invocation:
        # NOTE: the worker has just moved the RLIMIT_CPU soft limit (the kernel moves it on too,
        # one second per SIGXCPU): read the call's budget now
        soft = resource.getrlimit(resource.RLIMIT_CPU)[0]
        self.cpu_budget = float("inf") if soft == resource.RLIM_INFINITY else soft
        # NOTE: started in a call, not in open_session: the sandbox needs one thread when applied
        if not self.is_watched and self.tool.isolation == "process" and self.tool.sandbox.max_cpu_s:
            threading.Thread(target=self._watch, name="python_repl-watchdog", daemon=True).start()
            self.is_watched = True
        return _ReplCall(self)

    def run(self, source: str, out: _Output) -> BaseException | None:
        """Run one complete top-level statement; return the exception it raised, if any."""
        self.num_statements += 1
        filename = f"<input-{self.num_statements}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                code = compile(source, filename, "single", dont_inherit=True)
                self.is_running = True
                exec(code, self.namespace)
            except BaseException as exc:  # noqa: BLE001 - user code: report everything
                _note_workdir_limit(exc, self.tool.sandbox)
                _print_exception(exc, out)
                return exc
            finally:
                self.is_running = False
                sys.stdout.flush()
        return None

    def _watch(self) -> None:
        """End the worker when threads left running spend CPU time past the call's budget
        while no statement runs; the caller reports the message from the worker's log."""
        before = _cpu_time()
        while True:
            idle, num_statements = not self.is_running, self.num_statements
            time.sleep(_WATCH_INTERVAL_S)
            now = _cpu_time()
            spent, before = now - before, now
            idle = idle and not self.is_running and num_statements == self.num_statements
            if idle and spent > _MAX_IDLE_CPU_S and now >= self.cpu_budget:
                os.write(2, (
                    f"{self.tool.name}: threads that the code left running used up the CPU "
                    f"limit of {self.tool.sandbox.max_cpu_s} s; the interpreter was stopped\n"
                ).encode())
                os._exit(1)


class _ReplCall(Invocation):
    main_argument = "code"

    def __init__(self, session: _ReplSession) -> None:
        self.session = session
        self.out = _Output(session.tool.max_output_chars)
        self.splitter = PythonStatementSplitter()
        self.streamed = ""  # code received as deltas so far

    def on_statement(self, text: str) -> None:
        self._run(text)

    def on_delta(self, key: str, text: str) -> None:
        if key == "code":
            self.streamed += text
            for statement in self.splitter.push(text):
                self._run(statement)

    def on_argument(self, key: str, value: Any) -> None:
        check_argument(PythonReplTool.parameters, key, value)
        if self.streamed and value.startswith(self.streamed):
            rest = value[len(self.streamed) :]
        else:
            rest = _strip_fence(value)
        for statement in self.splitter.push(rest) + self.splitter.flush():
            self._run(statement)
        self.streamed = ""

    def finish(self) -> str:
        for statement in self.splitter.flush():
            self._run(statement)
        return self._text()

    def _run(self, statement: str) -> None:
        if self.session.run(statement, self.out) is not None:
            raise ToolCallError(self._text())

    def _text(self) -> str:
        # NOTE: a lone surrogate (print('\ud800')) becomes U+FFFD in the worker, for every tool
        return self.out.text()


def _cpu_time() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _strip_fence(code: str) -> str:
    """Code given as plain text (a ReAct input) may come wrapped in a Markdown fence."""
    return _FENCE.sub("", code) if code.lstrip().startswith("```") else code


class _Output(io.TextIOBase):
    """A call's stdout and stderr: the first and the last ``max_chars // 2`` characters."""

    def __init__(self, max_chars: int) -> None:
        self.half = max_chars // 2
        self.head = ""
        self.tail: list[str] = []  # chunks, trimmed to the last `half` characters now and then
        self.num_tail_chars = 0
        self.num_chars = 0

    def writable(self) -> bool:
        return True

    def close(self) -> None:
        """Model code's ``sys.stdout.close()`` closes nothing: the call's output stays open."""

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self.num_chars += len(text)
        room = self.half - len(self.head)
        self.head += text[:room] if room > 0 else ""
        rest = text[max(room, 0, len(text) - self.half) :]
        if rest:
            self.tail.append(rest)
            self.num_tail_chars += len(rest)
            if self.num_tail_chars > 2 * self.half:
                self.tail = [_last("".join(self.tail), self.half)]
                self.num_tail_chars = len(self.tail[0])
        return len(text)

    def text(self) -> str:
        """What was written, with its middle cut when that was more than ``2 * half``."""
        tail = _last("".join(self.tail), self.half)
        cut = self.num_chars - len(self.head) - len(tail)
        if cut <= 0:
            return self.head + tail
        return f"{self.head}\n... [{cut} characters cut] ...\n{tail}"


def _last(text: str, num_chars: int) -> str:
    return text[len(text) - num_chars :] if num_chars < len(text) else text


def _note_workdir_limit(exc: BaseException, sandbox: SandboxConfig) -> None:
    """Name the limit behind a full working folder: its tmpfs says only "No space left"."""
    limit = sandbox.max_workdir_mb
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC and limit is not None:
        if "max_workdir_mb" not in str(exc):  # the audit hook's own message names it
            exc.add_note(f"the working folder holds at most {limit} MiB in all "
                         "(SandboxConfig.max_workdir_mb); remove files to make room")


def _print_exception(exc: BaseException, out: _Output) -> None:
    tb = exc.__traceback__
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<input-"):
        tb = tb.tb_next  # drop the runtime's frames above the user's code
    report = traceback.TracebackException(type(exc), exc, tb)
    frames = [f for f in report.stack if f.filename not in _RUNTIME_FILES]  # and the limits' own
    report.stack = traceback.StackSummary.from_list(frames)
    out.write("".join(report.format()))
