"""The tool sandbox: what a worker process may do once a tool's session is open.

Applied inside the forked worker, after the tool opened its own resources (a database file, an
index) and before any model-written input runs. Layers, strongest first (see docs/tools.md):

1. kernel: the working folder a size-limited tmpfs in a private mount namespace
   (:func:`mount_workdir`, when permitted: before the tool's session opens), a private network
   namespace (``unshare(CLONE_NEWNET)``, when permitted), Landlock (file access limited to the
   Python installation, the installed packages and imported modules on ``sys.path`` -- never a
   whole folder of the caller's, such as its script folder -- and the working folder; no
   ``execve``; no TCP; no signals
   out of the sandbox; no mount changes), when the kernel has it, a seccomp filter
   (:mod:`agentrt.agent.seccomp`: no namespace, mount or ptrace calls, no uncounted memory,
   signals and scheduling only on itself; no new process unless ``deny_spawn=False``, and then
   children stay in its namespaces and process group), and no capability left (a worker
   started as root could otherwise set the host's name or clock);
2. resource limits: ``RLIMIT_AS`` (memory), ``RLIMIT_CPU`` (soft: per call; hard: per session),
   ``RLIMIT_FSIZE``,
   ``RLIMIT_CORE`` = 0, ``RLIMIT_NPROC`` = 0 (ignored for root);
3. a ``sys.addaudithook`` hook that turns file access outside the folder, sockets, process
   spawning, ``ctypes`` calls, signals and limit changes into ``PermissionError`` with a clear
   message, and, where the folder got no tmpfs, refuses to open files for writing in a full
   folder. Audit hooks are not a security boundary on their own (PEP 578); the kernel layers are.

The worker's environment is rebuilt from an allow-list (:func:`worker_environment`) before any
model-written input runs. The caller enforces the wall-time limit by killing the worker
(:mod:`agentrt.agent.runtime`).
"""

from __future__ import annotations

import ctypes
import errno
import math
import os
import resource
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NamedTuple

from agentrt.agent import landlock, seccomp

__all__ = [
    "BASE_ENV",
    "ResourceLimitError",
    "SandboxConfig",
    "SandboxReport",
    "WorkdirMount",
    "apply_sandbox",
    "begin_call",
    "mount_workdir",
    "worker_environment",
]

#: the caller's variables every worker keeps (locale and search path only: no secrets)
BASE_ENV = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "LC_NUMERIC", "TZ")
#: set in every worker: native libraries stay single-threaded
THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

_CLONE_NEWNET = 0x40000000
_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 0x2, 0x4, 0x8, 0x4000, 0x40000
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
#: files and folders the working folder's tmpfs holds per MiB of its size (inodes cost memory)
_INODES_PER_MB = 64
_SYSTEM_READ = ("/usr", "/lib", "/lib64", "/etc/ld.so.cache", "/etc/localtime", "/dev/null",
                "/dev/zero", "/dev/urandom", "/dev/random")
_SPAWN_EVENTS = frozenset({
    "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec", "os.system",
    "os.startfile", "subprocess.Popen", "os.killpg", "signal.pthread_kill",
})
_INTEGRITY_EVENTS = frozenset({
    "resource.prlimit", "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.call_function",
    "ctypes.cdata", "gc.get_referrers", "gc.get_referents", "gc.get_objects", "os.mknod",
    "os.mkfifo", "os.chroot",
})
_NETWORK_EVENTS = frozenset({
    "socket.__new__", "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg",
    "socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr", "socket.getnameinfo",
    "http.client.connect", "urllib.Request", "ftplib.connect", "smtplib.connect",
    "poplib.connect", "imaplib.open", "nntplib.connect", "webbrowser.open",
})
_READ_EVENTS = {"os.listdir": 0, "os.scandir": 0, "os.listxattr": 0, "os.getxattr": 0}
_WRITE_EVENTS = {
    "os.mkdir": 0, "os.rmdir": 0, "os.remove": 0, "os.truncate": 0, "os.chmod": 0,
    "os.chown": 0, "os.utime": 0, "os.chflags": 0, "os.lchflags": 0, "os.setxattr": 0,
    "os.removexattr": 0, "shutil.rmtree": 0, "os.chdir": 0, "os.symlink": 1, "os.link": 1,
}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class ResourceLimitError(RuntimeError):
    """Raised inside tool code when a CPU-time limit is reached."""


@dataclass(frozen=True)
class SandboxConfig:
    """Limits of one tool worker. ``None`` disables a limit."""

    #: wall time one piece or one finish() may take; the caller kills the worker past it
    max_wall_s: float | None = 30.0
    #: CPU seconds per call (RLIMIT_CPU, soft; SIGXCPU raises ResourceLimitError)
    max_cpu_s: float | None = 10.0
    #: CPU seconds the worker may use in all, calls and threads left running between them
    #: (RLIMIT_CPU, hard: the kernel kills the worker there; the session restarts fresh)
    max_session_cpu_s: float | None = 300.0
    #: address space the worker may add on top of its size at start (RLIMIT_AS)
    max_memory_mb: int | None = 1024
    #: largest file the worker may write (RLIMIT_FSIZE)
    max_file_mb: int | None = 64
    #: total size of the working folder: a tmpfs of this size (memory, not disk) where the kernel
    #: permits a private mount namespace, else a best-effort count by the audit hook
    max_workdir_mb: int | None = 256
    #: run in a fresh temporary folder and deny file access outside the allowed paths
    confine_files: bool = True
    #: extra paths readable (the Python installation and sys.path always are)
    read_paths: tuple[str, ...] = ()
    #: extra paths writable (the working folder always is)
    write_paths: tuple[str, ...] = ()
    #: deny sockets / network
    deny_network: bool = True
    #: deny fork / exec / subprocess / signals to other processes
    deny_spawn: bool = True
    #: use the kernel layers (network namespace, Landlock, seccomp) where available
    use_kernel: bool = True
    #: names of the caller's environment variables the tool may see (e.g. ``("MY_API_KEY",)``);
    #: a worker otherwise sees only :data:`BASE_ENV`, ``HOME`` and ``TMPDIR`` in its folder
    env: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.env, str) or not all(isinstance(n, str) and n for n in self.env):
            raise TypeError(
                f"SandboxConfig.env must be a tuple of variable names, got {self.env!r}"
            )
        size = self.max_workdir_mb
        if size is not None and (type(size) is not int or size < 1):
            raise ValueError(
                f"SandboxConfig.max_workdir_mb must be a whole number of MiB >= 1 or None, "
                f"got {size!r}"
            )

    @classmethod
    def off(cls) -> SandboxConfig:
        """No isolation beyond the process itself (trusted tools, e.g. LangChain ones)."""
        return cls(
            max_wall_s=None, max_cpu_s=None, max_session_cpu_s=None, max_memory_mb=None,
            max_file_mb=None, max_workdir_mb=None, confine_files=False, deny_network=False,
            deny_spawn=False, use_kernel=False,
        )

    @property
    def is_off(self) -> bool:
        return not (self.confine_files or self.deny_network or self.deny_spawn)


@dataclass(frozen=True)
class SandboxReport:
    """What was actually enforced in a worker (reported back to the caller)."""

    landlock_abi: int = 0
    network_namespace: bool = False
    #: the rules of the seccomp filter installed (:func:`agentrt.agent.seccomp.rules`), empty
    #: if none: ``confinement``, ``memory``, ``scheduling``, ``process_group`` whenever it is on;
    #: ``signals`` (only to itself and its group; left to Landlock where children are allowed
    #: and Landlock scopes signals), ``sockets`` (``deny_network``), ``spawn`` (``deny_spawn``)
    seccomp: tuple[str, ...] = ()
    audit_hook: bool = False
    rlimits: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: what bounds the working folder's total size: its own tmpfs (kernel), the audit hook's
    #: count (best effort), or nothing (``max_workdir_mb=None`` or the sandbox off)
    workdir_quota: Literal["tmpfs", "audit_hook", "none"] = "none"


class WorkdirMount(NamedTuple):
    """What :func:`mount_workdir` did: ``is_mounted``; ``note``: why not, or which files already
    in the folder did not fit into the tmpfs."""

    is_mounted: bool
    note: str = ""


def mount_workdir(config: SandboxConfig, workdir: Path) -> WorkdirMount:
    """Make ``workdir`` a tmpfs of ``config.max_workdir_mb`` in a private mount namespace.

    Call in the worker while it runs one thread, before the tool's session opens (so the tool's
    own files land in the tmpfs too) and before :func:`apply_sandbox` (Landlock forbids mounts).
    Unshares the mount namespace (``CLONE_NEWNS``; ``CLONE_NEWUSER | CLONE_NEWNS`` where that is
    refused, i.e. without CAP_SYS_ADMIN), makes every mount private so nothing propagates to the
    host, and mounts the tmpfs over the folder (``nosuid,nodev,noexec``: a native module written
    there does not load); files already in the folder are copied in. The
    caller's view of the folder stays empty, and the tmpfs is gone when the worker exits.
    """
    if config.max_workdir_mb is None or not config.use_kernel:
        return WorkdirMount(False)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                               ctypes.c_ulong, ctypes.c_char_p]
        _unshare_mounts(libc)
        _libc_check(libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "mount")
        size = config.max_workdir_mb
        options = f"size={size}m,nr_inodes={max(1024, size * _INODES_PER_MB)},mode=0700"
        below = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY)  # the folder under the tmpfs
    except (OSError, AttributeError) as exc:
        return WorkdirMount(False, f"no tmpfs for the working folder: {exc}")
    try:
        _libc_check(libc.mount(b"tmpfs", os.fsencode(workdir), b"tmpfs",
                               _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, options.encode()), "mount")
    except OSError as exc:
        os.close(below)
        return WorkdirMount(False, f"no tmpfs for the working folder: {exc}")
    return WorkdirMount(True, _copy_in(below, workdir))


def apply_sandbox(
    config: SandboxConfig, workdir: Path, mount: WorkdirMount | None = None
) -> SandboxReport:
    """Confine this (worker) process for good; call once, before running untrusted input.

    ``mount``: what :func:`mount_workdir` did (``None``: not called); where the folder got no
    tmpfs, the audit hook bounds its total size instead (best effort).

    Raises ``RuntimeError`` when kernel layers are asked for and the process runs more than
    one thread: Landlock and the network namespace confine only the thread that applies them,
    so a thread started earlier (by a tool's ``open_session``) would stay outside the sandbox
    and could run model-written work for it.
    """
    if config.use_kernel and (config.confine_files or config.deny_network):
        _check_single_threaded()
    notes: list[str] = []
    rlimits = _apply_rlimits(config)
    sys.dont_write_bytecode = True
    if config.confine_files:
        _enter_workdir(workdir)
    netns = config.deny_network and config.use_kernel and _unshare_network(notes)
    abi = 0
    if config.use_kernel and (config.confine_files or config.deny_network):
        abi = _landlock(config, workdir, notes)
    if config.use_kernel and not config.is_off:
        _drop_capabilities(notes)  # NOTE: after the namespaces and mounts, which need them
    filter_rules: tuple[str, ...] = ()
    if config.use_kernel and not config.is_off:
        filter_rules = _seccomp(notes, config, signals_scoped=abi >= 6)
    hook = not config.is_off
    quota: Literal["tmpfs", "audit_hook", "none"] = "none"
    mount = mount or WorkdirMount(False)
    if mount.is_mounted:
        quota = "tmpfs"
    elif hook and config.max_workdir_mb is not None:
        quota = "audit_hook"
    notes += [mount.note] if mount.note else []
    if hook:
        max_bytes = config.max_workdir_mb * 2**20 if quota == "audit_hook" else None
        _install_audit_hook(
            config, _read_roots(config, workdir), _write_roots(config, workdir), max_bytes
        )
    return SandboxReport(abi, netns, filter_rules, hook, rlimits, tuple(notes), quota)


def worker_environment(workdir: Path, passed: dict[str, str]) -> dict[str, str]:
    """The whole environment a worker runs model-written input with.

    :data:`BASE_ENV` from this process, :data:`THREAD_ENV`, ``HOME`` = the working folder,
    ``TMPDIR`` in it, and ``passed`` (the variables the tool's ``SandboxConfig.env`` names, read
    from the caller's environment by the caller). Nothing else of the caller's reaches tool code.
    """
    env = {name: os.environ[name] for name in BASE_ENV if name in os.environ}
    env.update(THREAD_ENV)
    env.update(HOME=str(workdir), TMPDIR=str(workdir / "tmp"), PYTHONDONTWRITEBYTECODE="1")
    env.update(passed)
    return env


def begin_call(config: SandboxConfig) -> None:
    """Give the next call a fresh CPU-time budget (RLIMIT_CPU soft limit)."""
    if config.max_cpu_s is None:
        return
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = math.ceil(usage.ru_utime + usage.ru_stime + config.max_cpu_s)
    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _check_single_threaded() -> None:
    try:
        threads = len(os.listdir("/proc/self/task"))
    except OSError:  # no /proc: nothing to count with (Landlock is Linux-only anyway)
        return
    if threads > 1:
        raise RuntimeError(
            f"the worker runs {threads} threads before its sandbox is applied; the kernel "
            "layers confine only the thread that applies them, so a tool must not start "
            "threads in open_session (start them inside a call, after the sandbox)")


def _apply_rlimits(config: SandboxConfig) -> tuple[str, ...]:
    applied = ["RLIMIT_CORE"]
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if config.max_memory_mb is not None:
        limit = _address_space() + config.max_memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        applied.append("RLIMIT_AS")
    if config.max_file_mb is not None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-large write fails with EFBIG
        limit = config.max_file_mb * 2**20
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        applied.append("RLIMIT_FSIZE")
    if config.deny_spawn:
        resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
        applied.append("RLIMIT_NPROC")
    if config.max_session_cpu_s is not None:  # NOTE: before the capabilities go: for good
        usage = resource.getrusage(resource.RUSAGE_SELF)
        hard = math.ceil(usage.ru_utime + usage.ru_stime + config.max_session_cpu_s)
        resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))
    if config.max_cpu_s is not None or config.max_session_cpu_s is not None:
        begin_call(config)
        applied.append("RLIMIT_CPU")
    return tuple(applied)


def _address_space() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _enter_workdir(workdir: Path) -> None:
    (workdir / "tmp").mkdir(exist_ok=True)
    os.chdir(workdir)
    os.environ["TMPDIR"] = str(workdir / "tmp")
    tempfile.tempdir = str(workdir / "tmp")
    sys.path[:] = [p for p in sys.path if p and Path(p).resolve() != workdir.resolve()]


def _unshare_mounts(libc: ctypes.CDLL) -> None:
    """A private mount namespace; as an unprivileged user, inside a user namespace of its own
    that maps this process's user and group to themselves."""
    if libc.unshare(_CLONE_NEWNS) == 0:
        return
    uid, gid = os.getuid(), os.getgid()
    _libc_check(libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNS), "unshare")
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
    Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")


def _copy_in(below: int, workdir: Path) -> str:
    """Copy what the folder under the tmpfs (open as ``below``, then closed) holds into it;
    a note if not everything fits."""
    try:
        if os.listdir(below):
            shutil.copytree(f"/proc/self/fd/{below}", workdir, symlinks=True, dirs_exist_ok=True)
    except (OSError, shutil.Error) as exc:
        return f"the working folder's files were not all copied into its tmpfs: {exc}"
    finally:
        os.close(below)
    return ""


def _libc_check(result: int, call: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{call}: {os.strerror(code)}")


def _unshare_network(notes: list[str]) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(_CLONE_NEWNET) == 0:
            return True
        notes.append(f"no network namespace: {os.strerror(ctypes.get_errno())}")
    except (OSError, AttributeError) as exc:
        notes.append(f"no network namespace: {exc}")
    return False


def _landlock(config: SandboxConfig, workdir: Path, notes: list[str]) -> int:
    reads = _read_roots(config, workdir) if config.confine_files else ("/",)
    writes = _write_roots(config, workdir) if config.confine_files else ("/",)
    try:
        abi = landlock.restrict(
            reads, writes, deny_tcp=config.deny_network, allow_execute=not config.deny_spawn
        )
    except OSError as exc:
        notes.append(f"landlock refused: {exc}")
        return 0
    if abi == 0:
        notes.append("landlock unavailable in this kernel")
    return abi


def _drop_capabilities(notes: list[str]) -> None:
    """Empty this process's capability sets for good (no ``execve`` is left to regain any)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
        header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
        sets = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable (x2: 64 bits)
        _libc_check(libc.capset(header, sets), "capset")
    except (OSError, AttributeError) as exc:
        notes.append(f"capabilities kept: {exc}")


def _seccomp(notes: list[str], config: SandboxConfig, signals_scoped: bool) -> tuple[str, ...]:
    try:
        rules = seccomp.install(deny_spawn=config.deny_spawn, deny_sockets=config.deny_network,
                                own_pid=os.getpid(), signals_scoped=signals_scoped)
        if not rules:
            notes.append("no seccomp filter for this architecture")
        return rules
    except OSError as exc:
        notes.append(f"seccomp refused: {exc}")
    return ()


def _read_roots(config: SandboxConfig, workdir: Path) -> tuple[str, ...]:
    roots = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *_SYSTEM_READ]
    roots += _import_roots()
    roots += list(config.read_paths) + list(_write_roots(config, workdir))
    return _outermost(os.path.realpath(p) for p in roots)


def _import_roots() -> list[str]:
    """What imports read beyond the installation: the ``sys.path`` entries that hold installed
    packages (``site-packages``, ``dist-packages``, archives), and the folder of each top-level
    package (the file of each top-level module) already imported from any other entry.

    An entry such as the caller's script folder (``python app.py``) or working directory
    (``python -m``) is never readable whole: it is where an app keeps its ``.env``.
    """
    roots = [p for p in sys.path if os.path.isabs(p)
             and (os.path.basename(p) in ("site-packages", "dist-packages") or os.path.isfile(p))]
    for name, module in list(sys.modules.items()):
        if "." not in name:
            found = list(getattr(module, "__path__", None) or [getattr(module, "__file__", None)])
            roots += [p for p in found if isinstance(p, str) and os.path.isabs(p)]
    return roots


def _outermost(paths: Iterable[str]) -> tuple[str, ...]:
    """``paths`` without duplicates and without those inside another one."""
    kept: list[str] = []
    for path in sorted(set(paths)):
        if not kept or not (path == kept[-1] or path.startswith(kept[-1].rstrip(os.sep) + os.sep)):
            kept.append(path)
    return tuple(kept)


def _write_roots(config: SandboxConfig, workdir: Path) -> tuple[str, ...]:
    return tuple(os.path.realpath(p) for p in (str(workdir), *config.write_paths))


def _install_audit_hook(
    config: SandboxConfig,
    read_roots: tuple[str, ...],
    write_roots: tuple[str, ...],
    max_workdir_bytes: int | None,
) -> None:
    """``write_roots[0]`` is the working folder; ``max_workdir_bytes``: its total size, where
    the hook (not a tmpfs) bounds it."""
    denied = _INTEGRITY_EVENTS
    denied |= _SPAWN_EVENTS if config.deny_spawn else frozenset()
    denied |= _NETWORK_EVENTS if config.deny_network else frozenset()
    confine, allowed_limit_code = config.confine_files, begin_call.__code__
    own_pid = os.getpid()

    def check_path(path: object, roots: tuple[str, ...], what: str, event: str) -> None:
        if isinstance(path, int) or (path is None and event not in _READ_EVENTS):
            return
        resolved = os.path.realpath(os.fsdecode(path) if path is not None else ".")
        if not any(resolved == root or resolved.startswith(root + os.sep) for root in roots):
            raise PermissionError(
                f"sandbox: {what} {resolved!r} is denied: outside the tool's working folder"
            )

    room = _room_check(write_roots[0], max_workdir_bytes) if max_workdir_bytes else None

    def hook(event: str, args: tuple) -> None:
        if event in denied:
            raise PermissionError(f"sandbox: {event} is not allowed in this tool")
        if event == "resource.setrlimit":
            if sys._getframe(1).f_code is not allowed_limit_code:
                raise PermissionError("sandbox: resource.setrlimit is not allowed in this tool")
        elif event == "os.kill":
            if config.deny_spawn and args[0] not in (own_pid, 0):
                raise PermissionError("sandbox: signalling other processes is not allowed")
        elif event == "ctypes.dlopen":
            if args[0] is not None:
                raise PermissionError(f"sandbox: loading native library {args[0]!r} is denied")
        if room is not None and event in ("open", "os.truncate"):
            room(event, args)
        if not confine:
            return
        if event == "open":
            path, mode, flags = args
            writes = _opens_for_writing(mode, flags)
            roots, what = (write_roots, "writing") if writes else (read_roots, "reading")
            check_path(path, roots, what, event)
        elif event in _READ_EVENTS:
            check_path(args[_READ_EVENTS[event]], read_roots, "listing", event)
        elif event in _WRITE_EVENTS:
            check_path(args[_WRITE_EVENTS[event]], write_roots, "changing", event)
        elif event == "os.rename":
            check_path(args[0], write_roots, "moving", event)
            check_path(args[1], write_roots, "moving to", event)

    sys.addaudithook(hook)


def _room_check(folder: str, max_bytes: int) -> Callable[[str, tuple], None]:
    """The audit hook's part that keeps ``folder`` under ``max_bytes`` in all (best effort:
    a file opened before the folder filled up can still grow, up to RLIMIT_FSIZE)."""

    def refuse(path: str) -> OSError:
        return OSError(
            errno.ENOSPC,
            f"sandbox: the working folder is full: {_folder_size(folder) / 2**20:.1f} MiB used of "
            f"its {max_bytes // 2**20} MiB limit (SandboxConfig.max_workdir_mb); remove files "
            "to make room",
            path,
        )

    def inside(path: str) -> bool:
        return path == folder or path.startswith(folder + os.sep)

    def check(event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = args
            if not _opens_for_writing(mode, flags) or isinstance(path, int) or path is None:
                return
            resolved = os.path.realpath(os.fsdecode(path))
            if inside(resolved) and _folder_size(folder) >= max_bytes:
                raise refuse(resolved)
        else:  # os.truncate(path or fd, length)
            target, length = args
            resolved = os.path.realpath(
                f"/proc/self/fd/{target}" if isinstance(target, int) else os.fsdecode(target)
            )
            if not inside(resolved):
                return
            try:
                growth = length - os.stat(resolved).st_size
            except OSError:
                return
            if growth > 0 and _folder_size(folder) + growth > max_bytes:
                raise refuse(resolved)

    return check


def _opens_for_writing(mode: str | None, flags: int | None) -> bool:
    return any(c in (mode or "") for c in "wax+") or bool((flags or 0) & _WRITE_FLAGS)


def _folder_size(folder: str) -> int:
    """Bytes in the files under ``folder`` (apparent sizes: a sparse file counts in full)."""
    total, stack = 0, [folder]
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    else:
                        total += entry.stat(follow_symlinks=False).st_size
        except OSError:  # removed meanwhile
            continue
    return total
