"""A seccomp filter that leaves a tool worker no way to loosen its confinement, reach other
processes or (unless allowed) start another process.

The audit hook in :mod:`agentrt.agent.sandbox` stops ``os.fork`` and friends, but plain Python can
reach the raw primitives (``_posixsubprocess.fork_exec``, a ``preexec_fn``), and native code
ignores audit hooks altogether. This filter is checked by the kernel on every system call of the
worker and of all its threads, for good:

- with ``deny_spawn`` (the default): ``fork``, ``vfork``, ``execve``, ``execveat``: refused
  with ``EPERM``; without it, children may be started, but in the worker's namespaces (``clone``
  with a ``CLONE_NEW*`` flag: ``EPERM``) and process group (below);
- ``setsid`` and ``setpgid``: ``EPERM`` -- a child stays in the worker's process group, which
  ``close_session`` kills whole;
- what would change the worker's view of the system once it is set up: ``unshare``, ``setns``,
  ``mount``, ``umount2``, ``pivot_root``, ``chroot`` and the new mount API (``open_tree``,
  ``move_mount``, ``fsopen``, ``fsconfig``, ``fsmount``, ``fspick``, ``mount_setattr``) -- the
  working folder's tmpfs is mounted before the filter -- and what reaches other processes or
  the kernel itself: ``ptrace``, ``process_vm_readv`` / ``writev``, ``bpf``,
  ``perf_event_open``, ``userfaultfd``, ``keyctl`` / ``add_key`` / ``request_key``, module and
  ``kexec`` loading, ``io_uring_setup`` (its operations, sockets and connects among them, pass
  no seccomp filter): ``EPERM``;
- memory that no limit counts: ``memfd_create`` (written, not mapped: outside ``RLIMIT_AS``)
  and System V IPC (``shmget``, ``msgget``, ``semget`` and their operations: the host's IPC
  namespace, whose objects outlive the worker and are open to every process of its user):
  ``EPERM``;
- with ``deny_sockets`` (a worker that denies the network): ``socket`` (a path-named UNIX socket
  of the caller's -- a local server, an SSH agent -- is outside the network namespace, and
  connecting to it opens no file for Landlock to check) and ``socketpair`` of any type but
  ``SOCK_STREAM`` (a datagram pair could send to such a path): ``EPERM``;
- what one process of a user may do to another of the same user with no capability and no
  ptrace check (so neither Landlock nor the namespaces stop it): ``setpriority``,
  ``sched_setaffinity``, ``sched_setscheduler``, ``sched_setparam``, ``sched_setattr``,
  ``ioprio_set`` and ``prlimit64`` are allowed only on the worker itself (pid 0; for
  ``setpriority`` and ``ioprio_set``, ``PRIO_PROCESS`` / ``IOPRIO_WHO_PROCESS`` too), else
  ``EPERM`` -- model code could otherwise idle, pin or renice the engine;
- with ``own_pid`` (the worker's): signals only to itself -- ``kill`` to ``own_pid``, 0 or
  ``-own_pid`` (its own process group: itself and its children), ``tkill``, ``tgkill``,
  ``rt_sigqueueinfo``, ``rt_tgsigqueueinfo`` and ``pidfd_open`` on ``own_pid``, else ``EPERM``
  (Landlock scopes signals from ABI 6 only); a file's signal owner (``fcntl`` F_SETOWN, whom
  the kernel signals when the file is ready) only ``own_pid``, 0 or ``-own_pid``, and
  F_SETOWN_EX, ``ioctl`` FIOSETOWN / SIOCSPGRP and ``pidfd_send_signal`` (whose target, a
  pidfd or an open ``/proc/<pid>`` folder, a filter cannot read) refused. Where children are
  allowed and Landlock scopes signals (to the worker and its children, whose pids a filter
  cannot know), these rules are left to Landlock; without that scoping, children are
  signalled through the group only;
- ``clone``: with ``deny_spawn`` allowed only with ``CLONE_THREAD`` (a new thread of this
  process), else ``EPERM``;
- ``clone3``: ``ENOSYS`` (its flags sit behind a pointer the filter cannot read; the C library
  then falls back to ``clone``, which the rule above checks);
- a system call of another ABI (x32, or 32-bit calls on x86-64): ``EPERM``.

Everything else is allowed: files, network and signals are Landlock's and the namespace's job.
x86-64 and aarch64 are supported; elsewhere :func:`install` is a no-op that returns ``()``.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct

__all__ = ["deny_spawn", "install", "is_supported", "rules"]

_PR_SET_NO_NEW_PRIVS = 38
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_TSYNC = 1
_CLONE_THREAD = 0x00010000
#: the same on every architecture; its target is a pidfd or an open /proc/<pid> folder
_PIDFD_SEND_SIGNAL = 424
_F_SETOWN, _F_SETOWN_EX, _FIOSETOWN, _SIOCSPGRP = 8, 15, 0x8901, 0x8902
#: CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
_CLONE_NEW_NAMESPACES = 0x7E020000

# classic BPF opcodes
_LD_W_ABS, _JEQ_K, _JGE_K, _JSET_K, _RET_K, _AND_K = 0x20, 0x15, 0x35, 0x45, 0x06, 0x54
_PRIO_PROCESS, _IOPRIO_WHO_PROCESS = 0, 1
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
# offsets in struct seccomp_data
_NR, _ARCH, _ARG0_LOW = 0, 4, 16
_X32_BIT = 0x40000000


class _Abi:
    def __init__(self, arch: int, seccomp: int, clone: int, clone3: int, spawn: tuple[int, ...],
                 denied: tuple[int, ...], self_only: dict[int, tuple[tuple[int, int], ...]],
                 sockets: tuple[int, int], signals: tuple[int, ...], x32: bool,
                 fcntl_ioctl: tuple[int, int]) -> None:
        self.arch, self.seccomp, self.clone, self.clone3 = arch, seccomp, clone, clone3
        #: fork, vfork, execve, execveat (refused only when spawning is denied)
        self.spawn = spawn
        self.socket, self.socketpair = sockets
        #: kill, then the calls whose first argument is the target process (or thread group)
        self.kill, self.signal_calls = signals[0], signals[1:]
        #: what names a file's signal owner (F_SETOWN, F_SETOWN_EX; FIOSETOWN, SIOCSPGRP)
        self.fcntl, self.ioctl = fcntl_ioctl
        #: system call -> the (argument index, value) pairs that make it act on this process
        self.denied, self.self_only, self.x32 = denied, self_only, x32


def _self_only(setpriority: int, sched_setparam: int, sched_setscheduler: int,
               sched_setaffinity: int, ioprio_set: int, prlimit64: int,
               sched_setattr: int) -> dict[int, tuple[tuple[int, int], ...]]:
    pid_zero = ((0, 0),)
    return {
        setpriority: ((0, _PRIO_PROCESS), (1, 0)), ioprio_set: ((0, _IOPRIO_WHO_PROCESS), (1, 0)),
        sched_setparam: pid_zero, sched_setscheduler: pid_zero, sched_setaffinity: pid_zero,
        prlimit64: pid_zero, sched_setattr: pid_zero,
    }


# the same number on every architecture: io_uring_setup; the new mount API (open_tree,
# move_mount, fsopen, fsconfig, fsmount, fspick, mount_setattr)
_GENERIC_DENIED = (425, 428, 429, 430, 431, 432, 433, 442)
_SOCK_STREAM, _SOCK_TYPE_MASK = 1, 0xF
_ABIS = {
    # AUDIT_ARCH_X86_64; seccomp=317; clone=56, clone3=435; fork=57, vfork=58, execve=59,
    # execveat=322; ptrace=101, pivot_root=155, chroot=161, mount=165, umount2=166,
    # init_module=175, delete_module=176, add_key=248, request_key=249, keyctl=250,
    # kexec_load=246, unshare=272, perf_event_open=298, setns=308, process_vm_readv=310,
    # process_vm_writev=311, finit_module=313, kexec_file_load=320, bpf=321, userfaultfd=323
    "x86_64": _Abi(0xC000003E, 317, 56, 435, (57, 58, 59, 322), (
        # setpgid=109, setsid=112
        109, 112, 101, 155, 161, 165, 166, 175, 176, 248, 249, 250, 246, 272, 298, 308,
        310, 311, 313, 320, 321, 323, *_GENERIC_DENIED,
        # memfd_create=319; shmget=29, shmat=30, shmctl=31, semget=64, semop=65, semctl=66,
        # shmdt=67, msgget=68, msgsnd=69, msgrcv=70, msgctl=71, semtimedop=220
        319, 29, 30, 31, 64, 65, 66, 67, 68, 69, 70, 71, 220),
        # setpriority=141, sched_setparam=142, sched_setscheduler=144, sched_setaffinity=203,
        # ioprio_set=251, prlimit64=302, sched_setattr=314
        _self_only(141, 142, 144, 203, 251, 302, 314), (41, 53),  # socket, socketpair
        # kill=62, tkill=200, tgkill=234, rt_sigqueueinfo=129, rt_tgsigqueueinfo=297,
        # pidfd_open=434
        (62, 200, 234, 129, 297, 434), True, (72, 16)),  # fcntl, ioctl
    # AUDIT_ARCH_AARCH64; seccomp=277; clone=220, clone3=435; execve=221, execveat=281;
    # umount2=39, mount=40, pivot_root=41, chroot=51, unshare=97, kexec_load=104,
    # init_module=105, delete_module=106, ptrace=117, add_key=217, request_key=218,
    # keyctl=219, perf_event_open=241, setns=268, process_vm_readv=270,
    # process_vm_writev=271, finit_module=273, bpf=280, userfaultfd=282, kexec_file_load=294
    "aarch64": _Abi(0xC00000B7, 277, 220, 435, (221, 281), (
        # setpgid=154, setsid=157
        154, 157, 39, 40, 41, 51, 97, 104, 105, 106, 117, 217, 218, 219, 241, 268, 270, 271,
        273, 280, 282, 294, *_GENERIC_DENIED,
        # memfd_create=279; msgget=186 ... shmdt=197 (msgctl, msgrcv, msgsnd, semget, semctl,
        # semtimedop, semop, shmget, shmctl, shmat)
        279, *range(186, 198)),
        # setpriority=140, sched_setparam=118, sched_setscheduler=119, sched_setaffinity=122,
        # ioprio_set=30, prlimit64=261, sched_setattr=274
        _self_only(140, 118, 119, 122, 30, 261, 274), (198, 199),  # socket, socketpair
        # kill=129, tkill=130, tgkill=131, rt_sigqueueinfo=138, rt_tgsigqueueinfo=240,
        # pidfd_open=434
        (129, 130, 131, 138, 240, 434), False, (25, 29)),  # fcntl, ioctl
}


def is_supported() -> bool:
    """Whether this machine's architecture has a filter here."""
    return platform.machine() in _ABIS


def _program(
    abi: _Abi, deny_spawn: bool = True, deny_sockets: bool = False,
    own_pid: int | None = None, signals_scoped: bool = False,
) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) instructions; jumps are relative to the next one."""
    eperm = _RET_ERRNO | errno.EPERM
    prog = [
        (_LD_W_ABS, 0, 0, _ARCH),
        (_JEQ_K, 1, 0, abi.arch),
        (_RET_K, 0, 0, eperm),
        (_LD_W_ABS, 0, 0, _NR),
    ]
    if abi.x32:
        prog += [(_JGE_K, 0, 1, _X32_BIT), (_RET_K, 0, 0, eperm)]
    for nr in (*abi.spawn, *abi.denied) if deny_spawn else abi.denied:
        prog += [(_JEQ_K, 0, 1, nr), (_RET_K, 0, 0, eperm)]
    for nr, checks in abi.self_only.items():
        prog += _only_if(nr, checks, eperm)
    if _restricts_signals(deny_spawn, own_pid, signals_scoped):
        assert own_pid is not None
        for nr in abi.signal_calls:
            prog += _only_if(nr, ((0, own_pid),), eperm)
        prog += [
            (_JEQ_K, 0, 6, abi.kill),
            (_LD_W_ABS, 0, 0, _ARG0_LOW),
            (_JEQ_K, 3, 0, own_pid),
            (_JEQ_K, 2, 0, 0),
            (_JEQ_K, 1, 0, (-own_pid) & 0xFFFFFFFF),  # its own process group
            (_RET_K, 0, 0, eperm),
            (_RET_K, 0, 0, _RET_ALLOW),
        ]
        prog += _signal_owner(abi, own_pid, eperm)
        prog += [(_JEQ_K, 0, 1, _PIDFD_SEND_SIGNAL), (_RET_K, 0, 0, eperm)]
    if deny_sockets:
        prog += [(_JEQ_K, 0, 1, abi.socket), (_RET_K, 0, 0, eperm)]
        prog += [
            (_JEQ_K, 0, 5, abi.socketpair),
            (_LD_W_ABS, 0, 0, _ARG0_LOW + 8),  # socketpair's type (with SOCK_CLOEXEC and such)
            (_AND_K, 0, 0, _SOCK_TYPE_MASK),
            (_JEQ_K, 0, 1, _SOCK_STREAM),
            (_RET_K, 0, 0, _RET_ALLOW),
            (_RET_K, 0, 0, eperm),
        ]
    prog += [(_JEQ_K, 0, 1, abi.clone3), (_RET_K, 0, 0, _RET_ERRNO | errno.ENOSYS)]
    prog += [(_JEQ_K, 0, 4, abi.clone), (_LD_W_ABS, 0, 0, _ARG0_LOW)]  # clone's flags (low 32)
    if deny_spawn:  # a thread of this process only
        prog += [(_JSET_K, 0, 1, _CLONE_THREAD), (_RET_K, 0, 0, _RET_ALLOW)]
    else:  # a thread or a child, in this process's namespaces
        prog += [(_JSET_K, 1, 0, _CLONE_NEW_NAMESPACES), (_RET_K, 0, 0, _RET_ALLOW)]
    prog += [(_RET_K, 0, 0, eperm), (_RET_K, 0, 0, _RET_ALLOW)]
    return prog


def _signal_owner(abi: _Abi, own_pid: int, eperm: int) -> list[tuple[int, int, int, int]]:
    """A file's signal owner (whom the kernel signals when it is ready, any signal with
    F_SETSIG) only the worker itself: ``fcntl`` F_SETOWN to ``own_pid``, 0 or ``-own_pid``;
    F_SETOWN_EX and the ``ioctl`` FIOSETOWN / SIOCSPGRP (the pid behind a pointer): EPERM."""
    group = (-own_pid) & 0xFFFFFFFF
    return [
        (_JEQ_K, 0, 9, abi.fcntl),
        (_LD_W_ABS, 0, 0, _ARG0_LOW + 8),  # the command
        (_JEQ_K, 5, 0, _F_SETOWN_EX),
        (_JEQ_K, 0, 5, _F_SETOWN),
        (_LD_W_ABS, 0, 0, _ARG0_LOW + 16),  # the owner
        (_JEQ_K, 3, 0, own_pid),
        (_JEQ_K, 2, 0, 0),
        (_JEQ_K, 1, 0, group),
        (_RET_K, 0, 0, eperm),
        (_RET_K, 0, 0, _RET_ALLOW),
        (_JEQ_K, 0, 5, abi.ioctl),
        (_LD_W_ABS, 0, 0, _ARG0_LOW + 8),  # the request
        (_JEQ_K, 2, 0, _FIOSETOWN),
        (_JEQ_K, 1, 0, _SIOCSPGRP),
        (_RET_K, 0, 0, _RET_ALLOW),
        (_RET_K, 0, 0, eperm),
    ]


def _restricts_signals(deny_spawn: bool, own_pid: int | None, signals_scoped: bool) -> bool:
    """With children allowed and Landlock scoping signals (to the worker and its children, which
    the filter cannot tell by pid), the filter leaves signals to Landlock."""
    return own_pid is not None and (deny_spawn or not signals_scoped)


def rules(*, deny_spawn: bool = True, deny_sockets: bool = False, own_pid: int | None = None,
          signals_scoped: bool = False) -> tuple[str, ...]:
    """The names of the rules :func:`install` puts on with these arguments (see the module
    docstring): ``confinement``, ``memory``, ``scheduling``, ``process_group`` always;
    ``signals``, ``sockets``, ``spawn`` as asked."""
    names = ["confinement", "memory", "scheduling", "process_group"]
    names += ["signals"] if _restricts_signals(deny_spawn, own_pid, signals_scoped) else []
    names += ["sockets"] if deny_sockets else []
    names += ["spawn"] if deny_spawn else []
    return tuple(names)


def _only_if(nr: int, checks: tuple[tuple[int, int], ...], refusal: int) -> list:
    """System call ``nr`` allowed only where each (argument, value) of ``checks`` holds (the
    low 32 bits: the kernel reads these arguments as ``int``), else ``refusal``; other calls
    skip the block with the call number still loaded."""
    block = [(_JEQ_K, 0, 2 * len(checks) + 2, nr)]
    for i, (arg, value) in enumerate(checks):
        remaining = 2 * (len(checks) - 1 - i)
        block += [(_LD_W_ABS, 0, 0, _ARG0_LOW + 8 * arg), (_JEQ_K, 0, remaining + 1, value)]
    return block + [(_RET_K, 0, 0, _RET_ALLOW), (_RET_K, 0, 0, refusal)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install(*, deny_spawn: bool = True, deny_sockets: bool = False,
            own_pid: int | None = None, signals_scoped: bool = False) -> tuple[str, ...]:
    """Install the filter on every thread of this process (and every child it starts), for
    good; return the names of its rules (:func:`rules`), or ``()`` if unsupported.

    ``deny_spawn``: refuse new processes and ``execve``; else children may be started (in this
    process's namespaces and process group). ``deny_sockets``: refuse new sockets too (but
    connected stream pairs). ``own_pid``: this process's id; its signals go only to itself and
    its process group -- unless children are allowed and ``signals_scoped`` (Landlock already
    scopes signals to this process and its children, whose pids the filter cannot know).

    Raises ``OSError`` if the kernel refuses the filter.
    """
    abi = _ABIS.get(platform.machine())
    if abi is None:
        return ()
    prog = _program(abi, deny_spawn, deny_sockets, own_pid, signals_scoped)
    code = b"".join(struct.pack("=HBBI", *insn) for insn in prog)
    buffer = ctypes.create_string_buffer(code, len(code))
    fprog = _SockFprog(len(prog), ctypes.cast(buffer, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        _raise(ctypes.get_errno())
    result = libc.syscall(
        ctypes.c_long(abi.seccomp), ctypes.c_long(_SECCOMP_SET_MODE_FILTER),
        ctypes.c_long(_SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(fprog),
    )
    if result != 0:
        _raise(ctypes.get_errno() or errno.EINVAL)
    return rules(deny_spawn=deny_spawn, deny_sockets=deny_sockets, own_pid=own_pid,
                 signals_scoped=signals_scoped)


def deny_spawn(*, deny_sockets: bool = False, own_pid: int | None = None) -> bool:
    """:func:`install` with new processes refused; False if unsupported."""
    return bool(install(deny_spawn=True, deny_sockets=deny_sockets, own_pid=own_pid))


def _raise(code: int) -> None:
    raise OSError(code, f"seccomp: {errno.errorcode.get(code, code)}")
