"""How a worker's jail is started, on the host: the ``bwrap`` command line and what it
mounts (``bwrap_command``, ``bind_args``), the interpreter it runs, and the bootstrap
that interpreter runs (``BOOTSTRAP``), fed the shipped sources (``bootstrap_input``).

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
        "--proc", "/proc", "--dev", "/dev",
        "--size", str(MAX_FILE_BYTES), "--tmpfs", "/dev/shm", "--size", str(MAX_FILE_BYTES), "--tmpfs", "/tmp",
        "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/tmp",
        "--", *python_command(),
    ]


def unavailable_message(isolation: str, problem: str) -> str:
    """The error for a sandbox that cannot start, with what to do about it."""
    if isolation == "bwrap":
        return (f"sandbox isolation 'bwrap' is unavailable: {problem}. Install bubblewrap "
                "(Debian/Ubuntu: `apt-get install bubblewrap`; Fedora: `dnf install bubblewrap`) on a kernel "
                "that allows unprivileged user namespaces, or choose the weaker level explicitly with "
                "isolation='process' (no filesystem or network isolation)")
    return f"sandbox isolation 'process' is unavailable: {problem}"
