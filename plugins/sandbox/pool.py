"""The sandbox as callers use it, on the host: ``Sandbox``, a thread-safe pool of
workers that runs jobs in parallel and escapes what comes back; the process-wide pools
(``get_sandbox``), closed at exit (``close_all``); and the warning that the weaker
isolation level logs."""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
import weakref
from typing import Annotated, Any, Literal

from rlvr import RlvrError
from rlvr.kit import Unsandboxed, on_close_shared

from .jobs import Job, Result, escape_controls
from .launch import unavailable_message
from .limits import DEFAULT_MAX_PROCS, DEFAULT_MEMORY_MB
from .worker import Worker, cgroup_controllers, remove_stale_cgroups

log = logging.getLogger("rlvr.sandbox")

ISOLATION_LEVELS = ("bwrap", "process")
# An option choosing the isolation level; "process" runs model-written code without namespaces,
# which a recipe may ask for only when its user allows it (rlvr.kit.Unsandboxed).
Isolation = Annotated[Literal["bwrap", "process"], Unsandboxed("process")]


class Sandbox:
    """A pool of pre-started sandboxed fork servers. Thread-safe; ``run_many``
    runs jobs in parallel, one per worker at a time.

    ``workers`` defaults to the number of CPUs this process may use; with
    ``pin_cpus`` each worker keeps to one of them (see ``Worker``). ``memory_mb``
    and ``max_procs`` size each worker's cgroup ceilings; every job still has
    its own ``memory_mb`` address-space limit."""

    def __init__(self, isolation: str = "bwrap", *, workers: int | None = None,
                 memory_mb: int = DEFAULT_MEMORY_MB, max_procs: int = DEFAULT_MAX_PROCS,
                 pin_cpus: bool = True) -> None:
        import shutil

        if isolation not in ISOLATION_LEVELS:
            raise RlvrError(f"unknown sandbox isolation {isolation!r}: choose one of {', '.join(ISOLATION_LEVELS)}")
        if not sys.platform.startswith("linux"):
            raise RlvrError(unavailable_message(isolation, "it needs Linux"))
        self.isolation = isolation
        self.bwrap = ""
        if isolation == "process":
            _warn_weak_isolation(_process_isolation_warning(os.geteuid() == 0, "pids" in cgroup_controllers()))
        if isolation == "bwrap":
            self.bwrap = shutil.which("bwrap") or ""
            if not self.bwrap:
                raise RlvrError(unavailable_message(isolation, "the `bwrap` program was not found on PATH"))
        self.memory_mb = memory_mb
        self.max_procs = max_procs
        self.pin_cpus = pin_cpus
        self.cgroup_controllers = cgroup_controllers()
        if self.cgroup_controllers:
            remove_stale_cgroups(self.cgroup_controllers)
        if workers is None:
            workers = len(os.sched_getaffinity(0))
        self.workers = [Worker(self, i) for i in range(max(1, workers))]
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


_LIVE: weakref.WeakSet = weakref.WeakSet()
_SHARED: dict[str, Sandbox] = {}
_SHARED_LOCK = threading.Lock()


def get_sandbox(isolation: str = "bwrap") -> Sandbox:
    """The process-wide pool for ``isolation``, created on first use (its workers
    start on first use too) and closed when a run of ``rlvr.api.train``/``rlvr.api.evaluate`` ends
    (``rlvr.kit.close_shared``) or at interpreter exit."""
    with _SHARED_LOCK:
        box = _SHARED.get(isolation)
        if box is None or box._closed:
            box = Sandbox(isolation)
            _SHARED[isolation] = box
            on_close_shared(close_shared_sandboxes)
        return box


def close_shared_sandboxes() -> None:
    """Stop the process-wide pools ``get_sandbox`` made (sandboxes made directly stay)."""
    with _SHARED_LOCK:
        boxes = list(_SHARED.values())
        _SHARED.clear()
    for box in boxes:
        box.close()


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
