"""The host's side of one worker (``Worker``): starting its jail -- in cgroups of its
own where cgroup v1 is writable -- handing it jobs and reading its results over the
jail's stdin/stdout, and killing and cleaning up after it; plus the cgroups and, as
root, the private uids that workers' programs run as."""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
from typing import TYPE_CHECKING, Any

from rlvr import RlvrError

from .jail.wire import Closed, Timeout, recv, send, short, write_all
from .launch import bootstrap_input, bwrap_command, launcher_command, python_command, unavailable_message

if TYPE_CHECKING:
    from .jobs import Job
    from .pool import Sandbox


_CGROUP_V1 = "/sys/fs/cgroup"
_CGROUP_PARENT = "rlvr-sandbox"


def cgroup_controllers() -> dict[str, str]:
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


class Worker:
    """Host handle on one sandboxed fork server."""

    def __init__(self, pool: Sandbox, index: int) -> None:
        self.pool = pool
        self.name = f"{os.getpid()}-{id(pool):x}-{index}"
        self.proc: Any = None
        self.cgroups: dict[str, str] = {}
        self.memory_limit = 0
        self.workdir: str | None = None  # process isolation: where program runs get their directories
        # As root: the host uid/gid its programs run as (bwrap: the whole jail; process: each program)
        self.uid: int | None = None
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
        namespaces = self.pool.isolation == "bwrap"
        if os.geteuid() == 0 and self.uid is None:
            self.uid = _private_uid()  # kept across restarts
        inner = bwrap_command(self.pool.bwrap) if namespaces else python_command()
        # As root, bwrap runs as the worker's uid: the jail's uid 65534 maps to it, never to
        # host root (which would own every /proc/sys knob). Process isolation keeps its fork
        # server and tester as they are and gives the uid to each program (candidate).
        self.proc = subprocess.Popen(
            launcher_command(inner, cgroup_procs=[os.path.join(path, "cgroup.procs") for path in self.cgroups.values()],
                             uid=self.uid if namespaces else None),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={"PATH": "/usr/bin:/bin"}, cwd="/", start_new_session=True, close_fds=True,
        )
        if not namespaces:
            import tempfile

            self.workdir = tempfile.mkdtemp(prefix="rlvr-sandbox-")
            os.chmod(self.workdir, 0o711)  # programs (another uid under root) may enter their own subdirectory
        config = {"namespaces": namespaces, "workdir": self.workdir, "uid": None if namespaces else self.uid,
                  "cgroup_procs": os.path.join(self.cgroups["pids"], "cgroup.procs") if "pids" in self.cgroups else None,
                  "user_processes": _count_user_processes(self.uid if self.uid is not None else os.getuid()),
                  "cpus": self.cpus}
        try:
            write_all(self.proc.stdin.fileno(), bootstrap_input())
            send(self.proc.stdin.fileno(), config)
            hello = recv(self.proc.stdout.fileno(), time.monotonic() + 60.0)
        except (Timeout, Closed, OSError) as e:
            hello = {"error": f"{type(e).__name__} {e}"}
        if "ready" not in hello:
            self.kill()
            err = self.proc.stderr.read() or b""
            self.proc = None
            self._remove_cgroups()
            self._remove_workdir()
            detail = short(err.decode("utf-8", "replace") + " " + str(hello.get("error", "")), 600)
            raise RlvrError(unavailable_message(self.pool.isolation, f"the sandbox did not start: {detail}"))
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
            if self.uid is not None:  # process isolation as root: what its programs left in shared folders
                remove_leftovers(self.uid)

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
            send(self.proc.stdin.fileno(), wire)
            reply = recv(self.proc.stdout.fileno(), start + job.budget())
        except (Timeout, Closed, OSError, ValueError) as e:
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


SHARED_TEMPORARY = ("/tmp", "/var/tmp", "/dev/shm")


def remove_leftovers(uid: int, folders: tuple[str, ...] = SHARED_TEMPORARY) -> int:
    """Remove what ``uid`` (a worker's private uid: only its programs ever had it) owns at the top
    of the host's shared temporary folders (``isolation="process"`` gives programs no folders of
    their own); links are removed, never followed. The number of entries removed."""
    import shutil
    import stat

    removed = 0
    for folder in folders:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            path = os.path.join(folder, name)
            try:
                info = os.lstat(path)
                if info.st_uid != uid:
                    continue
                if stat.S_ISDIR(info.st_mode):
                    shutil.rmtree(path)  # does not follow links inside
                else:
                    os.unlink(path)
                removed += 1
            except OSError:
                pass
    return removed


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


# As root: uids for workers' programs, one per worker, far above
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
    raise RlvrError(unavailable_message("process", "no unused uid found for its programs"))


def remove_stale_cgroups(controllers: dict[str, str]) -> None:
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
