"""Linux primitives the jail's processes confine themselves with, through ctypes
(imported lazily: the host imports none of this): namespaces (``unshare``, ``setns``),
``prctl``, dropping every capability, rlimits, a fork without CPython's at-fork hooks,
and descriptor hygiene (``move_fds``, ``null_stdio``)."""

from __future__ import annotations

import os
import struct

from ..limits import MAX_FILE_BYTES


CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, _PR_CAPBSET_DROP = 1, 4, 24
PR_SET_NO_NEW_PRIVS, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 38, 47, 4

_libc_handle = None


def _libc():
    global _libc_handle
    if _libc_handle is None:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
        _libc_handle = libc
    return _libc_handle


def _check(ret: int, what: str) -> None:
    if ret != 0:
        import ctypes

        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def prctl(option: int, arg: int = 0) -> int:
    """prctl(2) with one argument; returns its result (no errno check)."""
    return _libc().prctl(option, arg, 0, 0, 0)


def unshare(flags: int) -> None:
    """unshare(2) of the ``CLONE_NEW*`` namespaces in ``flags``; OSError if refused."""
    _check(_libc().unshare(flags), "unshare")


def setns(fd: int, nstype: int) -> None:
    """setns(2): join the namespace open at ``fd``; OSError if refused."""
    _check(_libc().setns(fd, nstype), "setns")


def last_capability() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 63


def drop_all_capabilities(last_cap: int) -> None:
    import ctypes

    libc_prctl = _libc().prctl
    for cap in range(last_cap + 1):
        libc_prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
    libc_prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)

    # struct __user_cap_header_struct {u32 version; int pid} (version 3), then two
    # all-zero struct __user_cap_data_struct {u32 effective, permitted, inheritable}.
    header = ctypes.create_string_buffer(struct.pack("=Ii", 0x20080522, 0), 8)
    data = ctypes.create_string_buffer(24)
    _check(_libc().capset(header, data), "capset")
    _check(prctl(PR_SET_NO_NEW_PRIVS, 1), "no_new_privs")


_raw_fork_fn = None


def raw_fork() -> int:
    """fork(2) without CPython's before/after-fork machinery, which costs the child
    about 200 page faults (1 ms here). Safe in the zygote only: it is single-
    threaded and holds no lock when it forks. Of the skipped at-fork hooks only
    ``random``'s reseed matters; the candidate reseeds itself."""
    global _raw_fork_fn
    if _raw_fork_fn is None:
        import ctypes

        fn = ctypes.PyDLL(None, use_errno=True).fork  # PyDLL: the GIL stays held across the call
        fn.restype = ctypes.c_int
        fn.argtypes = []
        _raw_fork_fn = fn
    pid = _raw_fork_fn()
    if pid < 0:
        import ctypes

        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return pid


def move_fds(keep: list[int]) -> list[int]:
    """Keep only ``keep`` (renumbered to 3, 4, ...) plus 0-2, close every other fd."""
    base = max(keep + [2]) + 1 + 16
    staged = [os.dup2(fd, base + i) for i, fd in enumerate(keep)]
    out = []
    for i, fd in enumerate(staged):
        os.dup2(fd, 3 + i)
        out.append(3 + i)
    os.closerange(3 + len(keep), 1 << 16)
    for fd in out:
        os.set_inheritable(fd, False)
    return out


def null_stdio() -> None:
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if null > 2:
        os.close(null)


def set_rlimits(cpu_seconds: float | None, memory_mb: int, nofile: int, nproc: int | None) -> None:
    import resource

    def lower(which: int, value: int) -> None:
        soft, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (value, value))

    if cpu_seconds is not None:
        # SIGXCPU at the soft limit, SIGKILL a second later.
        cpu = int(cpu_seconds) + 1
        soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1 if hard == resource.RLIM_INFINITY else min(cpu + 1, hard)))
    lower(resource.RLIMIT_AS, memory_mb << 20)
    lower(resource.RLIMIT_FSIZE, MAX_FILE_BYTES)
    lower(resource.RLIMIT_NOFILE, nofile)
    lower(resource.RLIMIT_CORE, 0)
    lower(resource.RLIMIT_MEMLOCK, 0)
    if nproc is not None:
        lower(resource.RLIMIT_NPROC, nproc)
