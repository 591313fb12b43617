"""The caller side of tool execution: one worker per (agent session, tool), calls streamed into it.

:class:`ToolRuntime` owns the warm template process and the workers; :meth:`ToolRuntime.start`
returns a :class:`ToolCall`, whose :meth:`~ToolCall.feed` never blocks (the decode loop keeps
going while the tool works) and whose :meth:`~ToolCall.poll` reports an early rejection. The
runtime enforces the wall-time limit: a worker busy on one piece (or on ``finish``) for longer than
``sandbox.max_wall_s`` is killed, its session state is lost, and the call gets an error
observation — a tool never raises into, blocks forever, or crashes the caller. Everything a worker
sends is read from the data-only wire (:mod:`agentrt.agent.wire`) without blocking: a worker that
sends a malformed, oversized or unexpected message, or withholds the rest of one past the
deadline, is killed the same way.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agentrt.agent.forkserver import ProcessWorker, TemplateProcess, ThreadWorker
from agentrt.agent.parsers.base import Piece
from agentrt.agent.plugin import Observation, PieceTiming, Tool, check_tool
from agentrt.agent.sandbox import SandboxReport
from agentrt.agent.wire import WireError, WireTimeout
from agentrt.agent.worker import (
    CALL_REPLIES,
    MAX_RECEIVED_CHARS,
    AbortMsg,
    Fed,
    FeedMsg,
    Finished,
    FinishMsg,
    Opened,
    OpenMsg,
    StartMsg,
    bounded_text,
)
from agentrt.core.registry import Registry

__all__ = ["TOOLS", "ToolCall", "ToolRuntime", "create_tool"]

#: how long a worker may take to open its tool's session (load an index, open a database)
OPEN_TIMEOUT_S = 120.0
#: how long the caller waits for room on a worker's socket when the tool has no wall limit
SEND_TIMEOUT_S = 30.0
#: replies already buffered that are still read once a call's deadline has passed
_LATE_FRAMES = 64
#: CPU seconds a worker may use past ``max_cpu_s`` from one call's start to the next's (the
#: limit's rounding, the signal handler, the reply)
_CPU_GRACE_S = 2.0

TOOLS: Registry[type[Tool]] = Registry(
    "tool",
    {
        "python_repl": "agentrt_tools.python_repl:PythonReplTool",
        "sqlite": "agentrt_tools.sqlite:SqliteTool",
        "search": "agentrt_tools.search:SearchTool",
        "calculator": "agentrt_tools.calculator:CalculatorTool",
    },
)


def create_tool(name: str, **config: Any) -> Tool:
    """Build a registered tool by name (``python_repl``, ``sqlite``, ``search``, ``calculator``)."""
    return TOOLS.create(name, **config)


@dataclass
class _Slot:
    """A live worker hosting one tool session."""

    tool: Tool
    worker: ProcessWorker | ThreadWorker
    workdir: Path
    report: SandboxReport | None
    is_dead: bool = False
    death: str = ""
    next_call: int = 0
    #: the latest call started (a new call aborts it if it was neither ended nor concluded)
    active: ToolCall | None = None
    #: the worker's CPU seconds when the latest call started (None: none started, or unknown)
    cpu_mark: float | None = None

    def post(self, msg: Any) -> str | None:
        """Send ``msg`` to the worker; on failure kill it and return why (else None)."""
        if self.is_dead:
            return self.death
        deadline = time.monotonic() + (self.tool.sandbox.max_wall_s or SEND_TIMEOUT_S)
        try:
            self.worker.channel.send(msg, deadline=deadline)
        except (TypeError, ValueError) as exc:  # encoding: nothing was sent
            raise TypeError(f"{self.tool.name}: tool arguments reach the worker as JSON, and "
                            f"this one is not JSON ({exc})") from exc
        except WireTimeout as exc:
            self.kill(f"{self.tool.name}: the tool process stopped reading its input ({exc}); "
                      "it was stopped")
        except OSError:
            self.kill(self.died())
        return self.death if self.is_dead else None

    def died(self) -> str:
        """The message for a worker that exited on its own (with the end of its output)."""
        log, limit = self.worker.tail(), self.tool.sandbox.max_session_cpu_s
        detail = f"; its last output:\n{log}" if log else ""
        if not log and limit is not None and self.cpu_mark is not None:
            # NOTE: the kernel's kill at RLIMIT_CPU's hard limit leaves no output and no
            # status the caller can read (the template reaps its workers)
            detail = (f" and left no output, as when the kernel stops it because its session "
                      f"used {limit} s of CPU time (SandboxConfig.max_session_cpu_s; "
                      f"{self.cpu_mark:.1f} s were used when its latest call began, and threads "
                      "left running between calls count too); its session state is lost")
        return f"{self.tool.name}: the tool process died unexpectedly{detail}"

    def check_cpu(self) -> None:
        """Before a call starts: stop a worker that used more CPU time since the previous call
        began than that call may (``max_cpu_s``). Threads left running between calls are
        stopped by limits inside the worker, which model code can switch off; the kernel's
        count of the worker's CPU time it cannot."""
        limit, used = self.tool.sandbox.max_cpu_s, self.worker.cpu_seconds()
        if limit is None or used is None or self.is_dead:
            return
        if self.cpu_mark is not None and used - self.cpu_mark > limit + _CPU_GRACE_S:
            self.kill(f"{self.tool.name}: the tool process used {used - self.cpu_mark:.1f} s of "
                      f"CPU time since its previous call began, past the limit of {limit} s "
                      "(threads left running?); it was stopped and its session state is lost")
        self.cpu_mark = used

    def kill(self, message: str) -> None:
        """Stop the worker for good; later calls of the session get ``message``."""
        self.worker.kill()
        if not self.is_dead:
            self.is_dead, self.death = True, message


class ToolCall:
    """One call in flight, seen from the caller. Not thread-safe: drive it from one thread."""

    def __init__(self, slot: _Slot, call_id: int, lazy: bool) -> None:
        self.tool = slot.tool.name
        self._slot, self.call_id, self.lazy = slot, call_id, lazy
        self._max_wall = slot.tool.sandbox.max_wall_s
        self._pending: deque[float] = deque()  # send times of requests awaiting a reply
        self._busy_since = 0.0
        self._timings: list[PieceTiming] = []
        self._kinds: list[str] = []
        self._finished: Finished | None = None
        self._ended = False
        self.rejection: str | None = None
        self.rejected_at: int | None = None
        self.observation: Observation | None = None

    @property
    def num_fed(self) -> int:
        return len(self._kinds)

    def feed(self, piece: Piece) -> None:
        """Send a completed piece to the worker; returns at once.

        A piece too large or nested too deeply for the wire (what a model may write) rejects
        the call; a value that is not JSON at all (a caller's bug) raises ``TypeError``.
        """
        if self._ended or self.observation is not None or self.rejection is not None:
            return
        self._kinds.append(piece.kind)
        try:
            self._send(FeedMsg(self.call_id, len(self._kinds) - 1, piece))
        except TypeError:
            self._kinds.pop()
            raise
        except WireError as exc:
            self._kinds.pop()
            what = f"argument {piece.key!r}" if piece.key is not None else f"a {piece.kind}"
            self._reject(f"{self.tool}: {what} cannot be sent to the tool: {exc}", self.num_fed)

    def poll(self) -> str | None:
        """Collect replies without blocking; return the rejection message if the call failed."""
        self._drain(until=time.monotonic())
        return self.rejection

    def wait(self) -> str | None:
        """Block until every piece fed so far has been processed; return the rejection if any."""
        self._drain(until=None, stop=lambda: not self._pending)
        return self.rejection

    def end(self) -> None:
        """The call is complete: ask the worker for the observation (returns at once)."""
        if not self._ended and self.rejection is None and self.observation is None:
            self._ended = True
            self._send(FinishMsg(self.call_id))

    def result(self) -> Observation:
        """Wait for the observation (after :meth:`end`, or after a rejection)."""
        if self.observation is not None:
            return self.observation
        if self.rejection is None:
            self.end()
            self._drain(until=None, stop=lambda: self._finished is not None)
        if self._finished is not None and self.rejection is None:
            f = self._finished
            return self._conclude(f.text, f.is_error, f.started, f.ended)
        return self.abort()

    def finish(self) -> Observation:
        """:meth:`end` then :meth:`result`."""
        self.end()
        return self.result()

    def abort(self, reason: str | None = None) -> Observation:
        """Drop the call (pieces still queued in the worker are skipped); return its observation."""
        if self.observation is not None:
            return self.observation
        if not self._slot.is_dead:
            self._slot.post(AbortMsg(self.call_id))
        text = self.rejection or reason or f"{self.tool}: the call was aborted"
        return self._conclude(text, True, None, None)

    def _conclude(
        self, text: str, is_error: bool, started: float | None, ended: float | None
    ) -> Observation:
        self.observation = Observation(
            self.tool, text, is_error, self.rejected_at, tuple(self._timings), started, ended
        )
        return self.observation

    def _send(self, msg: Any) -> None:
        if self._slot.is_dead:
            self._reject(self._slot.death)
            return
        now = time.monotonic()
        failure = self._slot.post(msg)
        if failure is not None:
            self._mark_dead(failure)
            return
        if not self._pending:
            self._busy_since = now
        self._pending.append(now)

    def _drain(self, until: float | None, stop: Callable[[], bool] | None = None) -> None:
        """Read replies until ``stop()`` holds, ``until`` passes, or the worker is stopped.

        The deadline is checked on every turn, so a worker that floods replies (stale ones are
        dropped) cannot hold the caller past its wall-time limit.
        """
        while not self._slot.is_dead and not (stop and stop()):
            now, deadline = time.monotonic(), self._deadline()
            if deadline is not None and now >= deadline:
                if not self._read(0.0, max_frames=_LATE_FRAMES):
                    self._time_out()
                continue
            if until is not None and now >= until:
                self._read(0.0, max_frames=_LATE_FRAMES)  # what has arrived, without waiting
                break
            limits = [x for x in (until, deadline) if x is not None]
            self._read(max(0.0, min(limits) - now) if limits else None, max_frames=1)
        if self._slot.is_dead and self.rejection is None and self._finished is None:
            self._reject(self._slot.death)

    def _read(self, timeout: float | None, *, max_frames: int) -> bool:
        """Take up to ``max_frames`` replies (waiting ``timeout`` s for the first); True if one
        of them was for a request of this call still awaiting its reply."""
        channel, progressed = self._slot.worker.channel, False
        for _ in range(max_frames):
            try:
                if not channel.poll(timeout):
                    break
                msg = channel.recv(expected=CALL_REPLIES)
            except (EOFError, OSError):
                self._mark_dead(self._slot.died())
                return False
            except WireError as exc:
                self._mark_dead(f"{self.tool}: the tool process broke the wire protocol ({exc}); "
                                "it was stopped and its session state is lost")
                return False
            progressed = self._receive(msg) or progressed
            timeout = 0.0
        return progressed

    def _deadline(self) -> float | None:
        if not self._pending or self._max_wall is None:
            return None
        return self._busy_since + self._max_wall

    def _receive(self, msg: Fed | Finished) -> bool:
        """Apply one reply; True if it answered a request of this call."""
        if msg.call_id != self.call_id and 0 <= msg.call_id < self._slot.next_call:
            return False  # a reply for another call of this worker (a late one of an aborted call)
        if (msg.call_id != self.call_id or not self._pending
                or (isinstance(msg, Fed) and not 0 <= msg.index < self.num_fed)):
            self._mark_dead(f"{self.tool}: the tool process sent a reply nobody asked for; it was "
                            "stopped and its session state is lost")
            return False
        self._pending.popleft()
        now = time.monotonic()
        self._busy_since = max(now, self._pending[0]) if self._pending else now
        if isinstance(msg, Fed):
            self._timings.append(
                PieceTiming(msg.index, self._kinds[msg.index], msg.started, msg.ended)
            )
            if msg.error is not None and self.rejection is None:
                self._reject(bounded_text(msg.error, MAX_RECEIVED_CHARS), msg.index)
        else:
            self._finished = replace(msg, text=bounded_text(msg.text, MAX_RECEIVED_CHARS))
        return True

    def _reject(self, message: str, index: int | None = None) -> None:
        if self.rejection is None:
            self.rejection, self.rejected_at = message, index

    def _time_out(self) -> None:
        self._mark_dead(
            f"{self.tool}: wall-time limit of {self._max_wall} s exceeded; the tool process was "
            "stopped and its session state is lost"
        )

    def _mark_dead(self, message: str) -> None:
        self._slot.kill(message)
        self._pending.clear()
        self._reject(message, self.num_fed - 1 if self.num_fed else None)


class ToolRuntime:
    """Runs tools in worker processes forked from one warm template; one worker per session.

    Sessions may be used from different threads at once (two agent runs, each with its own
    session; the engine's hooks start calls on the engine's thread): opening and closing
    sessions is locked. One session serves one run at a time: a call started while another
    call of the same session and tool is still being written supersedes it.
    """

    def __init__(
        self, tools: Iterable[Tool | str] = (), *, lazy: bool = False, preload: Iterable[str] = ()
    ) -> None:
        self.lazy = lazy
        self.preload = tuple(preload)
        self.tools: dict[str, Tool] = {}
        for tool in tools:
            self.add(tool)
        self._template: TemplateProcess | None = None
        self._lock = threading.RLock()  # guards _slots and _template
        self._slots: dict[tuple[str, str], _Slot] = {}
        self._offers: dict[tuple[str, str], tuple[dict[str, Any], ToolCall]] = {}

    def add(self, tool: Tool | str, **config: Any) -> Tool:
        """Register a tool instance, or a registered tool by name with its config.

        The tool is checked here (:func:`~agentrt.agent.plugin.check_tool`: name, schema,
        picklable for a worker process), so a tool that cannot work fails now, not mid-run. A
        second, different tool with a name already taken is a ``ValueError`` (the model calls
        tools by name; LangChain and OpenAI would send both, ambiguously); adding an equal tool
        again is a no-op.
        """
        if isinstance(tool, str):
            tool = create_tool(tool, **config)
        elif not isinstance(tool, Tool):
            raise TypeError(f"expected a Tool or a registered tool name, got "
                            f"{type(tool).__name__} (a LangChain tool: "
                            "langchain_agentrt.tools.from_langchain)")
        check_tool(tool)
        known = self.tools.get(tool.name)
        if known is not None and known is not tool and known != tool:
            raise ValueError(f"a tool named {tool.name!r} is already registered "
                             f"({type(known).__name__}); tool names must be unique")
        self.tools[tool.name] = tool
        return tool

    def start(self, name: str, *, session: str = "default", lazy: bool | None = None) -> ToolCall:
        """Begin a call of tool ``name`` in ``session`` (its worker is started on first use)."""
        slot = self._slot(name, session)
        slot.check_cpu()
        previous = slot.active
        if previous is not None and not previous._ended and previous.observation is None:
            previous.abort("superseded: another call of this tool started in the same session")
        call = slot.active = ToolCall(slot, slot.next_call, self.lazy if lazy is None else lazy)
        slot.next_call += 1
        slot.post(StartMsg(call.call_id, call.lazy))
        return call

    def run(
        self, name: str, arguments: Mapping[str, Any], *, session: str = "default",
        lazy: bool | None = None,
    ) -> Observation:
        """Call a tool with complete arguments (no streaming) and wait for the observation."""
        call = self.start(name, session=session, lazy=lazy)
        for key, value in arguments.items():
            call.feed(Piece("argument", key=key, value=value))
        return call.finish()

    def offer(self, call: ToolCall, arguments: Mapping[str, Any], *, session: str) -> None:
        """A call already started (while the model wrote it) that a caller may :meth:`take`
        instead of running the tool again; an earlier unclaimed offer is aborted."""
        self.withdraw(call.tool, session=session)
        self._offers[(call.tool, session)] = (dict(arguments), call)

    def take(self, name: str, arguments: Mapping[str, Any], *,
             session: str = "default") -> ToolCall | None:
        """The offered call of ``name`` if it was given exactly ``arguments`` (else it is
        aborted: its arguments were not what the caller decided to run)."""
        offer = self._offers.pop((name, session), None)
        if offer is None:
            return None
        if offer[0] != dict(arguments):
            offer[1].abort("superseded: the caller ran the tool with other arguments")
            return None
        return offer[1]

    def withdraw(self, name: str | None = None, *, session: str) -> None:
        """Abort unclaimed offers in ``session`` (of tool ``name``, or all)."""
        for key in [k for k in self._offers if k[1] == session and name in (None, k[0])]:
            self._offers.pop(key)[1].abort("not used")

    def sandbox_report(self, name: str, *, session: str = "default") -> SandboxReport | None:
        """What the sandbox of that tool's worker actually enforces (starts the worker)."""
        return self._slot(name, session).report

    def close_session(self, session: str) -> None:
        """Stop every worker of ``session`` and delete their working folders."""
        with self._lock:
            slots = [self._slots.pop(k) for k in [k for k in self._slots if k[0] == session]]
        for slot in slots:
            self._close_slot(slot)

    def close(self) -> None:
        """Stop all workers and the template."""
        with self._lock:
            slots, self._slots = list(self._slots.values()), {}
            template, self._template = self._template, None
        for slot in slots:
            self._close_slot(slot)
        if template is not None:
            template.close()

    def __enter__(self) -> ToolRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _slot(self, name: str, session: str) -> _Slot:
        if name not in self.tools:
            known = ", ".join(sorted(self.tools)) or "none"
            raise KeyError(f"unknown tool {name!r}; available: {known}")
        with self._lock:
            slot = self._slots.get((session, name))
            if slot is None or slot.is_dead:
                if slot is not None:
                    self._close_slot(slot)
                slot = self._slots[(session, name)] = self._open(self.tools[name])
            return slot

    def _open(self, tool: Tool) -> _Slot:
        workdir = Path(tempfile.mkdtemp(prefix=f"agentrt-{tool.name}-"))
        in_process = tool.isolation == "process"
        worker = self._template_process().fork(tool) if in_process else ThreadWorker(tool)
        slot = _Slot(tool, worker, workdir, None)
        env = {name: os.environ[name] for name in tool.sandbox.env if name in os.environ}
        if slot.post(OpenMsg(str(workdir), in_process, env)) is not None:
            return slot
        try:
            opened: Opened = worker.channel.recv(deadline=time.monotonic() + OPEN_TIMEOUT_S)
        except (EOFError, OSError):
            opened = Opened(None, slot.died().replace("died unexpectedly", "died while starting"))
        except WireError as exc:
            opened = Opened(None, f"{tool.name}: the tool process did not open its session ({exc})")
        if not isinstance(opened, Opened):
            opened = Opened(None, f"{tool.name}: the tool process answered out of turn")
        if opened.error:
            slot.kill(opened.error)
        slot.report = opened.report
        return slot

    def _template_process(self) -> TemplateProcess:
        if self._template is None or not self._template.is_alive:
            modules = [*self.preload]
            for tool in self.tools.values():
                if tool.isolation == "process":
                    modules += [type(tool).__module__, *tool.preload]
            self._template = TemplateProcess(tuple(dict.fromkeys(modules)))
        return self._template

    def _close_slot(self, slot: _Slot) -> None:
        slot.worker.close()
        shutil.rmtree(slot.workdir, ignore_errors=True)
