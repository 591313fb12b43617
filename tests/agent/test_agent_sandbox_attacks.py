"""The worker ↔ caller channel under attack: model-written code in the REPL tool goes after the
process that called it (issue: the unpickling hole, the log-file symlink, the environment, the
stalled frame, the raw fork primitives). Each test is the attack as a model would write it."""

from __future__ import annotations

import os
import signal
import textwrap
import time
from pathlib import Path

import pytest
from toy_tools import ThreadAtOpenTool

from agentrt.agent import SandboxConfig, ToolRuntime, seccomp
from agentrt.agent.forkserver import LOG_TAIL_BYTES
from agentrt_tools.python_repl import PythonReplTool

WALL_S = 2.0
LIMITS = SandboxConfig(max_cpu_s=5, max_wall_s=WALL_S, max_memory_mb=512)
# finds the worker's socket to the caller: the only stream socket among its descriptors
FIND_SOCKET = textwrap.dedent("""
    import os, stat, struct
    def caller_socket():
        socks = [fd for fd in range(3, 256) if _is_sock(fd)]
        assert len(socks) == 1, socks
        return socks[0]
    def _is_sock(fd):
        try:
            return stat.S_ISSOCK(os.fstat(fd).st_mode)
        except OSError:
            return False
    fd = caller_socket()
""")


@pytest.fixture()
def runtime():
    with ToolRuntime([PythonReplTool(sandbox=LIMITS)]) as rt:
        yield rt


def with_socket(code: str) -> str:
    return FIND_SOCKET + textwrap.dedent(code)


def run(runtime, code, session="default"):
    return runtime.run("python_repl", {"code": textwrap.dedent(code)}, session=session)


def worker_pid(runtime, session="default") -> int:
    return int(run(runtime, "import os\nprint(os.getpid())", session).text)


def wait_gone(pid: int, timeout: float = 2.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not _exists(pid):
            return True
        time.sleep(0.02)
    return not _exists(pid)


def _exists(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                members.append(int(entry.name))
    return members


def test_a_pickle_sent_to_the_caller_runs_nothing_there(runtime, tmp_path):
    marker = tmp_path / "pwned"
    pid = worker_pid(runtime)
    obs = run(runtime, with_socket(f"""
        import pickle
        class Payload:
            def __reduce__(self):
                return (open, ({str(marker)!r}, "w"))
        blob = pickle.dumps(Payload())
        os.write(fd, struct.pack(">I", len(blob)) + blob)
        os.write(fd, struct.pack("!i", len(blob)) + blob)  # multiprocessing's own framing too
    """))
    assert not marker.exists()
    assert obs.is_error and "wire protocol" in obs.text
    assert wait_gone(pid)
    assert run(runtime, "print('fresh worker')").text == "fresh worker\n"  # the session restarts


@pytest.mark.parametrize("frame", [
    b'{"type": "finished", "call_id": 0, "text": 1, "is_error": false, "started": 0, "ended": 0}',
    b'{"type": "fed", "call_id": 1, "index": 99, "started": 0, "ended": 0, "error": null}',
    b'{"type": "fed", "call_id": 7, "index": 0, "started": 0, "ended": 0, "error": null}',
    b'{"type": "opened", "report": null, "error": null}',
    b'{"type": "fed", "call_id": 0, "index": 0, "started": NaN, "ended": 0, "error": null}',
    b'{"type": "__reduce__", "args": ["os.system", "id"]}',
    b"[" * 100000,
    b"\xff\xfe not utf-8",
])
def test_malformed_replies_kill_the_worker_not_the_caller(runtime, frame):
    pid = worker_pid(runtime)
    obs = run(runtime, with_socket(f"os.write(fd, struct.pack('>I', {len(frame)}) + {frame!r})"))
    assert obs.is_error and "the tool process" in obs.text
    assert wait_gone(pid)


def test_a_huge_frame_header_is_refused_before_anything_is_read(runtime):
    started = time.monotonic()
    obs = run(runtime, with_socket("""
        os.write(fd, struct.pack(">I", 2**32 - 1) + b"x" * 65536)
        import time; time.sleep(30)
    """))
    assert obs.is_error and "over the" in obs.text
    assert time.monotonic() - started < WALL_S


def test_a_worker_that_stalls_mid_frame_is_killed_at_the_wall_limit(runtime):
    pid = worker_pid(runtime)
    started = time.monotonic()
    obs = run(runtime, with_socket("""
        os.write(fd, struct.pack(">I", 4096) + b"1234567")
        import time; time.sleep(60)
    """))
    elapsed = time.monotonic() - started
    assert obs.is_error and "wall-time limit" in obs.text
    assert elapsed < WALL_S + 1.0
    assert wait_gone(pid, timeout=1.0)


def test_a_flood_of_stale_replies_does_not_hold_the_caller_past_the_limit(runtime):
    run(runtime, "print('call 0')")  # replies for call 0 are stale from now on
    started = time.monotonic()
    obs = run(runtime, with_socket("""
        import json
        body = json.dumps({"type": "fed", "call_id": 0, "index": 0, "started": 0.0,
                           "ended": 0.0, "error": None}).encode()
        frame = struct.pack(">I", len(body)) + body
        import select
        while True:
            select.select([], [fd], [])
            try:
                _ = os.write(fd, frame * 64)
            except BlockingIOError:
                pass
    """))
    assert obs.is_error and "wall-time limit" in obs.text
    assert time.monotonic() - started < WALL_S + 1.0


def test_a_partial_frame_then_a_normal_reply_still_hits_the_deadline(runtime):
    started = time.monotonic()
    obs = run(runtime, with_socket("os.write(fd, struct.pack('>I', 4096) + b'1234567')"))
    assert obs.is_error and time.monotonic() - started < WALL_S + 1.0


def test_the_crash_log_is_never_read_through_a_path_the_worker_controls(runtime, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-CONTENTS")
    obs = run(runtime, f"""
        import os
        targets = ({str(secret)!r}, "/proc/self/environ", "/dev/zero")
        for target, name in zip(targets, (".worker.log", "worker.log", "tmp/.worker.log")):
            os.symlink(target, name)
        os.write(2, b"last words before the crash")
        os._exit(3)
    """)
    assert obs.is_error and "died unexpectedly" in obs.text
    assert "last words before the crash" in obs.text  # the real log is still shown
    assert "TOP-SECRET" not in obs.text and "PATH=" not in obs.text


def test_the_crash_log_is_read_back_bounded(runtime):
    obs = run(runtime, """
        import os
        for _ in range(64):
            os.write(1, b"A" * 2**18)   # 16 MiB of output
        os.write(1, b"THE-END")
        os._exit(1)
    """)
    assert obs.is_error and obs.text.endswith("THE-END")
    assert len(obs.text) < LOG_TAIL_BYTES + 200


def test_workers_see_no_secret_of_the_callers_environment(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-caller-secret")
    monkeypatch.setenv("TOOL_TOKEN", "granted-to-the-tool")
    granted = PythonReplTool(sandbox=SandboxConfig(max_wall_s=20, env=("TOOL_TOKEN",)))
    with ToolRuntime([granted]) as rt:
        obs = rt.run("python_repl", {"code": textwrap.dedent("""
            import os
            print(dict(os.environ))
            print(os.environ.get("HOME") == os.getcwd())
            try:
                print(open("/proc/self/environ", "rb").read())
            except OSError as exc:
                print("denied", type(exc).__name__)
        """)})
    assert "sk-caller-secret" not in obs.text
    assert "granted-to-the-tool" in obs.text
    assert "True" in obs.text and "denied" in obs.text


def test_template_environment_is_an_allow_list(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret")
    with ToolRuntime([PythonReplTool(sandbox=LIMITS)]) as rt:
        rt.sandbox_report("python_repl")
        template = rt._template._proc.pid
        assert b"aws-secret" not in Path(f"/proc/{template}/environ").read_bytes()


def test_env_names_must_be_a_tuple_of_names():
    with pytest.raises(TypeError, match="tuple of variable names"):
        SandboxConfig(env="TOOL_TOKEN")


@pytest.mark.skipif(not seccomp.is_supported(), reason="no seccomp filter for this machine")
def test_raw_fork_primitives_are_refused_by_the_kernel(runtime):
    report = runtime.sandbox_report("python_repl")
    assert report.seccomp
    pid = worker_pid(runtime)
    obs = run(runtime, """
        import _posixsubprocess, os
        def forever():
            import time
            while True:
                time.sleep(1)
        r, w = os.pipe()
        try:
            _posixsubprocess.fork_exec(
                [b"/bin/sleep", b"60"], [b"/bin/sleep"], True, (w,), None, None,
                -1, -1, -1, -1, -1, -1, r, w, True, False, -1, None, None, None, -1,
                forever, False)
            print("SPAWNED")
        except OSError as exc:
            print("refused:", exc.errno)
    """)
    assert "SPAWNED" not in obs.text and "refused: 1" in obs.text
    assert group_members(pid) == [pid]
    runtime.close_session("default")
    assert wait_gone(pid)
    assert group_members(pid) == []


@pytest.mark.skipif(not seccomp.is_supported(), reason="no seccomp filter for this machine")
def test_the_filter_refuses_namespaces_mounts_and_tracing(tmp_path):
    """Native code past the audit hook cannot undo its confinement: no new namespace, no mount
    (the working folder's tmpfs could otherwise be unmounted), no ptrace of a neighbour."""
    import ctypes
    import errno
    import os

    target = bytes(tmp_path)  # NOTE: were the filter missing, a mount lands here, not on /tmp
    pid = os.fork()
    if pid == 0:  # the child installs the filter, then tries; its exit code says what happened
        code = 0
        try:
            assert seccomp.deny_spawn()
            libc = ctypes.CDLL(None, use_errno=True)
            calls = [lambda: libc.unshare(0x00020000),  # CLONE_NEWNS
                     lambda: libc.unshare(0x10000000),  # CLONE_NEWUSER
                     lambda: libc.mount(b"none", target, b"tmpfs", 0, None),
                     lambda: libc.umount2(target, 2),
                     lambda: libc.ptrace(16, os.getppid(), None, None)]  # PTRACE_ATTACH
            for bit, call in enumerate(calls):
                ctypes.set_errno(0)
                if call() != -1 or ctypes.get_errno() != errno.EPERM:
                    code |= 1 << bit
        except BaseException:
            code = 255
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_close_session_kills_the_whole_process_group():
    trusted = PythonReplTool(sandbox=SandboxConfig(max_wall_s=20, deny_spawn=False))
    with ToolRuntime([trusted]) as rt:
        obs = rt.run("python_repl", {"code": textwrap.dedent("""
            import os, subprocess
            child = subprocess.Popen(["/bin/sleep", "60"])
            print(os.getpid(), child.pid)
        """)})
        pid, child = map(int, obs.text.split())
        assert _exists(child)
        rt.close_session("default")
        assert wait_gone(pid) and wait_gone(child)


def test_a_worker_that_ignores_close_is_killed():
    with ToolRuntime([PythonReplTool(sandbox=LIMITS)]) as rt:
        obs = rt.run("python_repl", {"code": textwrap.dedent("""
            import os, signal, threading, time
            _ = signal.signal(signal.SIGTERM, signal.SIG_IGN)
            threading.Thread(target=lambda: time.sleep(3600)).start()  # keeps the process up
            print(os.getpid())
        """)})
        pid = int(obs.text)
        started = time.monotonic()
        rt.close_session("default")
        assert wait_gone(pid) and time.monotonic() - started < 3.0


def test_the_caller_survives_a_worker_killed_from_outside(runtime):
    pid = worker_pid(runtime)
    os.kill(pid, signal.SIGKILL)
    obs = run(runtime, "print(1)")
    assert obs.is_error and "died" in obs.text
    assert run(runtime, "print(2)").text == "2\n"


def test_a_thread_started_before_the_sandbox_stops_the_tool_from_opening():
    # Landlock and the network namespace confine only the thread that applies them: a thread a
    # tool started in open_session would run outside the sandbox, so the worker refuses to open.
    with ToolRuntime([ThreadAtOpenTool()]) as rt:
        obs = rt.run("thread_at_open", {"text": "hi"})
    assert obs.is_error and "could not open the tool" in obs.text
    assert "2 threads before its sandbox" in obs.text
