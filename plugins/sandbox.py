"""Run untrusted (model-written) Python and grade it with tests it cannot reach.

What it protects against, with ``isolation="bwrap"`` (the default):

- Faked verdicts. The candidate program runs in its own process; the tests run in
  another one, the *tester*, which never runs candidate code and calls the
  candidate's functions through proxies. Arguments and return values cross a
  socket as JSON of builtin types only (tuples, sets, dicts, bytes tagged) and the
  tester decodes them strictly, so objects with a rigged ``__eq__``, patched
  builtins, frame or ``gc`` walking, ``os._exit(0)``/``SystemExit``, ``atexit``
  hooks, exit codes and text written to any file descriptor never reach the
  decision. The tester reports to the fork server over a socket no candidate ever
  holds; silence, garbage, a dead tester or a dead candidate is a failure. The
  tests and expected outputs are never in the candidate's memory: candidates are
  forked from a zygote that never sees them (program text arrives in a memfd).
  The tester is one process per worker, running each job's tests in a fresh
  namespace; it is replaced every few hundred jobs and whenever it misses a deadline.
- The host. Each worker is one long-lived ``bwrap`` (bubblewrap) sandbox: new user,
  pid, mount, network, ipc, uts and cgroup namespaces, all capabilities dropped,
  uid 65534, ``--clearenv`` (no parent secrets), a read-only root with only ``/usr``
  (plus the ``/bin``/``/lib`` links) and the interpreter's prefix bound, read-only;
  no ``/etc``, ``/home``, ``/root`` or project directory; no network (a loopback
  device that is down). Inside, the fork server, zygote and tester are not
  dumpable (no ptrace, no ``/proc/<pid>/mem`` or ``/proc/<pid>/fd`` access), and
  every program runs as pid 1 of a pid namespace of its own, in a session and
  process group of its own, with its own SysV IPC namespace, capabilities dropped
  again and ``no_new_privs``: it cannot see or signal anything outside that
  namespace -- ``kill(-1, ...)`` reaches its own processes only, and ``kill(0,
  ...)``/``killpg(getpgrp(), ...)`` its own group only (process groups span pid
  namespaces: without a group of its own, a ``SIGSTOP`` to it would stop the fork
  server and the tester) -- and when it ends the kernel kills everything it left
  behind (``setsid``, double forks, orphans). The only writable places,
  size-capped ``/tmp`` and ``/dev/shm``, are emptied after every program.
- Resource abuse. rlimits per program (address space, CPU seconds, file size, open
  files, processes, no core dumps), a wall-clock deadline enforced from outside, a
  cap on stdout+stderr bytes, and -- where the cgroup v1 ``pids`` and ``memory``
  controllers are writable (as root) -- a process-count and memory ceiling per
  worker. ``Result.elapsed`` is wall time measured on the host, from handing the
  job over to its result (or to the worker's death): whatever a program does, its
  run is charged at least the time it took.
- Terminal and log injection. Text that comes back from a program (``output``,
  ``message``) has its control characters escaped (``escape_controls``).

What it does not protect against:

- Kernel bugs reachable from an unprivileged process, and whatever a process can
  do inside namespaces it creates itself. No seccomp filter is installed.
- Reads of the bound directories: when the host runs as root, sandboxed processes
  are host uid 0 without capabilities, so a root-only file *inside* ``/usr`` or the
  interpreter prefix would be readable. Nothing else of the host's tree is mounted.
- Channels between programs of one worker that do not affect verdicts: kernel
  keyrings of the sandbox's uid, and CPU-time or cache side channels.
- Tests that are themselves weak (a ``check`` that can be satisfied vacuously):
  the verdict is exactly as strong as the test code.
- Without writable cgroups (not root, or cgroup v2 only), memory caps are
  per-process rlimits only, which a program can spread across processes.

``isolation="process"`` is the explicit weaker level, and choosing it logs a warning
(once per process) that says what follows: the same fork server, zygote, tester and
proxies (so verdicts still cannot be faked) and the same rlimits, cgroups and output
caps, and each program in a session and process group of its own (``kill(0, ...)``
reaches its own group only; its group is killed after the run), but no namespaces:
the program can read what its uid can read (``/etc/passwd``, world-readable files),
use the network (loopback services included) and, when it escapes its session with
``setsid``, outlive the run unless the pids cgroup is available (it is swept after
every run). ``kill(-1, ...)`` reaches every process of the program's uid, which
without namespaces nothing can narrow: as root, each worker's programs run as a
uid/gid of that worker's own (``_private_uid``), so they reach that worker's own
programs only, never another episode's; not as root, programs run as the host's
own user and can signal every process of it, the trainer included.

Candidates see the interpreter's standard library (and its own site-packages), not
the project's virtual environment.

Besides grading (``Job.mode`` "call" and "io"), mode "exec" runs a tool call -- a
code cell of a multi-turn episode after that episode's earlier cells -- and returns
what it printed: the same isolation, rlimits, deadline and cgroup ceilings, and
nothing to fake, since nothing is graded.

Layout: this module is the host side (``Sandbox``, its workers, the ``bwrap``
command line, cgroups). Everything that runs inside the jail is in
``sandbox_jail`` (standard library only) and the limits both sides share are in
``sandbox_limits``; those two files' sources, never this one's, are what is
shipped into the sandbox.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import re
import signal
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

from rlvr import RlvrError

from . import sandbox_jail, sandbox_limits
from .sandbox_jail import _FRAME, _Closed, _recv, _send, _short, _Timeout, _write_all
from .sandbox_limits import (
    DEFAULT_KEEP_OUTPUT,
    DEFAULT_MAX_OUTPUT,
    DEFAULT_MAX_PROCS,
    DEFAULT_MEMORY_MB,
    DEFAULT_TIMEOUT,
    GRACE,
    MAX_FILE_BYTES,
    NOBODY,
)

__all__ = ["Job", "Result", "Sandbox", "get_sandbox", "escape_controls", "ISOLATION_LEVELS", "JOB_MODES",
           "close_all"]

log = logging.getLogger("rlvr.sandbox")

ISOLATION_LEVELS = ("bwrap", "process")
JOB_MODES = ("call", "io", "exec")

# Run inside the sandbox with ``python -I -c``: read the shipped sources from stdin
# (``_shipped_sources``: the limits module, then the jail module) and run the jail
# module's fork server. Neither ``rlvr`` nor ``rlvr_plugins`` is importable there:
# the limits module is registered under the name that the jail module's relative
# import ``.sandbox_limits`` resolves to.
_BOOTSTRAP = """\
import os, struct, sys, types
def _read(n):
    b = b""
    while len(b) < n:
        c = os.read(0, n - len(b))
        if not c:
            raise SystemExit(3)
        b += c
    return b
def _load(name, filename):
    mod = types.ModuleType(name); mod.__package__ = "rlvr_sandbox"; sys.modules[name] = mod
    src = _read(struct.unpack(">I", _read(4))[0]).decode()
    exec(compile(src, filename, "exec"), mod.__dict__)
    return mod
_load("rlvr_sandbox.sandbox_limits", "sandbox_limits.py")
_load("rlvr_sandbox_server", "sandbox_jail.py")._server_main()
"""


@dataclass
class Job:
    """One program and its tests.

    ``mode="call"``: ``program`` is loaded in the candidate process; ``tests`` are
    code units run by the tester (each assert counted), after ``trusted`` code
    (a prompt's helpers, MBPP setup code) has run in the tester. ``entry_point``,
    if given, is always bound to the candidate's function of that name.
    ``mode="io"``: ``program`` runs as ``__main__`` once per ``(stdin, expected)``
    case; the stripped stdout must equal the stripped expected text and the exit
    code be 0. ``timeout`` (wall seconds) and ``memory_mb`` (address space) apply
    to each program run; more than ``max_output`` bytes of stdout+stderr fail it.

    ``mode="exec"`` (a tool call: nothing is graded): the ``setup`` cells, then
    ``program``, run as ``__main__`` in one process and one namespace, the setup
    cells' output discarded and an exception ending its own cell only (a notebook
    kernel's session, replayed: nothing persists between jobs). ``Result.output`` is
    what the program wrote to stdout and stderr (one pipe, lines in order), its first
    ``keep_output`` bytes; ``Result.output_bytes`` counts all of it. Status ``ok``,
    ``error`` (it raised: ``message`` is the exception's last traceback line),
    ``exited`` (it ended the process itself, e.g. ``os._exit``), ``timeout``,
    ``crashed`` (killed by a signal, e.g. out of memory) or ``output_limit`` (more
    than ``max_output`` bytes: stopped there); the output comes back in every case.
    ``seed`` (if set) seeds ``random`` before the setup cells, so that replays draw
    what the first run drew.
    """

    program: str
    mode: str = "call"
    tests: list[str] = field(default_factory=list)
    trusted: str = ""
    entry_point: str | None = None
    cases: list[tuple[str, str]] = field(default_factory=list)
    partial: bool = False
    timeout: float = DEFAULT_TIMEOUT
    memory_mb: int = DEFAULT_MEMORY_MB
    max_output: int = DEFAULT_MAX_OUTPUT
    setup: list[str] = field(default_factory=list)
    keep_output: int = DEFAULT_KEEP_OUTPUT
    seed: int | None = None

    def to_wire(self) -> dict:
        if self.mode not in JOB_MODES:
            raise ValueError(f"unknown job mode {self.mode!r}")
        return {"mode": self.mode, "program": str(self.program), "tests": [str(t) for t in self.tests],
                "trusted": str(self.trusted or ""), "entry_point": self.entry_point,
                "cases": [[str(i), str(o)] for i, o in self.cases], "partial": bool(self.partial),
                "timeout": float(self.timeout), "memory_mb": int(self.memory_mb),
                "max_output": int(self.max_output), "setup": [str(c) for c in self.setup],
                "keep_output": max(0, min(int(self.keep_output), int(self.max_output))),
                "seed": None if self.seed is None else int(self.seed)}

    def budget(self) -> float:
        runs = len(self.cases) if self.mode == "io" else 1
        return max(runs, 1) * (float(self.timeout) + GRACE + 5.0) + 10.0


@dataclass(frozen=True)
class Result:
    """``status``: passed, failed, error (raised / did not load), timeout, crashed,
    output_limit, invalid_test (the tests themselves are broken) or sandbox_error;
    in exec mode ok instead of passed and failed, exited besides (see ``Job``).
    ``output`` and ``output_bytes``: exec mode only. ``output`` and ``message``
    have their control characters escaped (``escape_controls``); ``output_bytes``
    counts the bytes the program wrote. ``elapsed``: wall seconds of the run,
    measured on the host."""

    status: str
    passed: int
    total: int
    message: str
    elapsed: float
    isolation: str
    output: str = ""
    output_bytes: int = 0

    @property
    def ok(self) -> bool:
        return self.status in ("passed", "ok")


# C0 controls but tab and newline, DEL, and C1 controls: what a terminal, a log viewer
# or a tokenizer may act on rather than show. (\r\n is normalised to \n first.)
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def escape_controls(text: str) -> str:
    """``text`` with its control characters written out as Python's ``repr`` writes
    them (``\\x00``, ``\\x1b``, ``\\r``, ``\\x85``), so that program output shown to a
    model or written to a log cannot carry terminal escape sequences, NULs or
    carriage-return overwrites. Newlines and tabs stay; ``\\r\\n`` becomes ``\\n``."""
    return _CONTROLS.sub(_escape_one, text.replace("\r\n", "\n"))


def _escape_one(match: re.Match) -> str:
    char = match.group()
    return "\\r" if char == "\r" else f"\\x{ord(char):02x}"


def _bind_args() -> list[str]:
    """Read-only view of the host: /usr, the /bin and /lib links or dirs, and the
    interpreter's prefix; nothing from /etc, /home, /root or the project."""
    args: list[str] = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    prefixes = []
    for path in (sys.base_prefix, sys.base_exec_prefix, os.path.dirname(_interpreter())):
        real = os.path.realpath(path)
        if real == "/usr" or real.startswith("/usr/") or real in prefixes:
            continue
        if any(real.startswith(p + "/") for p in prefixes):
            continue
        prefixes.append(real)
    for real in prefixes:
        args += ["--ro-bind", real, real]
    return args


def _interpreter() -> str:
    """The base interpreter (not a venv shim: the venv is not mounted)."""
    exe = getattr(sys, "_base_executable", None) or sys.executable
    return os.path.realpath(exe)


def _bwrap_command(bwrap: str) -> list[str]:
    return [
        bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
        "--uid", str(NOBODY), "--gid", str(NOBODY), "--clearenv",
        "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp", "--setenv", "LANG", "C.UTF-8",
        "--hostname", "sandbox",
        *_bind_args(),
        "--proc", "/proc", "--dev", "/dev",
        "--size", str(MAX_FILE_BYTES), "--tmpfs", "/dev/shm", "--size", str(MAX_FILE_BYTES), "--tmpfs", "/tmp",
        "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/tmp",
        "--", _interpreter(), "-I", "-c", _BOOTSTRAP,
    ]


_CGROUP_V1 = "/sys/fs/cgroup"
_CGROUP_PARENT = "rlvr-sandbox"


def _cgroup_controllers() -> dict[str, str]:
    """Writable cgroup v1 controllers we use: name -> mount point."""
    found = {}
    for name in ("pids", "memory"):
        base = os.path.join(_CGROUP_V1, name)
        if os.path.exists(os.path.join(base, "cgroup.procs")) and os.access(base, os.W_OK):
            found[name] = base
    return found


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


class _Worker:
    """Host handle on one sandboxed fork server."""

    def __init__(self, pool: Sandbox, index: int) -> None:
        self.pool = pool
        self.name = f"{os.getpid()}-{id(pool):x}-{index}"
        self.proc: Any = None
        self.cgroups: dict[str, str] = {}
        self.memory_limit = 0
        self.workdir: str | None = None  # process isolation: where program runs get their directories
        self.uid: int | None = None  # process isolation as root: the uid/gid its programs run as
        # One worker's processes hand each job along a chain (fork server, zygote,
        # candidate, tester) where only one of them runs at a time. On one CPU each
        # hand-off is a plain context switch; spread over CPUs each one waits for an
        # idle CPU to wake up (about 1 ms on a VM), which dominated the run time.
        allowed = sorted(os.sched_getaffinity(0))
        self.cpus = [allowed[index % len(allowed)]] if pool.pin_cpus else None

    # -- lifecycle

    def start(self) -> None:
        import subprocess

        self._make_cgroups()
        inner = _bwrap_command(self.pool.bwrap) if self.pool.isolation == "bwrap" else [_interpreter(), "-I", "-c", _BOOTSTRAP]
        procs = [os.path.join(path, "cgroup.procs") for path in self.cgroups.values()]
        # The shell joins the cgroups, then becomes the sandbox, so every process
        # the sandbox ever starts is counted from its first instruction.
        script = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 97; shift; done; shift; exec "$@"'
        self.proc = subprocess.Popen(
            ["/bin/sh", "-c", script, "sh", *procs, "--", *inner],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={"PATH": "/usr/bin:/bin"}, cwd="/", start_new_session=True, close_fds=True,
        )
        if self.pool.isolation == "process":
            import tempfile

            self.workdir = tempfile.mkdtemp(prefix="rlvr-sandbox-")
            os.chmod(self.workdir, 0o711)  # programs (another uid under root) may enter their own subdirectory
            if os.geteuid() == 0 and self.uid is None:
                self.uid = _private_uid()  # kept across restarts
        config = {"namespaces": self.pool.isolation == "bwrap", "workdir": self.workdir, "uid": self.uid,
                  "cgroup_procs": os.path.join(self.cgroups["pids"], "cgroup.procs") if "pids" in self.cgroups else None,
                  "user_processes": _count_user_processes(self.uid if self.uid is not None else os.getuid()),
                  "cpus": self.cpus}
        try:
            for source in _shipped_sources():
                _write_all(self.proc.stdin.fileno(), _FRAME.pack(len(source)) + source)
            _send(self.proc.stdin.fileno(), config)
            hello = _recv(self.proc.stdout.fileno(), time.monotonic() + 60.0)
        except (_Timeout, _Closed, OSError) as e:
            hello = {"error": f"{type(e).__name__} {e}"}
        if "ready" not in hello:
            self.kill()
            err = self.proc.stderr.read() or b""
            self.proc = None
            self._remove_cgroups()
            self._remove_workdir()
            detail = _short(err.decode("utf-8", "replace") + " " + str(hello.get("error", "")), 600)
            raise RlvrError(_unavailable_message(self.pool.isolation, f"the sandbox did not start: {detail}"))
        self.proc.stderr.close()

    def _make_cgroups(self) -> None:
        self.cgroups = {}
        for name, base in self.pool.cgroup_controllers.items():
            path = os.path.join(base, _CGROUP_PARENT, self.name)
            try:
                os.makedirs(path, exist_ok=True)
                if name == "pids":
                    _write(os.path.join(path, "pids.max"), str(self.pool.max_procs + 16))
                self.cgroups[name] = path
            except OSError:
                continue
        self.memory_limit = 0
        self.set_memory(self.pool.memory_mb)

    def set_memory(self, memory_mb: int) -> None:
        """Memory ceiling for the worker: the program's own limit plus room for the
        fork server and the tester."""
        path = self.cgroups.get("memory")
        limit = (max(memory_mb, self.pool.memory_mb) + 512) << 20
        if path is None or limit == self.memory_limit:
            return
        # memsw (memory + swap, where swap is accounted) must never be set below the
        # plain limit, so which goes first depends on the current values: try both.
        files = [os.path.join(path, name) for name in ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes")
                 if os.path.exists(os.path.join(path, name))]
        for order in (files, files[::-1]):
            try:
                for name in order:
                    _write(name, str(limit))
            except OSError:
                continue
            self.memory_limit = limit
            return
        # e.g. lowering below what is in use right now: keep the higher ceiling

    def kill(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self._kill_cgroup_members()
        if self.proc is not None:
            try:
                self.proc.wait(timeout=10)
            except Exception:
                pass
            for stream in (self.proc.stdin, self.proc.stdout):
                try:
                    stream.close()
                except Exception:
                    pass

    def _kill_cgroup_members(self) -> None:
        path = self.cgroups.get("pids") or self.cgroups.get("memory")
        if path is None:
            return
        for _ in range(200):
            try:
                with open(os.path.join(path, "cgroup.procs")) as f:
                    pids = [int(p) for p in f.read().split()]
            except OSError:
                return
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.005)

    def stop(self) -> None:
        """Orderly end: EOF makes the fork server exit; then make sure of it."""
        if self.proc is not None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=2)
            except Exception:
                pass
        self.kill()
        self.proc = None
        self._remove_cgroups()
        self._remove_workdir()

    def _remove_workdir(self) -> None:
        if self.workdir is not None:
            import shutil

            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def _remove_cgroups(self) -> None:
        for path in self.cgroups.values():
            for _ in range(50):
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    self._kill_cgroup_members()
                    time.sleep(0.01)
        self.cgroups = {}

    # -- running a job

    def run(self, job: Job) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            if self.proc is not None:
                self.stop()
            self.start()
        self.set_memory(job.memory_mb)
        wire = job.to_wire()
        # The run's wall time is measured here, not reported from inside: a worker
        # that dies or hangs mid-run reports nothing, and its run must still be
        # charged (an episode's time budget counts these seconds).
        start = time.monotonic()
        try:
            _send(self.proc.stdin.fileno(), wire)
            reply = _recv(self.proc.stdout.fileno(), start + job.budget())
        except (_Timeout, _Closed, OSError, ValueError) as e:
            elapsed = time.monotonic() - start
            # The candidate may have taken the whole worker down (e.g. the memory
            # cgroup's OOM killer chose the fork server): a failure, never a pass.
            self.stop()
            return {"status": "crashed", "passed": 0, "total": 0, "elapsed": round(elapsed, 4),
                    "message": f"the sandbox worker died during the run ({type(e).__name__})"}
        reply["elapsed"] = round(time.monotonic() - start, 4)
        if reply.get("status") == "sandbox_error":
            self.stop()
        return reply


def _count_user_processes(uid: int) -> int:
    """Processes (threads included) of ``uid``: the base RLIMIT_NPROC counts from."""
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry}/task"))
            except OSError:
                pass
    return count


# Process isolation as root: uids for workers' programs, one per worker, far above
# what user databases and container tools hand out (< 0x70000000) and below the
# sign bit. Where a program runs as a uid no other process has, kill(-1) -- which
# signals every process of the caller's uid -- cannot reach another worker's program.
_PRIVATE_UIDS = range(0x70000000, 0x7FF00000)
_private_uid_counter = itertools.count()
_private_uid_lock = threading.Lock()


def _private_uid() -> int:
    """A uid (and gid) of its own for one worker's programs: unused in this process,
    named in no user database, and running no process now. The starting point
    depends on our pid, so that two host processes seldom try the same ones."""
    import pwd

    base = (os.getpid() * 4096) % len(_PRIVATE_UIDS)
    with _private_uid_lock:
        for _ in range(1000):
            uid = _PRIVATE_UIDS[(base + next(_private_uid_counter)) % len(_PRIVATE_UIDS)]
            try:
                pwd.getpwuid(uid)
                continue
            except KeyError:
                pass
            if _count_user_processes(uid) == 0:
                return uid
    raise RlvrError(_unavailable_message("process", "no unused uid found for its programs"))


@functools.cache
def _shipped_sources() -> tuple[bytes, ...]:
    """The sources the bootstrap reads, in its order: the limits, then the jail
    module (which imports them). Never this file: the host side stays outside."""
    sources = []
    for module in (sandbox_limits, sandbox_jail):
        with open(module.__file__, "rb") as f:
            sources.append(f.read())
    return tuple(sources)


def _unavailable_message(isolation: str, problem: str) -> str:
    if isolation == "bwrap":
        return (f"sandbox isolation 'bwrap' is unavailable: {problem}. Install bubblewrap "
                "(Debian/Ubuntu: `apt-get install bubblewrap`; Fedora: `dnf install bubblewrap`) on a kernel "
                "that allows unprivileged user namespaces, or choose the weaker level explicitly with "
                "isolation='process' (no filesystem or network isolation)")
    return f"sandbox isolation 'process' is unavailable: {problem}"


class Sandbox:
    """A pool of pre-started sandboxed fork servers. Thread-safe; ``run_many``
    runs jobs in parallel, one per worker at a time.

    ``workers`` defaults to the number of CPUs this process may use; with
    ``pin_cpus`` each worker keeps to one of them (see ``_Worker``). ``memory_mb``
    and ``max_procs`` size each worker's cgroup ceilings; every job still has
    its own ``memory_mb`` address-space limit."""

    def __init__(self, isolation: str = "bwrap", *, workers: int | None = None,
                 memory_mb: int = DEFAULT_MEMORY_MB, max_procs: int = DEFAULT_MAX_PROCS,
                 pin_cpus: bool = True) -> None:
        import shutil

        if isolation not in ISOLATION_LEVELS:
            raise RlvrError(f"unknown sandbox isolation {isolation!r}: choose one of {', '.join(ISOLATION_LEVELS)}")
        if not sys.platform.startswith("linux"):
            raise RlvrError(_unavailable_message(isolation, "it needs Linux"))
        self.isolation = isolation
        self.bwrap = ""
        if isolation == "process":
            _warn_weak_isolation(_process_isolation_warning(os.geteuid() == 0, "pids" in _cgroup_controllers()))
        if isolation == "bwrap":
            self.bwrap = shutil.which("bwrap") or ""
            if not self.bwrap:
                raise RlvrError(_unavailable_message(isolation, "the `bwrap` program was not found on PATH"))
        self.memory_mb = memory_mb
        self.max_procs = max_procs
        self.pin_cpus = pin_cpus
        self.cgroup_controllers = _cgroup_controllers()
        if self.cgroup_controllers:
            _remove_stale_cgroups(self.cgroup_controllers)
        if workers is None:
            workers = len(os.sched_getaffinity(0))
        self.workers = [_Worker(self, i) for i in range(max(1, workers))]
        import queue

        self._idle: Any = queue.SimpleQueue()
        for w in self.workers:
            self._idle.put(w)
        self._executor: Any = None
        self._lock = threading.Lock()
        self._closed = False
        _LIVE.add(self)
        _register_exit_hook()

    @property
    def limits(self) -> str:
        """How memory and process counts are capped: 'cgroup' or 'rlimit'."""
        return "cgroup" if {"pids", "memory"} <= set(self.cgroup_controllers) else "rlimit"

    def _pool(self) -> Any:
        with self._lock:
            if self._closed:
                raise RlvrError("the sandbox is closed")
            if self._executor is None:
                from concurrent.futures import ThreadPoolExecutor

                # Workers are started from these long-lived threads: bwrap's
                # --die-with-parent follows the thread that started it.
                self._executor = ThreadPoolExecutor(len(self.workers), thread_name_prefix="rlvr-sandbox")
            return self._executor

    def _run_one(self, job: Job) -> Result:
        worker = self._idle.get()
        try:
            reply = worker.run(job)
        finally:
            self._idle.put(worker)
        # The program's text (its output, its exception's message) goes on to a model
        # and to logs: escaped here, in the one place every result passes.
        return Result(status=reply["status"], passed=reply["passed"], total=reply["total"],
                      message=escape_controls(str(reply.get("message", ""))), elapsed=reply["elapsed"],
                      isolation=self.isolation, output=escape_controls(str(reply.get("output", ""))),
                      output_bytes=int(reply.get("output_bytes", 0)))

    def run_many(self, jobs: list[Job]) -> list[Result]:
        """Run ``jobs`` in parallel; results in the same order. Raises RlvrError
        only if the sandbox cannot start at all (it never runs code unsandboxed)."""
        if not jobs:
            return []
        pool = self._pool()
        return [f.result() for f in [pool.submit(self._run_one, job) for job in jobs]]

    def run(self, job: Job) -> Result:
        return self.run_many([job])[0]

    def start(self) -> None:
        """Start every worker now instead of on first use."""
        pool = self._pool()

        def warm(_: int) -> None:
            worker = self._idle.get()
            try:
                if worker.proc is None:
                    worker.start()
            finally:
                self._idle.put(worker)

        list(pool.map(warm, range(len(self.workers))))

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            executor = self._executor
        if executor is not None:
            executor.shutdown(wait=True)
        for worker in self.workers:
            worker.stop()
        _LIVE.discard(self)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _process_isolation_warning(as_root: bool, pids_cgroup: bool) -> str:
    """What ``isolation='process'`` leaves open, for the warning logged when it is chosen."""
    if as_root:
        signals = ("kill(-1) reaches every process of its uid -- the programs of its worker only "
                   "(each worker runs its programs as a uid of its own)")
    else:
        signals = ("it runs as your own user, so kill(-1) reaches every process of yours, "
                   "this trainer included (only namespaces could narrow that)")
    orphans = ("processes it leaves behind are killed after each run (pids cgroup)" if pids_cgroup else
               "processes it detaches with setsid can outlive the run (no writable pids cgroup)")
    return ("sandbox isolation 'process' is chosen: model-written code runs without namespaces. It can read "
            "every file its uid can read (e.g. /etc/passwd), use the network (loopback services included), and "
            f"{signals}; {orphans}. Verdicts still cannot be faked. Use isolation 'bwrap' for untrusted code.")


@functools.cache
def _warn_weak_isolation(message: str) -> None:
    """Log ``message`` once per process (and per distinct message)."""
    log.warning("%s", message)


def _remove_stale_cgroups(controllers: dict[str, str]) -> None:
    """Remove cgroups left by earlier processes that died without cleaning up."""
    for base in controllers.values():
        parent = os.path.join(base, _CGROUP_PARENT)
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        for name in names:
            owner = name.split("-", 1)[0]
            if not owner.isdigit() or int(owner) == os.getpid() or os.path.exists(f"/proc/{owner}"):
                continue
            try:
                os.rmdir(os.path.join(parent, name))
            except OSError:
                pass


_LIVE: weakref.WeakSet = weakref.WeakSet()
_SHARED: dict[str, Sandbox] = {}
_SHARED_LOCK = threading.Lock()


def get_sandbox(isolation: str = "bwrap") -> Sandbox:
    """The process-wide pool for ``isolation``, created on first use (its workers
    start on first use too) and closed at interpreter exit."""
    with _SHARED_LOCK:
        box = _SHARED.get(isolation)
        if box is None or box._closed:
            box = Sandbox(isolation)
            _SHARED[isolation] = box
        return box


_EXIT_HOOKED = False


def _register_exit_hook() -> None:
    global _EXIT_HOOKED
    if not _EXIT_HOOKED:
        import atexit

        atexit.register(close_all)
        _EXIT_HOOKED = True


def close_all() -> None:
    """Stop every sandbox of this process (registered with atexit)."""
    for box in list(_LIVE):
        box.close()
    _SHARED.clear()
