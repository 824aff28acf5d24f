"""A process pool with a hard deadline per item, for rewards that may hang.

Reward checkers (math-verify/sympy, code runners) can get stuck inside C code
where no signal handler runs, or use ``signal.alarm`` which only works in a
process's main thread. :class:`DeadlinePool` runs each item in the main thread
of a pre-started worker process; an item that overruns its limit has its
worker killed with SIGKILL from outside and replaced, and gets a ``timeout``
result. Other items are not blocked: they are dispatched to the free workers.

Usage::

    pool = DeadlinePool(processes=4, initializer=warm_up)
    results = pool.map(check_one, items, timeout=5.0)   # list[Result], in order
    for r in results:
        r.status  # "ok" | "error" | "timeout"
        r.value   # fn(item) when ok
        r.error   # message when error/timeout

``fn`` is a picklable callable (a module-level function) or a ``"module:attr"``
string resolved in the worker. ``map`` is thread-safe; items of concurrent calls
share the workers first-come first-served.

Design: one dispatcher thread (started lazily, with the workers, on first use)
owns the worker processes. Callers hand it tasks through a locked queue and a
wake-up pipe and wait on futures. It waits on the workers' pipes with the
nearest deadline as timeout, so a deadline is enforced within milliseconds.
Workers are started by the dispatcher thread only, so their lifetime is tied to
it (``PR_SET_PDEATHSIG`` is per parent *thread* on Linux).

The 'spawn' context is the default. 'fork' is unsafe in a process that holds
torch/OpenMP threads; 'forkserver' was measured (Python 3.11) to cost the same
as 'spawn' per worker. Either way a worker never imports the host's ``__main__``
(``multiprocessing`` would: a script, a notebook cell or ``python -c`` that starts
a run at its top level would run again in each worker, which then died). What
``__main__`` defines (a script's function, a notebook's class) travels by value
instead: work is pickled with cloudpickle. A worker (re)start costs its imports
plus the initializer (about 0.7 s with math-verify).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import signal
import sys
import threading
import time
import traceback
import weakref
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Literal

__all__ = ["DeadlinePool", "Result", "PoolBroken"]

Status = Literal["ok", "error", "timeout"]


@dataclass(frozen=True, slots=True)
class Result:
    """The outcome of one item: ``value`` when ``status == "ok"``, else ``error``."""

    status: Status
    value: Any = None
    error: str | None = None
    seconds: float = 0.0  # wall time from dispatch to result, seen by the parent

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class PoolBroken(RuntimeError):
    """The workers cannot start (initializer failed or timed out) or the pool is shut down."""


# --------------------------------------------------------------------------- worker side


def _set_parent_death_signal() -> None:
    """Ask Linux to SIGKILL this worker when its parent goes away (best effort)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except Exception:  # noqa: BLE001 - optional hardening only
        pass


def _resolve(fn_ref: Any, cache: dict[str, Callable[..., Any]]) -> Callable[..., Any]:
    if not isinstance(fn_ref, str):
        return fn_ref
    fn = cache.get(fn_ref)
    if fn is None:
        import importlib

        module_name, sep, attr = fn_ref.partition(":")
        if not sep or not attr:
            raise ValueError(f"function name must look like 'package.module:function', got {fn_ref!r}")
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
        fn = cache[fn_ref] = obj
    return fn


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 2000 else text[:2000] + "..."


def _limit_memory_growth(megabytes: int) -> None:
    """RLIMIT_AS = the address space this process has now + ``megabytes``.

    Relative, because what the worker imported before (its initializer's libraries: torch for
    some) can take gigabytes of mappings that an absolute limit would not fit.
    """
    import resource

    current = 0
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    current = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    limit = current + megabytes * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _worker_main(conn, initializer, initargs, memory_limit_mb, parent_sys_path) -> None:
    """Loop of one worker process: receive (fn, item), run it, send the outcome back."""
    # Ctrl-C reaches the whole process group; the parent decides what happens to us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _set_parent_death_signal()
    # A forkserver child inherits the server's sys.path, captured when the server
    # started; add what the parent has since put on it (e.g. a test's rootdir).
    for entry in parent_sys_path:
        if entry not in sys.path:
            sys.path.append(entry)
    try:
        if initializer is not None:
            _resolve(initializer, {})(*initargs)
        if memory_limit_mb:
            _limit_memory_growth(int(memory_limit_mb))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        conn.send(("init_error", _describe(exc) + "\n" + traceback.format_exc(limit=-5)))
        return
    conn.send(("ready", os.getpid()))
    cache: dict[str, Callable[..., Any]] = {}
    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):
            return  # parent went away
        try:
            message = pickle.loads(data)
            if message is None:
                return  # orderly shutdown
            fn_ref, item = message
            reply: tuple[str, Any] = ("ok", _resolve(fn_ref, cache)(item))
        except BaseException as exc:  # noqa: BLE001 - every failure becomes an error result
            reply = ("error", _describe(exc))
        del data
        try:
            conn.send(reply)
        except (EOFError, OSError, BrokenPipeError):
            return
        except Exception as exc:  # noqa: BLE001 - the value could not be pickled
            conn.send(("error", f"result could not be sent back: {_describe(exc)}"))


# --------------------------------------------------------------------------- parent side


class _Task:
    __slots__ = ("payload", "timeout", "future", "sent_at")

    def __init__(self, payload: bytes, timeout: float | None, future: Future):
        self.payload = payload
        self.timeout = timeout
        self.future = future
        self.sent_at = 0.0


class _Worker:
    __slots__ = ("proc", "conn", "ready", "task", "deadline", "start_deadline", "exitcode", "reaped")

    def __init__(self, proc, conn, start_deadline: float):
        self.proc = proc
        self.conn = conn
        self.ready = False
        self.reaped = False  # killed, joined and closed: its process object must not be touched again
        self.exitcode: int | None = None
        self.task: _Task | None = None
        self.deadline: float | None = None  # for the running task
        self.start_deadline = start_deadline  # for the "ready" message


_PREPARE_LOCK = threading.Lock()


@contextlib.contextmanager
def _main_left_out():
    """While a worker starts: the data ``multiprocessing`` hands a new process (spawn and
    forkserver alike, ``multiprocessing.spawn.get_preparation_data``) names no ``__main__`` to
    import. A worker runs functions of importable modules only, so it needs none."""
    from multiprocessing import spawn

    with _PREPARE_LOCK:
        prepare = spawn.get_preparation_data

        def without_main(name):
            data = prepare(name)
            data.pop("init_main_from_path", None)
            data.pop("init_main_from_name", None)
            return data

        spawn.get_preparation_data = without_main
        try:
            yield
        finally:
            spawn.get_preparation_data = prepare


def default_processes() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _shutdown_at_exit(ref: "weakref.ref[DeadlinePool]") -> None:
    pool = ref()
    if pool is not None:
        pool.shutdown(wait=True)


class DeadlinePool:
    """N worker processes that run ``fn(item)`` with a hard wall-clock limit per item.

    Args:
        processes: number of workers (default: CPUs available to this process).
        context: multiprocessing start method, "spawn" (default) or "forkserver";
            "fork" works but is unsafe in a process that holds threads.
        initializer: callable or "module:attr" run once in each worker before it
            takes work (e.g. to import math libraries); its failure breaks the pool.
        initargs: arguments for ``initializer``.
        memory_limit_mb: if set, how much address space a worker may add once started
            (RLIMIT_AS): a huge computation gets a MemoryError (an error result) instead
            of pushing the machine into swap or the OOM killer.
        start_timeout: seconds a worker may take to start and run ``initializer``.

    Nothing happens at construction: processes start on first use and stop at
    :meth:`shutdown` or interpreter exit.
    """

    def __init__(
        self,
        processes: int | None = None,
        *,
        context: str = "spawn",
        initializer: Callable[..., Any] | str | None = None,
        initargs: tuple = (),
        memory_limit_mb: int | None = None,
        start_timeout: float = 120.0,
    ):
        if processes is not None and processes < 1:
            raise ValueError("processes must be >= 1")
        self.processes = processes or default_processes()
        self._context_name = context
        self._initializer = initializer
        self._initargs = tuple(initargs)
        self._memory_limit_mb = memory_limit_mb
        self._start_timeout = start_timeout

        self._lock = threading.Lock()
        self._pending: deque[_Task] = deque()
        self._thread: threading.Thread | None = None
        self._wake_r = self._wake_w = -1
        self._stopping = False
        self._broken: str | None = None
        self._counters = dict.fromkeys(("ok", "error", "timeout", "started", "killed"), 0)

    # ------------------------------------------------------------------ public API

    def map(
        self,
        fn: Callable[[Any], Any] | str,
        items: Iterable[Any],
        *,
        timeout: float | None = None,
    ) -> list[Result]:
        """Run ``fn(item)`` for every item; results come back in item order.

        ``timeout`` is the hard limit in seconds per item, counted from the
        moment the item is handed to a worker (not from the call), so items
        queued behind others are not penalised. ``None`` means no limit.
        Raises :class:`PoolBroken` when the workers cannot start.
        """
        futures = [self.submit(fn, item, timeout=timeout) for item in items]
        return [f.result() for f in futures]

    def submit(self, fn: Callable[[Any], Any] | str, item: Any, *, timeout: float | None = None) -> Future:
        """Queue one item; the returned future resolves to a :class:`Result`."""
        import cloudpickle

        if timeout is not None and timeout <= 0:
            raise ValueError("timeout must be positive or None")
        future: Future = Future()
        try:  # by value what __main__ defines (workers do not import it), else as pickle does
            payload = cloudpickle.dumps((fn, item), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001 - reported per item
            future.set_result(Result("error", error=f"item could not be sent to a worker: {_describe(exc)}"))
            return future
        task = _Task(payload, timeout, future)
        with self._lock:
            if self._broken is not None:
                raise PoolBroken(self._broken)
            if self._stopping:
                raise PoolBroken("the pool is shut down")
            self._start_locked()
            self._pending.append(task)
        self._wake()
        return future

    def start(self) -> "DeadlinePool":
        """Start the workers now instead of on first use (optional)."""
        with self._lock:
            if self._stopping:
                raise PoolBroken("the pool is shut down")
            self._start_locked()
        return self

    def shutdown(self, wait: bool = True) -> None:
        """Stop all workers; queued and running items get an error result. Final."""
        with self._lock:
            already = self._stopping
            self._stopping = True
            thread = self._thread
        if thread is None:
            return
        if not already:
            self._wake()
        if wait and thread is not threading.current_thread():
            thread.join()

    def stats(self) -> dict[str, int]:
        """Counts so far: ok/error/timeout results, workers started and killed."""
        with self._lock:
            return dict(self._counters)

    def __enter__(self) -> "DeadlinePool":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.shutdown()

    # ------------------------------------------------------------------ internals

    def _start_locked(self) -> None:
        if self._thread is not None:
            return
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        # multiprocessing.util registers its own exit handler (terminate and join daemon
        # children) when first imported. Import it before registering ours: atexit runs
        # handlers last-in first-out, so ours then runs first and the two never race.
        import multiprocessing.util  # noqa: F401

        atexit.register(_shutdown_at_exit, weakref.ref(self))
        self._thread = threading.Thread(target=self._dispatch_loop, name="rlvr-deadline-pool", daemon=True)
        self._thread.start()

    def _wake(self) -> None:
        # Under the lock, so that the fd cannot be closed (and its number reused
        # by an unrelated file) between the check and the write.
        with self._lock:
            if self._wake_w < 0:
                return
            try:
                os.write(self._wake_w, b"x")
            except (BlockingIOError, OSError):
                pass  # the pipe is full: a wake-up is already pending

    def _count(self, key: str) -> None:
        with self._lock:
            self._counters[key] += 1

    def _finish(self, task: _Task, result: Result) -> None:
        self._count(result.status)
        if not task.future.done():
            task.future.set_result(result)

    # The methods below run on the dispatcher thread only.

    def _spawn(self, ctx) -> _Worker:
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        proc = ctx.Process(
            target=_worker_main,
            args=(child_conn, self._initializer, self._initargs, self._memory_limit_mb, list(sys.path)),
            name="rlvr-worker",
            daemon=True,
        )
        with _main_left_out():
            proc.start()
        child_conn.close()  # so that the worker's death shows up as EOF on parent_conn
        self._count("started")
        return _Worker(proc, parent_conn, time.monotonic() + self._start_timeout)

    @staticmethod
    def _reap(worker: _Worker, kill: bool) -> int | None:
        """Kill (when asked), join and close a worker; a second call returns the first's exit code
        (a worker that died during start-up is reaped once on its EOF and again on shutdown)."""
        if worker.reaped:
            return worker.exitcode
        if kill and worker.proc.is_alive():
            worker.proc.kill()
        worker.proc.join(timeout=5.0)
        code = worker.exitcode = worker.proc.exitcode
        worker.conn.close()
        if code is not None:
            worker.proc.close()
            worker.reaped = True
        return code

    def _dispatch_loop(self) -> None:
        import multiprocessing
        from multiprocessing.connection import wait

        ctx = multiprocessing.get_context(self._context_name)
        workers: list[_Worker] = []
        try:
            workers = [self._spawn(ctx) for _ in range(self.processes)]
            while True:
                with self._lock:
                    stopping, broken = self._stopping, self._broken
                if stopping or broken is not None:
                    break
                self._assign(workers)
                now = time.monotonic()
                deadlines = [w.deadline for w in workers if w.deadline is not None]
                deadlines += [w.start_deadline for w in workers if not w.ready]
                wait_for = max(0.0, min(deadlines) - now) if deadlines else None
                ready = wait([self._wake_r] + [w.conn for w in workers], wait_for)
                if self._wake_r in ready:
                    os.read(self._wake_r, 65536)
                by_conn = {w.conn: w for w in workers}
                for obj in ready:
                    worker = by_conn.get(obj)
                    if worker is not None:
                        self._on_message(worker, workers, ctx)
                self._enforce_deadlines(workers, ctx)
        except BaseException as exc:  # noqa: BLE001 - never leave callers waiting forever
            with self._lock:
                self._broken = self._broken or f"dispatcher failed: {_describe(exc)}"
        finally:
            self._close(workers)

    def _assign(self, workers: list[_Worker]) -> None:
        for worker in workers:
            if not worker.ready or worker.task is not None:
                continue
            with self._lock:
                if not self._pending:
                    return
                task = self._pending.popleft()
            if task.future.cancelled():
                continue
            task.sent_at = time.monotonic()
            worker.task = task
            worker.deadline = task.sent_at + task.timeout if task.timeout is not None else None
            try:
                worker.conn.send_bytes(task.payload)
            except (OSError, EOFError):
                pass  # the worker died; its EOF is handled by _on_message

    def _on_message(self, worker: _Worker, workers: list[_Worker], ctx) -> None:
        try:
            kind, value = worker.conn.recv()
        except (EOFError, OSError):
            code = self._reap(worker, kill=True)
            task = worker.task
            if not worker.ready:
                with self._lock:
                    self._broken = f"a worker exited during start-up (exit code {code}): its error is on stderr above"
                return
            if task is not None:
                self._finish(
                    task,
                    Result("error", error=f"worker process died (exit code {code})", seconds=time.monotonic() - task.sent_at),
                )
            self._replace(worker, workers, ctx)
            return
        if kind == "ready":
            worker.ready = True
        elif kind == "init_error":
            with self._lock:
                self._broken = f"worker initializer failed: {value}"
        else:
            task, worker.task, worker.deadline = worker.task, None, None
            if task is not None:
                seconds = time.monotonic() - task.sent_at
                if kind == "ok":
                    self._finish(task, Result("ok", value=value, seconds=seconds))
                else:
                    self._finish(task, Result("error", error=value, seconds=seconds))

    def _enforce_deadlines(self, workers: list[_Worker], ctx) -> None:
        now = time.monotonic()
        for worker in list(workers):
            if not worker.ready and now >= worker.start_deadline:
                with self._lock:
                    self._broken = f"a worker did not start within {self._start_timeout:g} s"
                return
            if worker.deadline is not None and now >= worker.deadline:
                task = worker.task
                self._reap(worker, kill=True)
                self._count("killed")
                if task is not None:
                    self._finish(
                        task,
                        Result("timeout", error=f"exceeded the time limit of {task.timeout:g} s", seconds=now - task.sent_at),
                    )
                self._replace(worker, workers, ctx)

    def _replace(self, worker: _Worker, workers: list[_Worker], ctx) -> None:
        index = workers.index(worker)
        with self._lock:
            stopping = self._stopping
        if stopping:
            workers.pop(index)
        else:
            workers[index] = self._spawn(ctx)

    def _close(self, workers: list[_Worker]) -> None:
        with self._lock:
            reason = self._broken
            leftovers = list(self._pending)
            self._pending.clear()
        message = reason or "the pool was shut down"
        for worker in workers:
            if worker.task is not None:
                self._finish(worker.task, Result("error", error=message))
            if worker.ready and worker.task is None:
                try:
                    worker.conn.send_bytes(pickle.dumps(None))
                except (OSError, EOFError):
                    pass
        deadline = time.monotonic() + 2.0
        for worker in workers:
            # Idle workers exit on their own; busy or stuck ones are killed.
            try:
                if worker.task is None and worker.ready and not worker.reaped:
                    worker.proc.join(timeout=max(0.0, deadline - time.monotonic()))
                self._reap(worker, kill=True)
            except Exception:  # noqa: BLE001 - the callers below must hear back whatever happens here
                pass
        for task in leftovers:
            if reason is not None:
                task.future.set_exception(PoolBroken(reason))
            else:
                self._finish(task, Result("error", error=message))
        with self._lock:
            fds = (self._wake_r, self._wake_w)
            self._wake_r = self._wake_w = -1
        for fd in fds:
            os.close(fd)
