"""The fork server: the warm template process and the worker handles the runtime talks to.

Forking the caller itself is unsafe (the engine holds threads and GPU state), and starting a fresh
interpreter per tool call is slow. So the runtime starts one clean interpreter — the *template* —
that imports the tools' modules and any configured preload modules once, then ``fork``\\ s a worker
per tool session on request: the worker starts with everything already imported [Conveyor].

The template is started with an allow-listed environment (:data:`TEMPLATE_ENV`), never the
caller's whole one. On its control socket the caller hands it, per worker, one end of a fresh
socket pair and the write end of an unlinked log file (``SCM_RIGHTS``) and the pickled tool; the
forked child unpickles the tool (the only pickle anywhere, and it flows caller → worker), becomes
the leader of a new process group with the log as its fds 1 and 2, and runs
:func:`agentrt.agent.worker.serve` on the socket, a data-only JSON wire. Workers exit when their
connection closes and are killed when the template exits (``PR_SET_PDEATHSIG``; not used for the
template itself: it would fire when the caller *thread* that started it exits). The caller reads
the log only through its own descriptor, at most :data:`LOG_TAIL_BYTES` from the end.
"""

from __future__ import annotations

import importlib
import json
import os
import pickle
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import IO

from agentrt.agent.plugin import Tool
from agentrt.agent.sandbox import BASE_ENV, THREAD_ENV
from agentrt.agent.wire import Channel, WireError
from agentrt.agent.worker import REPLIES, REQUESTS, CloseMsg, serve

__all__ = ["LOG_TAIL_BYTES", "TEMPLATE_ENV", "ProcessWorker", "TemplateProcess", "ThreadWorker",
           "main"]

#: the caller's variables the template (and so a worker, until its session is open) starts with:
#: :data:`~agentrt.agent.sandbox.BASE_ENV` plus what trusted tool code needs to find its caches
TEMPLATE_ENV = (*BASE_ENV, "HOME", "XDG_CACHE_HOME", "AGENTRT_CACHE", "HF_HOME", "HF_HUB_CACHE",
                "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "SENTENCE_TRANSFORMERS_HOME",
                "LD_LIBRARY_PATH")
#: how much of a dead worker's output the caller reads back
LOG_TAIL_BYTES = 2000

_PID = struct.Struct("q")
_FORK = struct.Struct("cQ")  # b"F", length of the pickled tool that follows
_PR_SET_PDEATHSIG = 1
# NOTE: registers the `agentrt` package without running its __init__ (which loads the engine and
# torch): the template and its workers only need agentrt.agent and the tools.
_BOOTSTRAP = (
    "import importlib.util, json, sys; sys.path[:] = json.loads(sys.argv[2]); "
    "spec = importlib.util.find_spec('agentrt'); "
    "sys.modules['agentrt'] = importlib.util.module_from_spec(spec); "
    "from agentrt.agent.forkserver import main; main()"
)


class ProcessWorker:
    """Caller-side handle of a worker process forked from the template."""

    def __init__(self, channel: Channel, pid: int, log: IO[bytes]) -> None:
        self.channel, self.pid, self._log = channel, pid, log
        try:
            self._pidfd: int | None = os.pidfd_open(pid)  # kill by fd: immune to pid reuse
        except (OSError, AttributeError):
            self._pidfd = None

    @property
    def is_alive(self) -> bool:
        if self._pidfd is None:
            return False
        return not select.select([self._pidfd], [], [], 0)[0]

    def kill(self) -> None:
        """Stop the worker and everything in its process group now (SIGKILL)."""
        # NOTE: the group outlives its leader while any member is left, and Linux reuses no pid
        # that is still some group's id; but once the leader and its group are gone, the pid
        # may lead an unrelated process's group: not signalled (_pid_reused).
        try:
            if not self._pid_reused():
                os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            if self._pidfd is not None:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            else:
                os.kill(self.pid, signal.SIGKILL)
        except (ProcessLookupError, OSError):
            pass

    def close(self, grace_s: float = 1.0) -> None:
        """Ask the worker to close its session, wait ``grace_s`` at most, then kill its group."""
        try:
            self.channel.send(CloseMsg(), deadline=time.monotonic() + 0.1)
        except (OSError, WireError):
            pass
        if self._pidfd is not None:
            select.select([self._pidfd], [], [], grace_s)
        self.kill()
        self.channel.close()
        self._log.close()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def cpu_seconds(self) -> float | None:
        """CPU time the worker (all its threads) has used, as the kernel counts it; None if it
        cannot be read (the worker is gone, no ``/proc``)."""
        try:
            fields = self._stat()
            seconds = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return None
        # NOTE: read first, checked after: alive then, the pid was still the worker's
        return None if self._pidfd is not None and not self.is_alive else seconds

    def _stat(self) -> list[bytes]:
        """The fields of ``/proc/<pid>/stat`` after the command name (state first)."""
        with open(f"/proc/{self.pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()

    def _pid_reused(self) -> bool:
        """Whether the (dead) worker's pid now belongs to another process: a live process, not
        the worker's own zombie. False while the worker lives or where no pidfd tells."""
        if self._pidfd is None or self.is_alive:
            return False
        try:
            return self._stat()[0] != b"Z"
        except (OSError, IndexError):
            return False  # no such process: a group left by the worker can still be killed

    def tail(self) -> str:
        """The end of what the worker wrote to its fds 1 and 2 (bounded, never through a path)."""
        try:
            fd = self._log.fileno()
            size = os.fstat(fd).st_size
            data = os.pread(fd, LOG_TAIL_BYTES, max(0, size - LOG_TAIL_BYTES))
        except (OSError, ValueError):
            return ""
        return data.decode(errors="replace").strip()


class ThreadWorker:
    """A worker in a daemon thread of the caller: no isolation, for trusted tools only."""

    def __init__(self, tool: Tool) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.channel = Channel(ours, REPLIES)
        self.pid = os.getpid()
        self._thread = threading.Thread(
            target=_serve_thread, args=(Channel(theirs, REQUESTS), tool), daemon=True
        )
        self._thread.start()

    @property
    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def kill(self) -> None:
        """A thread cannot be killed: it is abandoned (it ends when its current step does)."""
        self.channel.close()

    def close(self, grace_s: float = 1.0) -> None:
        """Ask the worker to close its session and let the thread end."""
        try:
            self.channel.send(CloseMsg(), deadline=time.monotonic() + 0.1)
        except (OSError, WireError):
            pass
        self.channel.close()

    def cpu_seconds(self) -> float | None:
        """Not measured: a thread worker shares the caller's process."""
        return None

    def tail(self) -> str:
        return ""


def _serve_thread(channel: Channel, tool: Tool) -> None:
    try:
        serve(channel, tool)
    finally:
        channel.close()


class TemplateProcess:
    """Caller-side handle of the warm template interpreter."""

    def __init__(self, preload: tuple[str, ...] = ()) -> None:
        self.preload = preload
        self._lock = threading.Lock()
        self._control, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with child:
            args = [sys.executable, "-c", _BOOTSTRAP]
            args += [str(child.fileno()), json.dumps(sys.path), *preload]
            self._proc = subprocess.Popen(
                args, pass_fds=[child.fileno()], stdin=subprocess.DEVNULL,
                env=template_environment(), start_new_session=True,
            )
        status = self._control.recv(1)
        if status != b"R":
            message = _recv_all(self._control).decode(errors="replace") or "it exited"
            self.close()
            raise RuntimeError(f"the tool template process failed to start: {message}")

    def fork(self, tool: Tool) -> ProcessWorker:
        """A new worker process for ``tool``, with the preloaded modules already imported.

        Raises ``TypeError`` if the tool cannot be pickled (use ``isolation="thread"``).
        """
        try:
            payload = pickle.dumps(tool)
        except Exception as exc:
            raise TypeError(
                f"tool {tool.name!r} cannot be sent to a worker process ({exc}); give it "
                "isolation='thread' to run it in the caller, unsandboxed"
            ) from exc
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        log = tempfile.TemporaryFile(prefix="agentrt-worker-", suffix=".log")
        with self._lock, theirs:
            header = _FORK.pack(b"F", len(payload))
            socket.send_fds(self._control, [header], [theirs.fileno(), log.fileno()])
            self._control.sendall(payload)
            data = _recv_exact(self._control, _PID.size)
        (pid,) = _PID.unpack(data)
        return ProcessWorker(Channel(ours, REPLIES), pid, log)

    @property
    def is_alive(self) -> bool:
        return self._proc.poll() is None

    def close(self) -> None:
        """Stop the template (running workers keep going until their connections close)."""
        self._control.close()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


def template_environment() -> dict[str, str]:
    """The template's whole environment: :data:`TEMPLATE_ENV` from this process + THREAD_ENV."""
    env = {name: os.environ[name] for name in TEMPLATE_ENV if name in os.environ}
    env.update(THREAD_ENV)
    return env


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise RuntimeError("the tool template process died")
        data += chunk
    return data


def _recv_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(4096):
        chunks.append(chunk)
    return b"".join(chunks)


def main() -> None:
    """Template entry point: ``python -c ... <control fd> <sys.path json> <module>...``."""
    control = socket.socket(fileno=int(sys.argv[1]))
    try:
        for module in ["agentrt.agent.worker", *sys.argv[3:]]:
            importlib.import_module(module)
    except BaseException as exc:
        control.sendall(b"E" + f"preloading failed: {type(exc).__name__}: {exc}".encode())
        return
    _no_helper_threads()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # workers are reaped automatically
    control.sendall(b"R")
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(control, _FORK.size, 2)
            if not msg:
                return
            msg += _recv_exact(control, _FORK.size - len(msg))
            payload = _recv_exact(control, _FORK.unpack(msg)[1])
        except (OSError, RuntimeError):
            return
        pid = os.fork()
        if pid == 0:
            _run_worker(control, fds[0], fds[1], payload)
        for fd in fds:
            os.close(fd)
        control.sendall(_PID.pack(pid))


def _no_helper_threads() -> None:
    """Turn off the helper threads libraries start by themselves (tqdm's monitor, even for a
    progress bar that is never shown): a worker runs one thread until its sandbox is applied,
    and refuses to open a tool otherwise (see :func:`agentrt.agent.sandbox.apply_sandbox`)."""
    try:
        import tqdm
    except ImportError:
        return
    tqdm.tqdm.monitor_interval = 0


def _die_with_parent() -> None:
    """Linux: get SIGKILL when the (single-threaded) template exits."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _run_worker(control: socket.socket, sock_fd: int, log_fd: int, payload: bytes) -> None:
    control.close()
    os.setsid()  # its own process group: closing the session kills the whole group
    _die_with_parent()
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    code = 0
    try:
        tool = pickle.loads(payload)  # from the caller, before any model-written input
        serve(Channel(socket.socket(fileno=sock_fd), REQUESTS), tool)
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        code = 1
    finally:
        os._exit(code)
