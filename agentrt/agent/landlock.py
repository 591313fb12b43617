"""Linux Landlock through raw syscalls: kernel-enforced file and TCP limits for a tool worker.

Landlock (Linux ≥ 5.13) lets an unprivileged process drop its own rights for good: after
:func:`restrict`, the kernel refuses every file access outside the listed folders, every ``execve``
(no path gets the execute right), TCP ``bind``/``connect`` (ABI ≥ 4) and signals to processes
outside the sandbox (ABI ≥ 6), whatever the code — Python, C extension or ``ctypes``. Used only in
a freshly forked, single-threaded worker; a kernel without Landlock makes :func:`restrict` a no-op
that returns 0, and the audit hooks in :mod:`agentrt.agent.sandbox` remain.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterable

__all__ = ["abi_version", "restrict"]

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446  # the same on every architecture
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2
_PR_SET_NO_NEW_PRIVS = 38

_EXECUTE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 2, 1 << 3
_WRITE_V1 = (1 << 1) | sum(1 << bit for bit in range(4, 13))  # write, remove, make_*
_REFER, _TRUNCATE, _IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_FILE_RIGHTS = _EXECUTE | (1 << 1) | _READ_FILE | _TRUNCATE | _IOCTL_DEV  # rights a file can hold
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def abi_version() -> int:
    """The kernel's Landlock ABI version, 0 if Landlock is unavailable."""
    try:
        libc = _libc()
        version = libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    except (OSError, AttributeError):
        return 0
    return max(int(version), 0)


def _fs_rights(abi: int) -> tuple[int, int]:
    """(all handled rights, write rights) for this ABI."""
    write = _WRITE_V1 | (_REFER if abi >= 2 else 0) | (_TRUNCATE if abi >= 3 else 0)
    write |= _IOCTL_DEV if abi >= 5 else 0
    return _EXECUTE | _READ_FILE | _READ_DIR | write, write


def restrict(
    read_paths: Iterable[str],
    write_paths: Iterable[str],
    *,
    deny_tcp: bool = True,
    scope_signals: bool = True,
    allow_execute: bool = False,
) -> int:
    """Confine the calling thread (and its future children) for good; return the ABI used.

    ``read_paths`` become read-only, ``write_paths`` read-write; everything else is denied, and
    so is ``execve`` of any file unless ``allow_execute``. Missing paths are skipped. Raises
    ``OSError`` if the kernel refuses.
    """
    abi = abi_version()
    if abi < 1:
        return 0
    libc = _libc()
    handled, write = _fs_rights(abi)
    attr = _RulesetAttr(handled, 0, 0)
    if deny_tcp and abi >= 4:
        attr.handled_access_net = _NET_BIND_TCP | _NET_CONNECT_TCP
    if scope_signals and abi >= 6:
        attr.scoped = _SCOPE_SIGNAL | _SCOPE_ABSTRACT_UNIX
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    ruleset = _check(libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0))
    try:
        read = _READ_FILE | _READ_DIR | (_EXECUTE if allow_execute else 0)
        for path in read_paths:
            _add_path(libc, ruleset, path, read)
        for path in write_paths:
            _add_path(libc, ruleset, path, read | write)
        _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
        _check(libc.syscall(_RESTRICT_SELF, ruleset, 0))
    finally:
        os.close(ruleset)
    return abi


def _add_path(libc: ctypes.CDLL, ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if not os.path.isdir(path):
            rights &= _FILE_RIGHTS
        rule = _PathBeneath(rights, fd)
        _check(libc.syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0))
    finally:
        os.close(fd)


def _check(result: int) -> int:
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"landlock: {os.strerror(errno)}")
    return result
