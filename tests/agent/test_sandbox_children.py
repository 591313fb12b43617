"""A worker allowed to start children (``SandboxConfig(deny_spawn=False)``) keeps every other
kernel rule: it had no seccomp filter at all, so memfd, System V IPC, io_uring, ptrace, mounts,
sockets under deny_network and signals to the caller's processes were all open to it."""

from __future__ import annotations

import ctypes
import errno
import os
import textwrap

import pytest

from agentrt.agent import SandboxConfig, ToolRuntime, seccomp
from agentrt_tools.python_repl import PythonReplTool

pytestmark = pytest.mark.skipif(not seccomp.is_supported(),
                                reason="no seccomp filter for this machine")
CHILDREN = SandboxConfig(max_cpu_s=5, max_wall_s=20, max_memory_mb=512, deny_spawn=False)




def test_a_worker_with_children_allowed_keeps_the_other_rules(neighbour):
    with ToolRuntime([PythonReplTool(sandbox=CHILDREN)]) as rt:
        report = rt.sandbox_report("python_repl")
        obs = rt.run("python_repl", {"code": textwrap.dedent(f"""
            import os, subprocess
            print(subprocess.run(["echo", "child ran"], capture_output=True, text=True).stdout)
            child = subprocess.Popen(["sleep", "30"])
            child.kill()
            print("killed", child.wait())
            for attack in (lambda: os.memfd_create("hoard"),
                           lambda: os.kill({neighbour}, 0),
                           lambda: subprocess.Popen(["sleep", "30"], start_new_session=True)):
                try:
                    attack()
                    print("DONE")
                except PermissionError as exc:
                    print("refused", exc.errno)
        """)})
    assert "spawn" not in report.seccomp
    assert {"confinement", "memory", "process_group", "sockets"} <= set(report.seccomp)
    assert obs.text == "child ran\n\nkilled -9\n" + "refused 1\n" * 3, obs.text


def test_without_landlock_signal_scoping_children_are_signalled_through_the_group(neighbour):
    """Where Landlock does not scope signals (kernels before 6.12), the filter cannot tell a
    child's pid from the engine's: signals go to the worker and its process group only, and a
    child cannot leave that group (setsid), so close_session's group kill reaches it."""
    pid = os.fork()
    if pid == 0:  # installs the filter, then tries; its exit code says what happened
        code = 0
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            os.setsid()  # as a worker is: the leader of its own process group
            assert "signals" in seccomp.install(deny_spawn=False, own_pid=os.getpid())
            child = os.fork()
            if child == 0:
                os._exit(0 if libc.setsid() == -1 and ctypes.get_errno() == errno.EPERM else 1)
            _, status = os.waitpid(child, 0)
            code |= os.waitstatus_to_exitcode(status)  # bit 0: the child left the group
            for bit, target in enumerate((neighbour, -neighbour), 1):
                try:
                    os.kill(target, 0)
                    code |= 1 << bit
                except PermissionError:
                    pass
            if libc.unshare(0x10000000) != -1 or ctypes.get_errno() != errno.EPERM:
                code |= 8  # CLONE_NEWUSER
            os.kill(0, 0)
            os.kill(-os.getpid(), 0)
        except BaseException:
            code = 255
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
