"""A thread left spinning between calls, its in-worker watchdog switched off: the caller's check
at the next call's start stops it, but until that call (or the session's close) it spun on a
core the engine shares. RLIMIT_CPU's hard limit, set before the worker's capabilities go, bounds
the whole session: the kernel kills the worker there, whatever its code does."""

from __future__ import annotations

import os
import select

from toy_tools import SPIN_UNWATCHED as SPIN

from agentrt.agent import SandboxConfig, ToolRuntime
from agentrt_tools.python_repl import PythonReplTool


def test_a_thread_spinning_between_calls_is_stopped_at_the_session_cpu_limit():
    config = SandboxConfig(max_cpu_s=1, max_session_cpu_s=3, max_wall_s=20)
    with ToolRuntime([PythonReplTool(sandbox=config)]) as rt:
        pid = int(rt.run("python_repl", {"code": SPIN}).text)
        pidfd = os.pidfd_open(pid)
        try:  # readable once the process has exited; a generous bound, not a timing assert
            assert select.select([pidfd], [], [], 60)[0], "the spinning worker was not stopped"
        finally:
            os.close(pidfd)
        obs = rt.run("python_repl", {"code": "print('next')"})
        assert obs.is_error and "SandboxConfig.max_session_cpu_s" in obs.text, obs.text
        assert "used 3 s of CPU time" in obs.text
        assert rt.run("python_repl", {"code": "print('fresh')"}).text == "fresh\n"


def test_the_session_limit_is_off_with_the_sandbox():
    assert SandboxConfig.off().max_session_cpu_s is None
    assert SandboxConfig().max_session_cpu_s == 300.0
