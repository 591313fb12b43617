"""Model-written code against the caller, past what the other sandbox tests cover: each test is
the attack a prompt-injected model would write into a tool call, driven through the real
ToolRuntime (or, where an attack needs native code past the audit hook, against the kernel layer
alone in a forked child)."""

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path

import pytest
from toy_tools import SPIN_UNWATCHED

from agentrt.agent import SandboxConfig, ToolRuntime, seccomp
from agentrt_tools.python_repl import PythonReplTool

LIMITS = SandboxConfig(max_cpu_s=5, max_wall_s=20, max_memory_mb=512)
KERNEL_CONFIG = SandboxConfig(max_workdir_mb=None)  # past_the_audit_hook's
needs_seccomp = pytest.mark.skipif(not seccomp.is_supported(),
                                   reason="no seccomp filter for this machine")


@pytest.fixture()
def runtime():
    with ToolRuntime([PythonReplTool(sandbox=LIMITS)]) as rt:
        yield rt




def run(runtime, code):
    return runtime.run("python_repl", {"code": textwrap.dedent(code)})


def scheduling(pid: int) -> tuple:
    return (os.getpriority(os.PRIO_PROCESS, pid), os.sched_getscheduler(pid),
            sorted(os.sched_getaffinity(pid)))


@needs_seccomp
def test_model_code_cannot_slow_down_the_callers_processes(runtime, neighbour):
    """Same-user processes may renice, pin or idle each other; no LSM layer stops that, so
    model code could starve the engine (SCHED_IDLE, one CPU, nice 19)."""
    before = scheduling(neighbour)
    obs = run(runtime, f"""
        import os
        for attack in (lambda: os.setpriority(os.PRIO_PROCESS, {neighbour}, 19),
                       lambda: os.setpriority(os.PRIO_PGRP, {neighbour}, 19),
                       lambda: os.sched_setaffinity({neighbour}, {{0}}),
                       lambda: os.sched_setscheduler({neighbour}, os.SCHED_IDLE,
                                                     os.sched_param(0)),
                       lambda: os.sched_setparam({neighbour}, os.sched_param(0))):
            try:
                attack()
                print("DONE")
            except PermissionError as exc:
                print("refused", exc.errno)
        os.nice(1)  # its own priority, affinity and limits stay its own to lower
        os.sched_setaffinity(0, os.sched_getaffinity(0))
        print("self ok")
    """)
    assert scheduling(neighbour) == before
    assert "DONE" not in obs.text and obs.text.count("refused 1") == 5, obs.text
    assert obs.text.endswith("self ok\n")


def test_a_worker_started_as_root_has_no_capability_left(runtime):
    """As root, model code set the host's name (the worker shares its UTS namespace), could set
    its clock, raise its own priority or give files away; none needs a path or a new process."""
    obs = run(runtime, """
        import os, socket
        for attack in (lambda: socket.sethostname(socket.gethostname()),
                       lambda: os.nice(-1),
                       lambda: os.chown(".", 12345, 12345)):
            try:
                attack()
                print("DONE")
            except PermissionError as exc:
                print("refused", exc.errno)
    """)
    assert obs.text == "refused 1\n" * 3, obs.text


def test_the_callers_script_folder_is_not_readable(tmp_path, monkeypatch):
    """``python app.py`` puts the app's folder first on sys.path (``python -m``: the working
    directory), the usual home of a ``.env``; the sandbox let workers read every sys.path entry
    whole. Imported modules stay readable: the tool's own module lives in such a folder too."""
    (tmp_path / ".env").write_text("OPENAI_API_KEY=sk-from-the-app-folder")
    (tmp_path / "app_helpers.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import app_helpers  # noqa: F401 - imported by the app: in the template too, below

    with ToolRuntime([PythonReplTool(sandbox=LIMITS, preload=("app_helpers",))]) as rt:
        obs = rt.run("python_repl", {"code": textwrap.dedent(f"""
            import os, app_helpers
            print(app_helpers.VALUE, open(app_helpers.__file__).read().strip())
            for attack in (lambda: open({str(tmp_path / '.env')!r}).read(),
                           lambda: os.listdir({str(tmp_path)!r})):
                try:
                    print(attack())
                except PermissionError:
                    print("refused")
        """)})
    assert "sk-from-the-app-folder" not in obs.text and ".env" not in obs.text
    assert obs.text == "42 VALUE = 42\nrefused\nrefused\n", obs.text


@needs_seccomp
def test_past_the_audit_hook_no_socket_reaches_the_callers_unix_sockets(tmp_path):
    """A path-named UNIX socket (a local server, an SSH agent, docker.sock) is outside the
    network namespace and Landlock's file rules (connecting opens no file): native code past the
    audit hook (not a boundary, PEP 578) reached the caller's listening socket. The kernel now
    refuses new sockets in a worker that denies the network; a connected stream pair (asyncio's
    self-pipe) still works."""
    import ctypes
    import socket

    path = str(tmp_path / "caller.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(path)
    stream = socket.socket(socket.AF_UNIX)
    stream.bind(path + "2")
    stream.listen()

    def stream_pair_works():
        a, b = socket.socketpair()
        a.sendall(b"ok")
        if b.recv(2) != b"ok":
            raise AssertionError("a connected stream pair should work")
        raise PermissionError  # what passes here

    refused = past_the_audit_hook(tmp_path, [
        lambda: socket.socket(socket.AF_UNIX).connect(path + "2"),
        lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b"x", path),
        lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)[0].sendto(b"x", path),
        lambda: _raise_errno(ctypes.CDLL(None, use_errno=True).syscall(425, 1, 0)),
        stream_pair_works,
    ])  # 425: io_uring_setup (its socket and connect operations pass no seccomp filter)
    server.setblocking(False)
    with pytest.raises(BlockingIOError):
        server.recv(1)  # nothing arrived
    assert refused == [True] * 5


def past_the_audit_hook(tmp_path, attacks, prepare=lambda: None,
                        config=KERNEL_CONFIG) -> list[bool]:
    """Run ``attacks`` in a forked child under the worker's sandbox with its audit hook bypassed
    (a no-op; ``prepare`` runs first): only the kernel layers stand. Whether each raised
    PermissionError."""
    from agentrt.agent import sandbox

    workdir = tmp_path / "work"
    workdir.mkdir()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            sandbox._install_audit_hook = lambda *args: None
            prepare()
            sandbox.apply_sandbox(config, workdir)
            results = []
            for attack in attacks:
                try:
                    attack()
                    results.append("0")
                except PermissionError:
                    results.append("1")
            os.write(write, "".join(results).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        answer = pipe.read().decode()
    os.waitpid(pid, 0)
    assert len(answer) == len(attacks), "the child failed before it could answer"
    return [c == "1" for c in answer]


def _raise_errno(result: int, ipc: str = "") -> None:
    """PermissionError for a refused raw call; what it made is released."""
    import ctypes
    import errno

    if result < 0 and ctypes.get_errno() == errno.EPERM:
        raise PermissionError(errno.EPERM, "refused")
    if result >= 0 and not ipc:
        os.close(result)
    elif result >= 0:  # IPC_RMID: a SysV object would outlive the test
        libc = ctypes.CDLL(None)
        {"shm": libc.shmctl, "msg": libc.msgctl, "sem": libc.semctl}[ipc](result, 0, 0)


class _NoTokens:
    def decode(self, ids, skip_special_tokens=False):  # feed_text never decodes
        return ""


def test_an_argument_nested_too_deeply_for_the_wire_is_an_error_observation(runtime):
    """A few kilobytes of ``[[[[…]]]]`` in a call's arguments parse fine but do not encode: the
    RecursionError escaped the engine's hook (the request died with "hook raised
    RecursionError") instead of an observation the model can act on."""
    from agentrt.agent.tool_stream import ToolStream

    deep = "[" * 5000 + "]" * 5000
    stream = ToolStream(_NoTokens(), runtime, session="deep")
    text = f'<tool_call>\n{{"name": "python_repl", "arguments": {{"code": {deep}}}}}\n</tool_call>'
    stream.feed_text(text)  # a whole call in one piece of text: the call is complete
    obs = stream.observation()
    assert obs.is_error and "argument 'code' cannot be sent to the tool" in obs.text
    assert "nested too deeply" in obs.text and len(obs.text) < 300
    assert run(runtime, "print('still here')").text == "still here\n"


def test_an_argument_over_the_frame_limit_is_an_error_observation(runtime):
    from agentrt.agent.wire import MAX_FRAME_BYTES

    obs = runtime.run("python_repl", {"code": "x" * (MAX_FRAME_BYTES + 1)})
    assert obs.is_error and "argument 'code' cannot be sent to the tool" in obs.text
    assert "over the frame limit" in obs.text and len(obs.text) < 300
    assert run(runtime, "print('still here')").text == "still here\n"


def test_memory_outside_the_address_space_limit_is_refused():
    """RLIMIT_AS counts mappings; a memfd written with ``write`` maps nothing: 1,024 of them at
    RLIMIT_FSIZE's 64 MiB each held 64 GiB of the host's memory for the session's life."""
    config = SandboxConfig(max_cpu_s=5, max_wall_s=20, max_memory_mb=64)
    with ToolRuntime([PythonReplTool(sandbox=config)]) as rt:
        obs = rt.run("python_repl", {"code": textwrap.dedent("""
            import os
            fds = []
            for i in range(3):
                fds.append(os.memfd_create(f"hoard{i}"))
                for _ in range(48):
                    _ = os.write(fds[-1], bytes(2**20))
            print("held", 48 * len(fds), "MiB")
        """)})
    assert obs.is_error and "PermissionError: [Errno 1]" in obs.text, obs.text
    assert "held" not in obs.text


@needs_seccomp
def test_past_the_audit_hook_system_v_ipc_is_refused(tmp_path):
    """SysV shared memory outlives the worker (the IPC namespace is the host's) and is counted
    by no limit; its segments and queues of the same user are open to it too."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    ipc_private, ipc_creat = 0, 0o1000
    attacks = [lambda: _raise_errno(libc.shmget(ipc_private, 2**20, ipc_creat | 0o600), "shm"),
               lambda: _raise_errno(libc.msgget(ipc_private, ipc_creat | 0o600), "msg"),
               lambda: _raise_errno(libc.semget(ipc_private, 1, ipc_creat | 0o600), "sem")]
    assert past_the_audit_hook(tmp_path, attacks) == [True] * 3


def test_a_thread_spinning_between_calls_with_the_watchdog_switched_off_is_stopped():
    """The interpreter's watchdog lives in the worker: model code switched it off (and blocked
    SIGXCPU), and a thread spun on a core the engine shares, session-long. The caller now checks
    the worker's CPU time (the kernel's count) when the next call starts."""
    with ToolRuntime([PythonReplTool(sandbox=SandboxConfig(max_cpu_s=1, max_wall_s=20))]) as rt:
        obs = rt.run("python_repl", {"code": SPIN_UNWATCHED})
        pid = int(obs.text)
        deadline = time.monotonic() + 60
        while cpu_seconds(pid) < 4 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert cpu_seconds(pid) >= 4
        obs = rt.run("python_repl", {"code": "print('next')"})
        assert obs.is_error and "of CPU time since its previous call began" in obs.text
        assert "past the limit of 1 s" in obs.text
        assert rt.run("python_repl", {"code": "print('fresh')"}).text == "fresh\n"


def without_signal_scoping():
    """What an ABI 1-5 kernel does: Landlock scopes no signal."""
    from functools import partial

    from agentrt.agent import landlock, sandbox

    sandbox.landlock.restrict = partial(landlock.restrict, scope_signals=False)


@needs_seccomp
def test_past_the_audit_hook_no_sigio_owner_outside_the_worker(tmp_path, neighbour):
    """F_SETOWN (or F_SETOWN_EX, FIOSETOWN) names the process the kernel signals when a file is
    ready -- any signal, with F_SETSIG: SIGKILL too -- and a same-user target passes every check
    but Landlock's signal scoping (ABI 6): the seccomp rule on kill() was stepped around."""
    import fcntl
    import socket
    import struct

    def target(fd: int, owner: int) -> None:
        fcntl.fcntl(fd, fcntl.F_SETOWN, owner)

    def own_is_fine():
        target(os.pipe()[0], os.getpid())
        target(os.pipe()[0], 0)
        raise PermissionError

    refused = past_the_audit_hook(tmp_path, [
        lambda: target(os.pipe()[0], neighbour),
        lambda: target(os.pipe()[0], -neighbour),
        lambda: fcntl.fcntl(os.pipe()[0], 15, struct.pack("iI", 1, neighbour)),  # F_SETOWN_EX
        lambda: fcntl.ioctl(socket.socketpair()[0], 0x8901, struct.pack("i", neighbour)),
        own_is_fine,
    ], prepare=without_signal_scoping)  # 0x8901: FIOSETOWN
    assert refused == [True] * 5


@needs_seccomp
def test_past_the_audit_hook_no_pidfd_of_proc_signals_the_caller(tmp_path, neighbour):
    """pidfd_send_signal takes a pidfd or an open /proc/<pid> folder: where files are not
    confined (confine_files=False) and Landlock scopes no signal, that stepped around the rules
    on kill() and pidfd_open."""
    import signal

    def proc_fd(pid: int) -> int:
        return os.open(f"/proc/{pid}", os.O_RDONLY | os.O_DIRECTORY)

    def own_kill_works():
        os.kill(os.getpid(), 0)
        raise PermissionError

    refused = past_the_audit_hook(tmp_path, [
        lambda: signal.pidfd_send_signal(proc_fd(neighbour), 0),
        own_kill_works,
    ], prepare=without_signal_scoping, config=SandboxConfig(
        max_workdir_mb=None, confine_files=False))
    assert refused == [True, True]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@needs_seccomp
def test_past_the_audit_hook_a_kernel_without_signal_scoping_still_refuses_signals(
        tmp_path, neighbour):
    """Landlock scopes signals from ABI 6 (Linux 6.12) only; below it, nothing but the audit
    hook stopped ``os.kill(engine_pid, SIGKILL)`` -- and model code switches the hook's check
    off by writing to the ``SandboxConfig`` it finds in the hook's traceback frame."""
    import signal
    import threading

    def own_signals_work():
        os.kill(os.getpid(), 0)
        os.kill(0, 0)  # its own process group
        signal.pthread_kill(threading.get_ident(), 0)
        raise PermissionError

    refused = past_the_audit_hook(tmp_path, [
        lambda: os.kill(neighbour, 0),  # signal 0: the permission check alone
        lambda: os.kill(-neighbour, 0),
        lambda: os.kill(-1, 0),
        lambda: os.close(os.pidfd_open(neighbour)),
        own_signals_work,
    ], prepare=without_signal_scoping)
    assert refused == [True] * 5


@pytest.mark.parametrize("reply", [
    '{"type": "fed", "index": 0, "error": "E" * 15_000_000}',
    '{"type": "finished", "text": "x" * 15_000_000, "is_error": False}',
])
def test_a_forged_observation_is_cut_to_the_limit_in_the_caller(runtime, reply):
    """An honest worker cuts its text at MAX_TEXT_CHARS; a hostile one wrote a 15 MB
    observation on the wire itself, which the caller would tokenize whole to fit the context."""
    from agentrt.agent.worker import MAX_TEXT_CHARS

    obs = run(runtime, f"""
        import json, os, stat, struct
        fd = next(fd for fd in range(3, 64) if stat.S_ISSOCK(os.fstat(fd).st_mode))
        os.set_blocking(fd, True)
        body = json.dumps({{**{reply}, "call_id": 0, "started": 0.0, "ended": 0.0}}).encode()
        frame = memoryview(struct.pack(">I", len(body)) + body)
        while frame:
            frame = frame[os.write(fd, frame):]
    """)
    assert len(obs.text) <= MAX_TEXT_CHARS + 100
    assert obs.text.endswith("characters cut]")
