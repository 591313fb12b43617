"""The warm template process and the worker handles the runtime talks to.

Forking the caller itself is unsafe (the engine holds threads and GPU state), and starting a fresh
interpreter per tool call is slow. So the runtime starts one clean interpreter — the *template* —
that imports the tools' modules and any configured preload modules once, then ``fork``\\ s a worker
per tool session on request: the worker starts with everything already imported [Conveyor]. The
caller hands the template one end of a fresh socket pair (``SCM_RIGHTS``); the forked worker runs
:func:`agentrt.agent.worker.serve` on it and becomes its own session leader. The template lives as
long as its control socket; workers exit when their connection closes, and are killed when the
template exits (``PR_SET_PDEATHSIG``; not used for the template itself: it would fire when the
caller *thread* that started it exits).
"""

from __future__ import annotations

import importlib
import json
import os
import queue
import signal
import socket
import struct
import subprocess
import sys
import threading
from multiprocessing.connection import Connection as MpConnection
from typing import Any

from agentrt.agent.worker import serve

__all__ = ["ProcessWorker", "TemplateProcess", "ThreadWorker", "main"]

_PID = struct.Struct("q")
_PR_SET_PDEATHSIG = 1
# NOTE: registers the `agentrt` package without running its __init__ (which loads the engine and
# torch): the template and its workers only need agentrt.agent and the tools.
_BOOTSTRAP = (
    "import importlib.util, json, sys; sys.path[:] = json.loads(sys.argv[2]); "
    "spec = importlib.util.find_spec('agentrt'); "
    "sys.modules['agentrt'] = importlib.util.module_from_spec(spec); "
    "from agentrt.agent.template import main; main()"
)
_THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class ProcessWorker:
    """Caller-side handle of a worker process forked from the template."""

    def __init__(self, conn: MpConnection, pid: int) -> None:
        self.conn, self.pid = conn, pid
        try:
            self._pidfd: int | None = os.pidfd_open(pid)  # kill by fd: immune to pid reuse
        except (OSError, AttributeError):
            self._pidfd = None

    def kill(self) -> None:
        """Stop the worker now (SIGKILL)."""
        try:
            if self._pidfd is not None:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            else:
                os.kill(self.pid, signal.SIGKILL)
        except (ProcessLookupError, OSError):
            pass

    def close(self) -> None:
        """Close the connection (the worker exits) and release the handle."""
        self.conn.close()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


class _QueueConnection:
    """One end of an in-process duplex channel with the Connection API."""

    def __init__(self, inbox: queue.Queue, outbox: queue.Queue) -> None:
        self._inbox, self._outbox = inbox, outbox
        self._peeked: Any = None
        self._has_peeked = False

    def send(self, obj: Any) -> None:
        self._outbox.put(obj)

    def recv(self) -> Any:
        if self._has_peeked:
            self._has_peeked = False
            obj = self._peeked
        else:
            obj = self._inbox.get()
        if obj is EOFError:
            raise EOFError("channel closed")
        return obj

    def poll(self, timeout: float | None = 0.0) -> bool:
        if self._has_peeked:
            return True
        try:
            if timeout is None:
                self._peeked = self._inbox.get()
            elif timeout > 0:
                self._peeked = self._inbox.get(timeout=timeout)
            else:
                self._peeked = self._inbox.get_nowait()
        except queue.Empty:
            return False
        self._has_peeked = True
        return True

    def close(self) -> None:
        self._outbox.put(EOFError)


class ThreadWorker:
    """A worker in a daemon thread of the caller: no isolation, for trusted tools only."""

    def __init__(self) -> None:
        to_worker: queue.Queue = queue.Queue()
        to_caller: queue.Queue = queue.Queue()
        self.conn = _QueueConnection(to_caller, to_worker)
        worker_end = _QueueConnection(to_worker, to_caller)
        self.pid = os.getpid()
        self._thread = threading.Thread(target=_serve_thread, args=(worker_end,), daemon=True)
        self._thread.start()

    def kill(self) -> None:
        """A thread cannot be killed: it is abandoned (it ends when its current step does)."""
        self.conn.close()

    def close(self) -> None:
        self.conn.close()


def _serve_thread(conn: _QueueConnection) -> None:
    try:
        serve(conn)
    finally:
        conn.close()


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
                env={**os.environ, **_THREAD_ENV}, start_new_session=True,
            )
        status = self._control.recv(1)
        if status != b"R":
            message = _recv_all(self._control).decode(errors="replace") or "it exited"
            self.close()
            raise RuntimeError(f"the tool template process failed to start: {message}")

    def fork(self) -> ProcessWorker:
        """A new worker process with the preloaded modules already imported."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with self._lock, theirs:
            socket.send_fds(self._control, [b"F"], [theirs.fileno()])
            data = _recv_exact(self._control, _PID.size)
        (pid,) = _PID.unpack(data)
        return ProcessWorker(MpConnection(ours.detach()), pid)

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
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # workers are reaped automatically
    control.sendall(b"R")
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(control, 1, 1)
        except OSError:
            return
        if not msg:
            return
        pid = os.fork()
        if pid == 0:
            _run_worker(control, fds[0])
        os.close(fds[0])
        control.sendall(_PID.pack(pid))


def _die_with_parent() -> None:
    """Linux: get SIGKILL when the (single-threaded) template exits."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _run_worker(control: socket.socket, fd: int) -> None:
    control.close()
    _die_with_parent()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    code = 0
    try:
        serve(MpConnection(fd))
    except BaseException:
        code = 1
    finally:
        os._exit(code)
