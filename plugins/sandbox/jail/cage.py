"""Linux primitives the jail's processes confine themselves with, through ctypes
(imported lazily: the host imports none of this): namespaces (``unshare``, ``setns``),
``prctl``, dropping every capability, a seccomp filter that keeps a pinned program on
its CPUs (``forbid_affinity_changes``), rlimits, a fork without CPython's at-fork hooks,
and descriptor hygiene (``move_fds``, ``null_stdio``)."""

from __future__ import annotations

import os
import struct

from ..limits import MAX_FILE_BYTES


CLONE_NEWNS = 0x00020000
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


_MS_RDONLY, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 0x1, 0x20, 0x1000, 0x4000, 0x40000
# The host's kernel knobs: sysctls, sysfs, the SysRq trigger and pressure-stall triggers.
KERNEL_KNOBS = ("/proc/sys", "/sys", "/proc/sysrq-trigger", "/proc/pressure")


def _mount(source: str | None, target: str, flags: int) -> None:
    import ctypes

    encode = (lambda path: None if path is None else path.encode())
    _check(_libc().mount(encode(source), encode(target), None, ctypes.c_ulong(flags), None), f"mount {target}")


def read_only_kernel_knobs() -> None:
    """In a mount namespace of this process's own, make ``KERNEL_KNOBS`` read-only, with
    every mount beneath them. Needs CAP_SYS_ADMIN (process isolation as root, before the
    program's uid is taken); once the capabilities are gone nothing can undo it."""
    unshare(CLONE_NEWNS)
    _mount(None, "/", _MS_REC | _MS_PRIVATE)
    for knob in KERNEL_KNOBS:
        if os.path.exists(knob):
            _mount(knob, knob, _MS_BIND | _MS_REC)
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4].replace("\\040", " ") for line in f]
    for point in points:
        if any(point == knob or point.startswith(knob + "/") for knob in KERNEL_KNOBS):
            _mount(None, point, _MS_REMOUNT | _MS_BIND | _MS_RDONLY)


# seccomp: the filter sees struct seccomp_data {int nr; u32 arch; ...}. Per architecture:
# its AUDIT_ARCH value, sched_setaffinity's number, and the bit that marks another ABI's
# numbers sharing the architecture value (x86_64's x32), 0 where there is none.
_SECCOMP_ARCH = {"x86_64": (0xC000003E, 203, 0x40000000), "aarch64": (0xC00000B7, 122, 0)}
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_LD_ABS_W, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06


def forbid_affinity_changes() -> bool:
    """Install a seccomp filter on this process and all it starts: ``sched_setaffinity``
    fails with EPERM (a program pinned to a CPU cannot widen its set), as does every system
    call of a foreign ABI (i386's ``int 0x80``, x32), through which it could be reached by
    another number. Needs ``no_new_privs``. False, and nothing installed, on an
    architecture this does not know."""
    import ctypes
    import errno

    known = _SECCOMP_ARCH.get(os.uname().machine)
    if known is None:
        return False
    arch, setaffinity, abi_bit = known
    deny = _RET_ERRNO | errno.EPERM
    program = [
        (_LD_ABS_W, 0, 0, 4),  # A = arch
        (_JEQ_K, 1, 0, arch),
        (_RET_K, 0, 0, deny),
        (_LD_ABS_W, 0, 0, 0),  # A = nr
        (_JGE_K, 0, 1, abi_bit or 0xFFFFFFFF),
        (_RET_K, 0, 0, deny),
        (_JEQ_K, 0, 1, setaffinity),
        (_RET_K, 0, 0, deny),
        (_RET_K, 0, 0, _RET_ALLOW),
    ]
    filters = ctypes.create_string_buffer(b"".join(struct.pack("=HBBI", *op) for op in program))
    fprog = ctypes.create_string_buffer(struct.pack("@HP", len(program), ctypes.addressof(filters)))
    _check(_libc().prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0), "seccomp")
    return True


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
