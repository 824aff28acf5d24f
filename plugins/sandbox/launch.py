"""How a worker's jail is started, on the host: the ``bwrap`` command line and what it
mounts (``bwrap_command``, ``bind_args``), the interpreter it runs, the bootstrap that
interpreter runs (``BOOTSTRAP``), fed the shipped sources (``bootstrap_input``), and the
launcher every jail starts through (``LAUNCHER``, ``launcher_command``): it joins the
worker's cgroups and, when rlvr runs as root, becomes the worker's own unprivileged uid
before the jail exists, so that nothing in the jail is ever host uid 0.

Only ``limits`` and the ``jail`` modules are shipped, as source text on the bootstrap's
stdin: never a host module, and no file of the host is mounted for them."""

from __future__ import annotations

import functools
import os
import sys

from . import limits
from .jail import cage, candidate, report, server, tester, wire, zygote
from .limits import MAX_FILE_BYTES, NOBODY

# The modules shipped into the jail, each after the ones it imports.
SHIPPED = (limits, wire, cage, report, candidate, zygote, tester, server)
# Their package in the jail: rlvr_plugins.sandbox.jail.wire runs there as rlvr_sandbox.jail.wire,
# so that its relative imports (.cage, ..limits) resolve to the other shipped modules.
JAIL_PACKAGE = "rlvr_sandbox"

# Run inside the sandbox with ``python -I -c``: read the shipped modules from stdin
# (``bootstrap_input``: their count, then each one's name, file name and source, as
# ``wire.FRAME``-prefixed frames), register each under its name and execute it, then
# run the fork server. Neither ``rlvr`` nor ``rlvr_plugins`` is importable there.
BOOTSTRAP = """\
import os, struct, sys, types
os.closerange(3, 1 << 16)
def _read(n):
    b = b""
    while len(b) < n:
        c = os.read(0, n - len(b))
        if not c:
            raise SystemExit(3)
        b += c
    return b
def _text():
    return _read(struct.unpack(">I", _read(4))[0]).decode()
for _ in range(int(_text())):
    _name, _file = _text(), _text()
    _mod = types.ModuleType(_name); _mod.__package__ = _name.rpartition(".")[0]; sys.modules[_name] = _mod
    exec(compile(_text(), _file, "exec"), _mod.__dict__)
sys.modules["rlvr_sandbox.jail.server"].main()
"""


@functools.cache
def shipped_sources() -> tuple[tuple[str, str, bytes], ...]:
    """(name in the jail, file name for tracebacks, source) of each shipped module, in
    the bootstrap's order. Never a host module: the host side stays outside."""
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sources = []
    for module in SHIPPED:
        with open(module.__file__, "rb") as f:
            source = f.read()
        sources.append((JAIL_PACKAGE + module.__name__[len(__package__):], os.path.relpath(module.__file__, top),
                        source))
    return tuple(sources)


@functools.cache
def bootstrap_input() -> bytes:
    """What a worker writes to the bootstrap's stdin before its config: the shipped
    modules, framed as ``BOOTSTRAP`` reads them."""
    fields = [str(len(shipped_sources())).encode()]
    for name, filename, source in shipped_sources():
        fields += [name.encode(), filename.encode(), source]
    return b"".join(wire.FRAME.pack(len(field)) + field for field in fields)


def bind_args() -> list[str]:
    """Read-only view of the host: /usr, the /bin and /lib links or dirs, and the
    interpreter's prefix; nothing from /etc, /home, /root or the project."""
    args: list[str] = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    prefixes = []
    for path in (sys.base_prefix, sys.base_exec_prefix, os.path.dirname(interpreter())):
        real = os.path.realpath(path)
        if real == "/usr" or real.startswith("/usr/") or real in prefixes:
            continue
        if any(real.startswith(p + "/") for p in prefixes):
            continue
        prefixes.append(real)
    for real in prefixes:
        args += ["--ro-bind", real, real]
    return args


def interpreter() -> str:
    """The base interpreter (not a venv shim: the venv is not mounted)."""
    exe = getattr(sys, "_base_executable", None) or sys.executable
    return os.path.realpath(exe)


def python_command() -> list[str]:
    """The jail's process tree starts with this: the bootstrap in an isolated interpreter."""
    return [interpreter(), "-I", "-c", BOOTSTRAP]


def bwrap_command(bwrap: str) -> list[str]:
    """``python_command`` inside a fresh ``bwrap`` sandbox (what it isolates: see the package)."""
    return [
        bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
        "--uid", str(NOBODY), "--gid", str(NOBODY), "--clearenv",
        "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp", "--setenv", "LANG", "C.UTF-8",
        "--hostname", "sandbox",
        *bind_args(),
        # The sysctls, read-only: a fresh procfs's /proc/sys is writable wherever the
        # file's owner (host root) maps to the caller; the host's own, bound read-only,
        # is what programs read (net/ shows the sandbox's own network namespace).
        "--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys",
        # Pressure-stall triggers: world-writable by design, harmless, but not the jail's business.
        *(["--ro-bind", "/proc/pressure", "/proc/pressure"] if os.path.isdir("/proc/pressure") else []),
        "--dev", "/dev",
        "--size", str(MAX_FILE_BYTES), "--tmpfs", "/dev/shm", "--size", str(MAX_FILE_BYTES), "--tmpfs", "/tmp",
        "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/tmp",
        "--", *python_command(),
    ]


# Run by the host's interpreter (``python -I -S``) as the first process of every jail,
# with a JSON spec and then the jail's command: it writes its pid into the worker's
# cgroups (so that every process the jail ever starts is counted from its first
# instruction), then -- given a uid, i.e. rlvr runs as root -- enters a mount namespace
# of its own, binds each ``--ro-bind`` source named in ``stage`` onto a private tmpfs
# (the interpreter's prefix may sit under a folder that only root may enter, such as
# /root/.pyenv) and becomes that uid, with no groups and no capabilities, before it
# execs the jail. bwrap then builds the sandbox as that unprivileged uid: the kernel
# maps the jail's uid 65534 to it, never to host root.
LAUNCHER = """\
import ctypes, json, os, sys
spec, command = json.loads(sys.argv[1]), sys.argv[2:]
me = str(os.getpid()).encode()
for path in spec["cgroup_procs"]:
    fd = os.open(path, os.O_WRONLY)
    os.write(fd, me)
    os.close(fd)
if spec["uid"] is not None:
    libc = ctypes.CDLL(None, use_errno=True)
    def check(ret, what):
        if ret != 0:
            err = ctypes.get_errno()
            raise OSError(err, what + ": " + os.strerror(err))
    check(libc.unshare(0x00020000), "unshare(CLONE_NEWNS)")
    check(libc.mount(None, b"/", None, 0x4000 | 0x40000, None), "mount --make-rprivate /")
    # Opened in this namespace (a bind's source must be a mount of the caller's own) and
    # before the tmpfs covers /tmp, where a source may lie.
    sources = [os.open(command[i], os.O_PATH | os.O_CLOEXEC) for i in spec["stage"]]
    check(libc.mount(b"rlvr-stage", b"/tmp", b"tmpfs", 0, b"mode=755,size=64k"), "mount tmpfs /tmp")
    for n, (i, fd) in enumerate(zip(spec["stage"], sources)):
        staged = "/tmp/%d" % n
        if os.path.isdir("/proc/self/fd/%d" % fd):
            os.mkdir(staged)
        else:
            os.close(os.open(staged, os.O_CREAT | os.O_WRONLY, 0o644))
        check(libc.mount(("/proc/self/fd/%d" % fd).encode(), staged.encode(), None, 0x1000 | 0x4000, None),
              "bind " + command[i])
        os.close(fd)
        command[i] = staged
    uid = spec["uid"]
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
os.execv(command[0], command)
"""


def launcher_command(command: list[str], *, cgroup_procs: list[str], uid: int | None) -> list[str]:
    """``command`` started through ``LAUNCHER``: in the cgroups whose ``cgroup.procs`` files
    are given, and, with ``uid`` (rlvr runs as root), as that uid, every ``--ro-bind``
    source of a ``bwrap`` command staged so that the uid can reach it."""
    import json

    stage = [i + 1 for i, arg in enumerate(command) if arg == "--ro-bind"] if uid is not None else []
    spec = {"cgroup_procs": cgroup_procs, "uid": uid, "stage": stage}
    return [interpreter(), "-I", "-S", "-c", LAUNCHER, json.dumps(spec), *command]


def unavailable_message(isolation: str, problem: str) -> str:
    """The error for a sandbox that cannot start, with what to do about it."""
    if isolation == "bwrap":
        return (f"sandbox isolation 'bwrap' is unavailable: {problem}. Install bubblewrap "
                "(Debian/Ubuntu: `apt-get install bubblewrap`; Fedora: `dnf install bubblewrap`) on a kernel "
                "that allows unprivileged user namespaces (as root too: rlvr starts bwrap as an unprivileged "
                "uid of its own), or choose the weaker level explicitly with "
                "isolation='process' (no filesystem or network isolation)")
    return f"sandbox isolation 'process' is unavailable: {problem}"
