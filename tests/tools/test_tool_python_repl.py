"""python_repl: statements run as they arrive, and the sandbox contains what model code may do."""

from __future__ import annotations

import os
import time

import pytest

from agentrt.agent import SandboxConfig, ToolRuntime, landlock
from agentrt.agent.parsers.base import Piece
from agentrt_tools.python_repl import PythonReplTool

LIMITS = SandboxConfig(max_cpu_s=1, max_wall_s=20, max_memory_mb=512)


@pytest.fixture(scope="module")
def runtime():
    with ToolRuntime([PythonReplTool(sandbox=LIMITS, preload=("json",))]) as rt:
        yield rt


def run(runtime, code, session="default"):
    return runtime.run("python_repl", {"code": code}, session=session)


def test_state_persists_within_a_session_only(runtime):
    assert run(runtime, "x = 41", session="a").text == ""
    assert run(runtime, "x + 1", session="a").text == "42\n"
    assert "NameError" in run(runtime, "x", session="b").text


def test_output_expressions_and_errors(runtime):
    obs = run(runtime, "import sys\nprint('out')\nprint('err', file=sys.stderr)\n'value'\nNone")
    assert obs.text == "out\nerr\n'value'\n" and not obs.is_error
    obs = run(runtime, "print(1)\n1 / 0\nprint('not reached')")
    assert obs.is_error and obs.text.startswith("1\nTraceback")
    assert "ZeroDivisionError: division by zero" in obs.text and "not reached" not in obs.text


def test_an_exception_rejects_the_rest_of_the_call(runtime):
    call = runtime.start("python_repl", session="reject")
    for statement in ["a = 1\n", "undefined_name\n", "a = 2\n"]:
        call.feed(Piece("statement", statement))
    assert "NameError" in call.wait()
    assert call.rejected_at == 1
    call.finish()
    assert run(runtime, "a", session="reject").text == "1\n"  # the third statement never ran


def test_code_streamed_as_json_deltas_runs_statement_by_statement(runtime):
    call = runtime.start("python_repl", session="deltas")
    code = "import json\ndata = json.loads('[1, 2]')\nprint(sum(data))\n"
    streamed = ""
    for word in code.split(" "):
        piece = word if not streamed else " " + word
        streamed += piece
        call.feed(Piece("delta", piece, key="code"))
    call.wait()
    call.feed(Piece("argument", key="code", value=code))
    obs = call.finish()
    assert obs.text == "3\n"
    delta_timings = [t for t in obs.timings if t.kind == "delta"]
    assert delta_timings and all(t.ended <= obs.timings[-1].started for t in delta_timings)


def test_the_folder_is_private_and_writable(runtime):
    obs = run(runtime, "import os\nopen('notes.txt', 'w').write('hi')\nprint(os.listdir('.'))")
    assert "notes.txt" in obs.text and not obs.is_error


# -- sandbox: each case is contained with a clear error; the caller is unaffected ---------------


def test_infinite_loop_hits_the_cpu_limit(runtime):
    obs = run(runtime, "while True:\n    pass", session="loop")
    assert obs.is_error and "ResourceLimitError: CPU time limit exceeded" in obs.text
    assert run(runtime, "print('alive')", session="loop").text == "alive\n"


def test_spawning_processes_in_a_bounded_loop_is_denied(runtime):
    code = (
        "import os, subprocess\n"
        "spawned, errors = 0, []\n"
        "for attempt in range(5):\n"
        "    for spawn in (os.fork, lambda: subprocess.run(['true']), lambda: os.system('true'),\n"
        "                  lambda: os.posix_spawn('/bin/true', ['true'], {})):\n"
        "        try:\n"
        "            spawn()\n"
        "            spawned += 1\n"
        "        except PermissionError as exc:\n"
        "            errors.append(str(exc))\n"
        "print(spawned, len(errors))\n"
        "print(sorted(set(errors)))\n"
    )
    obs = run(runtime, code)
    first_line, detail = obs.text.split("\n", 1)
    assert first_line == "0 20"
    for event in ("os.fork", "subprocess.Popen", "os.system", "os.posix_spawn"):
        assert f"sandbox: {event} is not allowed" in detail


def test_allocating_10_gb_is_a_memory_error(runtime):
    obs = run(runtime, "block = bytearray(10 * 1024**3)", session="memory")
    assert obs.is_error and "MemoryError" in obs.text
    assert run(runtime, "print(len(bytearray(10**6)))", session="memory").text == "1000000\n"


def test_files_outside_the_folder_cannot_be_read_or_written(runtime, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    for code in (
        f"open({str(secret)!r}).read()",
        "open('/etc/passwd').read()",
        "import os\nos.listdir('/etc')",
        f"open({str(tmp_path / 'x')!r}, 'w')",
        "import os\nos.chdir('/')",
    ):
        obs = run(runtime, code)
        assert obs.is_error and "PermissionError: sandbox:" in obs.text, code
        assert "outside the tool's working folder" in obs.text
    assert "top secret" not in run(runtime, f"open({str(secret)!r}).read()").text


def test_network_is_denied(runtime):
    for code in (
        "import socket\nsocket.socket()",
        "import socket\nsocket.create_connection(('127.0.0.1', 9))",
        "import urllib.request\nurllib.request.urlopen('http://example.com')",
    ):
        obs = run(runtime, code)
        assert obs.is_error and "PermissionError: sandbox:" in obs.text, code
        assert "socket." in obs.text or "urllib.Request" in obs.text


def test_native_escape_hatches_are_closed(runtime):
    obs = run(runtime, "import ctypes\nctypes.CDLL(None).fork()")
    assert obs.is_error and "sandbox: ctypes.dlsym is not allowed" in obs.text
    obs = run(runtime, "import resource\nresource.setrlimit(resource.RLIMIT_AS, (-1, -1))")
    assert obs.is_error and "sandbox: resource.setrlimit is not allowed" in obs.text
    obs = run(runtime, f"import os, signal\nos.kill({os.getppid()}, signal.SIGTERM)")
    assert obs.is_error and "signalling other processes is not allowed" in obs.text


@pytest.mark.skipif(landlock.abi_version() < 1, reason="the kernel has no Landlock")
def test_landlock_denies_files_in_the_kernel_without_any_audit_hook(tmp_path):
    allowed, denied = tmp_path / "allowed", tmp_path / "denied.txt"
    allowed.mkdir()
    denied.write_text("x")
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child confines itself, then tries raw syscalls
        code = 0
        try:
            landlock.restrict([], [str(allowed)])
            os.close(os.open(allowed / "new.txt", os.O_CREAT | os.O_WRONLY))
            try:
                os.open(denied, os.O_RDONLY)
            except PermissionError:
                code = 42
        finally:
            os.write(write_fd, bytes([code]))
            os._exit(0)
    os.close(write_fd)
    result = os.read(read_fd, 1)
    os.waitpid(pid, 0)
    assert result == bytes([42])
    assert (allowed / "new.txt").exists()


def test_sandbox_report_says_what_is_enforced(runtime):
    report = runtime.sandbox_report("python_repl")
    assert report.audit_hook
    assert {"RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_CORE"} <= set(report.rlimits)
    assert report.landlock_abi == landlock.abi_version()


def test_lone_surrogates_in_the_output_become_replacement_characters(runtime):
    # a lone surrogate is not text: the caller's tokenizer and every UTF-8 encoder refuse it
    obs = run(runtime, "print('a\\ud800b')\nprint('\\udcff', end='')")
    assert obs.text == "a\ufffdb\n\ufffd" and not obs.is_error
    obs = run(runtime, "raise ValueError('\\udc80')")
    assert obs.is_error and obs.text.endswith("ValueError: \ufffd\n")
    obs.text.encode("utf-8")  # strict


def test_a_thread_left_running_is_stopped_when_it_uses_up_the_cpu_limit(runtime):
    code = (
        "import threading\n"
        "def spin():\n"
        "    while True:\n"
        "        pass\n"
        "threading.Thread(target=spin, daemon=True).start()\n"
        "print('started')\n"
    )
    assert run(runtime, code, session="spin").text == "started\n"
    # no call is running now, so nothing else would stop the thread (white box: the worker)
    worker = runtime._slots[("spin", "python_repl")].worker
    deadline = time.monotonic() + 60
    while worker.is_alive and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not worker.is_alive
    obs = run(runtime, "print('after')", session="spin")
    assert obs.is_error and "left running used up the CPU limit of 1 s" in obs.text
    assert run(runtime, "print('fresh')", session="spin").text == "fresh\n"


def test_an_output_flood_keeps_its_head_and_tail_not_its_memory(runtime):
    # 1 GB of output through a 512 MB limit: only what the observation shows is kept
    code = (
        "import sys\nline = 'x' * 10**7\n"
        "for _ in range(100):\n    _ = sys.stdout.write(line)\n"
        "print('end')\n"
    )
    obs = run(runtime, code, session="flood")
    assert not obs.is_error and obs.text.endswith("xend\n")
    head, cut, tail = obs.text.partition("\n... [999980004 characters cut] ...\n")
    assert cut and head == "x" * 10_000 and tail == "x" * 9_996 + "end\n"


def test_closing_stdout_or_stderr_loses_no_output(runtime):
    obs = run(runtime, "import sys\nprint('a')\nsys.stdout.close()\nprint('b')")
    assert obs.text == "a\nb\n" and not obs.is_error
    obs = run(runtime, "import sys\nsys.stderr.close()\n1 / 0")
    assert obs.is_error and obs.text.endswith("ZeroDivisionError: division by zero\n")
