"""The working folder's total size limit (``SandboxConfig.max_workdir_mb``): model-written code
that writes file after file fills a tmpfs of its own (kernel layer) or is refused by the audit
hook (fallback where the kernel refuses a mount namespace), never the host's disk."""

from __future__ import annotations

import ctypes
import os
import pickle
import shutil
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest
from toy_tools import EchoTool, ThreadEchoTool

from agentrt.agent import SandboxConfig, ToolRuntime, sandbox, worker
from agentrt.agent.sandbox import WorkdirMount, apply_sandbox, mount_workdir
from agentrt_tools.python_repl import PythonReplTool

MIB = 2**20
_PR_SET_DUMPABLE = 4
LIMIT_MB = 8
# the model's code: a 1 MiB file after another, far past the limit
FILL = textwrap.dedent("""
    import os
    for i in range(40):
        with open(f"part{i}.bin", "wb") as f:
            f.write(os.urandom(2**20))
""")
USED = textwrap.dedent("""
    import os
    print(sum(os.path.getsize(n) for n in os.listdir(".") if n.endswith(".bin")))
""")


@dataclass(frozen=True)
class SeedTool(EchoTool):
    """Writes a file into its working folder while its session opens."""

    name: ClassVar[str] = "seed"

    def open_session(self, workdir):
        (workdir / "seed.txt").write_text("seeded")
        return super().open_session(workdir)


def run(runtime, code):
    return runtime.run("python_repl", {"code": code})


def host_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def workdir(runtime) -> Path:
    return runtime._slots[("default", "python_repl")].workdir  # white box: the caller's folder


def test_file_after_file_fills_the_tools_own_tmpfs_not_the_disk():
    config = SandboxConfig(max_workdir_mb=LIMIT_MB, max_wall_s=20)
    with ToolRuntime([PythonReplTool(sandbox=config)]) as runtime:
        report = runtime.sandbox_report("python_repl")
        if report.workdir_quota != "tmpfs":
            pytest.skip(f"the kernel refuses a private mount namespace here: {report.notes}")
        pid = run(runtime, "import os\nprint(os.getpid())").text
        obs = run(runtime, FILL)
        assert obs.is_error and "OSError: [Errno 28] No space left on device" in obs.text
        assert f"the working folder holds at most {LIMIT_MB} MiB in all" in obs.text
        assert int(run(runtime, USED).text) <= LIMIT_MB * MIB
        assert host_bytes(workdir(runtime)) == 0  # the caller's view: nothing reached the disk
        # the same worker goes on; removing files makes room again
        assert run(runtime, "import os\nprint(os.getpid())").text == pid
        obs = run(runtime, "import os\nfor n in os.listdir('.'):\n    if n.endswith('.bin'):"
                           "\n        os.remove(n)\nopen('again.bin', 'wb').write(b'x' * 2**20)")
        assert not obs.is_error and obs.text == "1048576\n"


def test_without_the_kernel_layer_the_audit_hook_refuses_writes_into_a_full_folder():
    # use_kernel=False: what a worker gets where the mount namespace is refused
    config = SandboxConfig(max_workdir_mb=LIMIT_MB, max_wall_s=20, use_kernel=False)
    with ToolRuntime([PythonReplTool(sandbox=config)]) as runtime:
        assert runtime.sandbox_report("python_repl").workdir_quota == "audit_hook"
        obs = run(runtime, FILL)
        assert obs.is_error
        assert "OSError: [Errno 28] sandbox: the working folder is full" in obs.text
        assert f"its {LIMIT_MB} MiB limit (SandboxConfig.max_workdir_mb)" in obs.text
        assert "part8.bin" in obs.text and obs.text.count("max_workdir_mb") == 1
        assert host_bytes(workdir(runtime)) == LIMIT_MB * MIB  # 8 files of 1 MiB, no more
        for code in ("import os\nos.truncate('part0.bin', 2 * 2**20)",
                     "import tempfile\ntempfile.TemporaryFile()"):
            obs = run(runtime, code)
            assert obs.is_error and "the working folder is full" in obs.text, code
        obs = run(runtime, "import os\nos.remove('part0.bin')\nos.truncate('part1.bin', 2**20 + 10)"
                           "\nopen('small.txt', 'w').write('ok')")
        assert not obs.is_error and obs.text == "2\n"  # room again: growth within the limit


def _in_child(fn) -> object:
    """Run ``fn`` in a forked child (it confines itself for good); its pickled result or error."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            result: object = fn()
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            result = f"child failed: {exc!r}"
        os.write(write_fd, pickle.dumps(result))
        os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    return pickle.loads(data)


def _fill(folder: Path, num_files: int) -> str:
    try:
        for i in range(num_files):
            (folder / f"part{i}.bin").write_bytes(b"x" * MIB)
    except OSError as exc:
        return str(exc)
    return "no error"


def test_where_the_kernel_refuses_the_mount_the_hook_takes_over(tmp_path, monkeypatch):
    def refuse(libc):
        raise PermissionError(1, "unshare: Operation not permitted")

    monkeypatch.setattr(sandbox, "_unshare_mounts", refuse)
    config = SandboxConfig(max_workdir_mb=2, deny_network=False)

    def child():
        mount = mount_workdir(config, tmp_path)
        report = apply_sandbox(config, tmp_path, mount)
        return mount, report.workdir_quota, report.notes, _fill(tmp_path, 5)

    mount, quota, notes, error = _in_child(child)
    assert mount == WorkdirMount(False, "no tmpfs for the working folder: [Errno 1] unshare: "
                                        "Operation not permitted")
    assert quota == "audit_hook" and mount.note in notes
    assert "the working folder is full" in error and "2 MiB limit" in error
    assert host_bytes(tmp_path) == 2 * MIB


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to switch to an unprivileged user")
def test_an_unprivileged_worker_gets_its_tmpfs_in_a_user_namespace_of_its_own():
    folder = Path(tempfile.mkdtemp(prefix="agentrt-quota-"))
    try:
        (folder / "before.txt").write_text("there before the mount")
        os.chown(folder, 65534, 65534)
        os.chown(folder / "before.txt", 65534, 65534)
        config = SandboxConfig(max_workdir_mb=2)

        def child():
            os.setgid(65534)
            os.setuid(65534)
            # NOTE: a process that changed its user is no longer dumpable, which makes its
            # /proc/self/uid_map root's; one that started unprivileged is
            ctypes.CDLL(None).prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)
            mount = mount_workdir(config, folder)
            if not mount.is_mounted:
                return mount
            before = (folder / "before.txt").read_text()
            netns = sandbox._unshare_network([])  # the user namespace permits one now too
            return mount, before, _fill(folder, 5), os.getuid(), netns

        result = _in_child(child)
        if isinstance(result, WorkdirMount) and "unshare" in result.note:
            pytest.skip(f"no user namespaces for unprivileged users here: {result.note}")
        mount, before, error, uid, netns = result
        assert mount == WorkdirMount(True) and uid == 65534 and netns
        assert before == "there before the mount"  # copied into the tmpfs
        assert "No space left on device" in error
        assert sorted(p.name for p in folder.iterdir()) == ["before.txt"]  # the disk: untouched
    finally:
        shutil.rmtree(folder)


@pytest.mark.parametrize("size", [0, -1, 1.5, True, "256"])
def test_max_workdir_mb_must_be_a_positive_whole_number(size):
    with pytest.raises(ValueError, match="max_workdir_mb must be a whole number of MiB"):
        SandboxConfig(max_workdir_mb=size)


def test_the_limit_is_on_by_default_and_off_with_the_sandbox():
    assert SandboxConfig().max_workdir_mb == 256
    assert SandboxConfig(max_workdir_mb=None).max_workdir_mb is None
    assert SandboxConfig.off().max_workdir_mb is None


def test_a_native_module_written_into_the_working_folder_does_not_load():
    # the audit hook's known gap: extension loading is no ctypes.dlopen; the tmpfs is noexec
    code = textwrap.dedent("""
        import _bisect, importlib.util, os, shutil
        shutil.copy(_bisect.__file__, "mine.so")
        spec = importlib.util.spec_from_file_location("_bisect", os.path.abspath("mine.so"))
        importlib.util.module_from_spec(spec)
    """)
    with ToolRuntime([PythonReplTool(sandbox=SandboxConfig(max_wall_s=20))]) as runtime:
        if runtime.sandbox_report("python_repl").workdir_quota != "tmpfs":
            pytest.skip("the kernel refuses a private mount namespace here")
        obs = run(runtime, code)
    assert obs.is_error and "mine.so: failed to map segment from shared object" in obs.text


def test_the_tmpfs_is_there_before_the_tools_session_opens():
    with ToolRuntime([SeedTool()]) as runtime:
        report = runtime.sandbox_report("seed")
        if report.workdir_quota != "tmpfs":
            pytest.skip("the kernel refuses a private mount namespace here")
        folder = runtime._slots[("default", "seed")].workdir
        assert not (folder / "seed.txt").exists()  # written into the tmpfs, not the disk


def test_a_thread_tool_never_mounts_in_the_callers_process(monkeypatch):
    calls = []
    monkeypatch.setattr(worker, "mount_workdir", lambda *args: calls.append(args))
    with ToolRuntime([ThreadEchoTool()]) as runtime:
        assert runtime.run("thread_echo", {"text": "hi"}).text == "text=hi"
        assert runtime.sandbox_report("thread_echo") is None
    assert calls == []
