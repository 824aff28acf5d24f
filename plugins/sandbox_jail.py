"""What runs inside the code sandbox's jail: the fork server, the zygote, the
candidate's main, the tester and its proxies, with their rlimits and capability
dropping; and the wire format (framing, value encoding) that the host shares.

This file's source is shipped into the jail, next to ``sandbox_limits``'s, and
executed there by a bare ``python -I`` (see ``_BOOTSTRAP`` in ``sandbox``), where
neither ``rlvr`` nor the project's environment exists. So it must stay standard
library only: never import ``rlvr``, ``rlvr_plugins`` or the host module
``sandbox``. Its one other import, ``.sandbox_limits``, is relative: on the host
it is the package's module, in the jail the bootstrap provides it under that name.
The host imports this module for the framing helpers only; nothing here runs on
import. What the sandbox protects against is described in ``sandbox``.
"""

from __future__ import annotations

import ast
import builtins
import json
import os
import select
import signal
import socket
import struct
import sys
import threading
import time
from typing import Any, NoReturn

from .sandbox_limits import (
    DEFAULT_MAX_PROCS,
    GRACE,
    MAX_FILE_BYTES,
    MAX_MESSAGE,
    MESSAGE_LIMIT_TEXT,
    TESTER_JOBS,
    TESTER_MEMORY_MB,
)

# ---------------------------------------------------------------------------
# Wire format, shared with the host: length-prefixed JSON frames.
# ---------------------------------------------------------------------------

_FRAME = struct.Struct(">I")


class _Timeout(Exception):
    pass


class _Closed(Exception):
    pass


def _wait_readable(fd: int, deadline: float | None) -> None:
    if deadline is None:
        return
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise _Timeout
        try:
            if poller.poll(left * 1000):
                return
        except InterruptedError:
            continue


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        _wait_readable(fd, deadline)
        try:
            chunk = os.read(fd, min(n - len(buf), 1 << 20))
        except InterruptedError:
            continue
        except OSError as e:
            raise _Closed(str(e)) from None
        if not chunk:
            raise _Closed("end of stream")
        buf += chunk
    return bytes(buf)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except InterruptedError:
            continue
        view = view[n:]


def _send(fd: int, obj: Any) -> None:
    data = json.dumps(obj, separators=(",", ":")).encode()
    _write_all(fd, _FRAME.pack(len(data)) + data)


def _recv(fd: int, deadline: float | None = None, limit: int = MAX_MESSAGE) -> Any:
    (n,) = _FRAME.unpack(_read_exact(fd, _FRAME.size, deadline))
    if n > limit:
        raise _Closed(f"message of {n} bytes is over the {limit}-byte limit")
    return json.loads(_read_exact(fd, n, deadline))


def _short(text: str, limit: int = MESSAGE_LIMIT_TEXT) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# Values crossing between tester and candidate: JSON with one-key objects as tags.
# Encoding happens on both sides; only ever *decoding* matters for trust, and the
# decoder builds nothing but builtin values.


def _encode(value: Any, ref_of: Any = None, depth: int = 0) -> Any:
    """Plain data to JSON-able form. Subclasses of builtins become their base type
    (a namedtuple a tuple, a Counter a dict): their own ``__eq__`` is dropped."""
    if depth > 200:
        raise ValueError("value nested too deeply")
    d = depth + 1
    if value is None or value is True or value is False:
        return value
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int.__index__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, list):
        return [_encode(v, ref_of, d) for v in list.__iter__(value)]
    if isinstance(value, tuple):
        return {"t": [_encode(v, ref_of, d) for v in tuple.__iter__(value)]}
    if isinstance(value, dict):
        return {"d": [[_encode(k, ref_of, d), _encode(v, ref_of, d)] for k, v in dict.items(value)]}
    if isinstance(value, frozenset):
        return {"f": [_encode(v, ref_of, d) for v in frozenset.__iter__(value)]}
    if isinstance(value, set):
        return {"s": [_encode(v, ref_of, d) for v in set.__iter__(value)]}
    if isinstance(value, (bytes, bytearray)):
        return {"b": bytes(value).hex()}
    if isinstance(value, complex):
        return {"c": [value.real, value.imag]}
    if ref_of is not None:
        name = ref_of(value)
        if name is not None:
            return {"r": name}
    raise TypeError(f"a {type(value).__name__} cannot cross the sandbox boundary (only plain data can)")


def _decode(value: Any, resolve_ref: Any = None) -> Any:
    """Strict inverse of ``_encode``: anything unexpected raises ValueError."""
    kind = type(value)
    if value is None or kind in (bool, int, float, str):
        return value
    if kind is list:
        return [_decode(v, resolve_ref) for v in value]
    if kind is dict and len(value) == 1:
        ((tag, inner),) = value.items()
        if tag == "b" and type(inner) is str:
            return bytes.fromhex(inner)
        if tag == "r" and type(inner) is str and resolve_ref is not None:
            return resolve_ref(inner)
        if tag == "c" and type(inner) is list and len(inner) == 2:
            re_, im = inner
            if type(re_) in (int, float) and type(im) in (int, float):
                return complex(re_, im)
        if type(inner) is list:
            if tag == "t":
                return tuple(_decode(v, resolve_ref) for v in inner)
            if tag == "s":
                return {_decode(v, resolve_ref) for v in inner}
            if tag == "f":
                return frozenset(_decode(v, resolve_ref) for v in inner)
            if tag == "d":
                out = {}
                for pair in inner:
                    if type(pair) is not list or len(pair) != 2:
                        raise ValueError("malformed dict entry")
                    out[_decode(pair[0], resolve_ref)] = _decode(pair[1], resolve_ref)
                return out
    raise ValueError("malformed value")


# ---------------------------------------------------------------------------
# Linux primitives through ctypes (imported lazily: the host imports this module
# for its framing only).
# ---------------------------------------------------------------------------

_CLONE_NEWIPC = 0x08000000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWPID = 0x20000000
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_CAPBSET_DROP = 1, 4, 24
_PR_SET_NO_NEW_PRIVS, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 38, 47, 4

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


def _prctl(option: int, arg: int = 0) -> int:
    return _libc().prctl(option, arg, 0, 0, 0)


def _last_capability() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 63


def _drop_all_capabilities(last_cap: int) -> None:
    import ctypes

    prctl = _libc().prctl
    for cap in range(last_cap + 1):
        prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
    prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)

    # struct __user_cap_header_struct {u32 version; int pid} (version 3), then two
    # all-zero struct __user_cap_data_struct {u32 effective, permitted, inheritable}.
    header = ctypes.create_string_buffer(struct.pack("=Ii", 0x20080522, 0), 8)
    data = ctypes.create_string_buffer(24)
    _check(_libc().capset(header, data), "capset")
    _check(_prctl(_PR_SET_NO_NEW_PRIVS, 1), "no_new_privs")


_raw_fork_fn = None


def _raw_fork() -> int:
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


# ---------------------------------------------------------------------------
# Inside the sandbox. One worker is:
#   F  fork server: one job at a time from the host (fds 0/1), one result back;
#   Z  zygote, forked from F before any job; with namespaces it runs as pid 1 of
#      a user and pid namespace of its own and forks the candidates;
#   C  candidate, one per program run: forked by Z ahead of time as a "spare",
#      pid 1 of a fresh pid namespace, then handed a program;
#   T  tester, forked from F, persistent: runs each job's tests against C.
# ---------------------------------------------------------------------------

# Modules most programs and tests import, loaded once in the fork server so that
# candidates and the tester get them for free after fork.
_PRELOAD = (
    "typing", "re", "collections", "itertools", "functools", "math", "heapq", "bisect",
    "string", "random", "copy", "fractions", "decimal", "statistics", "datetime",
    "operator", "dataclasses", "enum", "traceback", "linecache", "types",
    "threading", "atexit", "io", "importlib", "array", "resource", "ctypes", "tempfile", "shutil",
)


def _move_fds(keep: list[int]) -> list[int]:
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


def _null_stdio() -> None:
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if null > 2:
        os.close(null)


def _set_rlimits(cpu_seconds: float | None, memory_mb: int, nofile: int, nproc: int | None) -> None:
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


def _server_main() -> None:
    """Fork server F: one job at a time from the host, one result back."""
    config = _recv(0)
    if config.get("cpus"):
        os.sched_setaffinity(0, config["cpus"])
    _prctl(_PR_SET_DUMPABLE, 0)  # nothing in the sandbox may ptrace or read our memory
    if not config["namespaces"]:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # bwrap does this for us otherwise
    for name in _PRELOAD:
        __import__(name)
    import gc

    gc.collect()
    gc.freeze()  # fewer copy-on-write faults in the children
    config["last_cap"] = _last_capability()
    server = _Server(config)
    # Self-test: both modes end to end, so a kernel that refuses some step fails here.
    for probe in (
        {"mode": "io", "program": "print(6 * 7)", "cases": [["", "42"]]},
        {"mode": "call", "program": "def f(x):\n    return x * 7\n", "tests": ["assert f(6) == 42"]},
    ):
        probe.update(timeout=10.0, memory_mb=256, max_output=4096, partial=False)
        result = server.run_job(probe)
        if result["status"] != "passed":
            _send(1, {"error": f"self-test failed: {result['status']}: {result['message']}"})
            return
    _send(1, {"ready": True})
    os.dup2(os.open("/dev/null", os.O_WRONLY), 2)  # the host stops reading our stderr now
    while True:
        try:
            job = _recv(0)
        except _Closed:
            return
        try:
            result = server.run_job(job)
        except Exception as e:  # a bug or exhausted resources: report, then let the host restart us
            import traceback

            _send(1, {"status": "sandbox_error", "passed": 0, "total": 0,
                      "message": _short("".join(traceback.format_exception_only(e)))})
            return
        _send(1, result)


class _Server:
    def __init__(self, config: dict) -> None:
        self.config = config
        self.zsock, zsock_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            self.zsock.close()
            try:
                _zygote_main(zsock_child, config)
            finally:
                os._exit(0)
        zsock_child.close()
        self.zfd = self.zsock.fileno()
        self.zygote = pid
        self.exits: dict[int, int | None] = {}  # launch token -> exit status, as Z reports them
        self.tester = 0
        self.tester_jobs = 0
        self.job_id = 0
        self._start_tester()

    # -- the tester

    def _start_tester(self) -> None:
        self.tsock, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            try:
                self.tsock.close()
                self.zsock.close()
                _tester_main(child)
            finally:
                os._exit(0)
        child.close()
        self.tester = pid
        self.tester_jobs = 0

    def _stop_tester(self) -> None:
        try:
            os.kill(self.tester, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self.tester, 0)
        self.tsock.close()

    @property
    def keep_pids(self) -> set[int]:
        return {os.getpid(), self.zygote, self.tester}

    # -- candidates, through the zygote

    def _zygote_message(self, deadline: float | None) -> tuple[dict, list[int]]:
        """Next message from Z; records exit reports on the way."""
        _wait_readable(self.zfd, deadline)
        msg, fds, _flags, _addr = socket.recv_fds(self.zsock, 1 << 16, 2)
        if not msg:
            raise RuntimeError("the zygote exited")
        message = json.loads(msg)
        if "exited" in message:
            self.exits[message["exited"]] = message["status"]
            for token in [t for t in self.exits if t < message["exited"] - 64]:
                del self.exits[token]
        return message, fds

    def _launch(self, job: dict, mode: str, fds: list[int]) -> tuple[int, int, int]:
        """Start a candidate holding ``fds``; returns (token, pidfd, pid)."""
        # Only what the candidate may see: never the tests or expected outputs. The
        # program text travels in a memfd (no message size limit; Z never reads it).
        spec = {"mode": mode, "timeout": job["timeout"], "memory_mb": job["memory_mb"],
                "max_procs": job.get("max_procs", DEFAULT_MAX_PROCS), "seed": job.get("seed")}
        text = job["program"]
        if mode == "exec":  # the earlier cells travel with the program (JSON keeps lone surrogates)
            text = json.dumps({"setup": list(job.get("setup") or []), "program": text})
        program = os.memfd_create("program", os.MFD_CLOEXEC)
        try:
            _write_all(program, text.encode("utf-8", "surrogatepass"))
            socket.send_fds(self.zsock, [json.dumps(spec).encode()], [program] + fds)
        finally:
            os.close(program)
        deadline = time.monotonic() + 10.0
        while True:
            message, got = self._zygote_message(deadline)
            if "launched" in message:
                return message["launched"], got[0], message["pid"]
            if "error" in message:
                raise RuntimeError(f"could not start the candidate: {message['error']}")

    def _kill(self, pidfd: int, pid: int) -> None:
        """Kill the candidate -- in a pid namespace that takes every process it made."""
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.close(pidfd)
        if not self.config["namespaces"]:
            self._sweep(pid)

    def _exit_status(self, token: int, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while token not in self.exits:
            try:
                self._zygote_message(deadline)
            except _Timeout:
                return None
        return self.exits[token]

    def _sweep(self, pid: int) -> None:
        """Process isolation: kill the program's group, then anything else in our
        pids cgroup but us, the tester, the zygote and its spare (the zygote's
        children: whatever a program leaves behind is reparented elsewhere)."""
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        procs = self.config.get("cgroup_procs")
        if not procs:
            return
        for _ in range(100):
            try:
                with open(procs) as f:
                    pids = {int(p) for p in f.read().split()}
            except OSError:
                return
            stray = {p for p in pids - self.keep_pids if p == pid or _parent_of(p) != self.zygote}
            if not stray:
                return
            for p in stray:
                try:
                    os.kill(p, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.001)

    # -- jobs

    def run_job(self, job: dict) -> dict:
        # No run time in the result: the host measures it, since a worker that dies
        # (or is stopped) mid-run could not report it.
        if job["mode"] == "io":
            return self._run_io(job)
        if job["mode"] == "exec":
            return self._run_exec(job)
        return self._run_call(job)

    def _run_call(self, job: dict) -> dict:
        deadline = time.monotonic() + job["timeout"]
        if self.tester_jobs >= TESTER_JOBS:
            self._stop_tester()  # bound whatever state the tests' code accumulates
            self._start_tester()
        self.tester_jobs += 1
        self.job_id += 1
        tester_end, cand_end = socket.socketpair()
        out_r, out_w = os.pipe()
        tests = {k: job.get(k) for k in ("tests", "trusted", "entry_point", "partial", "timeout")}
        tests.update(id=self.job_id, deadline=deadline)
        payload = os.memfd_create("tests", os.MFD_CLOEXEC)
        try:
            _write_all(payload, json.dumps(tests).encode())
            socket.send_fds(self.tsock, [b"job"], [payload, tester_end.fileno()])
            token, pidfd, pid = self._launch(job, "call", [cand_end.fileno(), out_w])
        except BaseException:
            os.close(out_r)
            raise
        finally:
            os.close(payload)
            tester_end.close()
            cand_end.close()
            os.close(out_w)
        output = _OutputSink(out_r, job["max_output"])
        report = None
        hard_deadline = deadline + GRACE
        poller = select.poll()
        for fd in (self.tsock.fileno(), out_r, 0):
            poller.register(fd, select.POLLIN)
        while report is None and not output.over and time.monotonic() < hard_deadline:
            for fd, _ in poller.poll(max(0.0, hard_deadline - time.monotonic()) * 1000):
                if fd == 0:  # the host went away
                    os._exit(0)
                if fd == out_r:
                    if not output.read():
                        poller.unregister(out_r)
                elif fd == self.tsock.fileno():
                    report = self._tester_reply()
                    if report == "gone":
                        break
        self._kill(pidfd, pid)
        os.close(out_r)
        if report is None or report == "gone" or output.over:
            # Without a verdict in time the tester is in an unknown state: replace it.
            self._stop_tester()
            self._start_tester()
        if output.over:
            report = {"status": "output_limit", "passed": 0, "total": 0,
                      "message": f"output over {job['max_output']} bytes"}
        elif report is None:
            report = {"status": "timeout", "passed": 0, "total": 0,
                      "message": f"no verdict within {job['timeout']} s"}
        elif report == "gone":
            report = {"status": "crashed", "passed": 0, "total": 0, "message": "the tester ended without a verdict"}
        if report["status"] == "crashed":
            status = self._exit_status(token, 1.0)
            report["message"] = _short(f"{report['message']} ({_describe_exit(status)})")
        return report

    def _tester_reply(self) -> Any:
        """The tester's verdict for the current job, None for a stale one, "gone" if it died."""
        try:
            data = self.tsock.recv(1 << 16)
        except OSError:
            return "gone"
        if not data:
            return "gone"
        try:
            reply = json.loads(data)
        except ValueError:
            return "gone"
        if type(reply) is not dict or reply.get("id") != self.job_id:
            return None
        return _check_report(reply)

    def _run_io(self, job: dict) -> dict:
        cases = job["cases"]
        passed = 0
        first: tuple[str, str] | None = None
        for index, (stdin_text, expected) in enumerate(cases):
            status, message = self._run_io_case(job, stdin_text, expected)
            if status == "passed":
                passed += 1
            elif first is None:
                first = (status, f"case {index}: {message}")
                if not job["partial"]:
                    break
        if first is None:
            return {"status": "passed", "passed": passed, "total": len(cases), "message": ""}
        return {"status": first[0], "passed": passed, "total": len(cases), "message": _short(first[1])}

    def _run_io_case(self, job: dict, stdin_text: str, expected: str) -> tuple[str, str]:
        deadline = time.monotonic() + job["timeout"]
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            token, pidfd, pid = self._launch(job, "io", [in_r, out_w, err_w])
        except BaseException:
            for fd in (in_w, out_r, err_r):
                os.close(fd)
            raise
        finally:
            for fd in (in_r, out_w, err_w):
                os.close(fd)
        os.set_blocking(in_w, False)
        pending = memoryview(stdin_text.encode())
        out = _OutputSink(out_r, job["max_output"], keep=job["max_output"])
        err = _OutputSink(err_r, job["max_output"], keep=4096, shared=out)
        poller = select.poll()
        for fd in (out_r, err_r, self.zfd, 0):
            poller.register(fd, select.POLLIN)
        if pending:
            poller.register(in_w, select.POLLOUT)
        else:
            os.close(in_w)
            in_w = -1
        open_streams = {out_r, err_r}
        end = deadline
        while (open_streams or token not in self.exits) and not out.over and time.monotonic() < end:
            for fd, _ in poller.poll(max(0.0, end - time.monotonic()) * 1000):
                if fd == 0:
                    os._exit(0)
                elif fd == in_w:
                    try:
                        pending = pending[os.write(in_w, pending[: 1 << 16]):]
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:
                        pending = pending[:0]
                    if not pending:
                        poller.unregister(in_w)
                        os.close(in_w)
                        in_w = -1
                elif fd == self.zfd:
                    self._zygote_message(None)
                    if token in self.exits:
                        end = min(end, time.monotonic() + 0.5)  # drain what is left, briefly
                else:
                    sink = out if fd == out_r else err
                    if not sink.read():
                        poller.unregister(fd)
                        open_streams.discard(fd)
        self._kill(pidfd, pid)
        for fd in (in_w, out_r, err_r):
            if fd >= 0:
                os.close(fd)
        if out.over:
            return "output_limit", f"output over {job['max_output']} bytes"
        if token not in self.exits:
            return "timeout", f"no exit within {job['timeout']} s"
        code = self.exits[token]
        if code != 0:
            tail = err.text()[-200:]
            return ("error" if code is not None and code > 0 else "crashed"), f"{_describe_exit(code)}: {tail}"
        got = _normalize_output(out.text())
        if got == _normalize_output(expected):
            return "passed", ""
        return "failed", f"expected {_short(expected, 80)!r}, got {_short(got, 80)!r}"

    def _run_exec(self, job: dict) -> dict:
        """exec mode: one run of the setup cells (quietly) and the program; what the program
        printed comes back, its first ``keep_output`` bytes, whatever its status. The candidate
        says on a pipe of its own how the program ended (its exception's last traceback line):
        nothing is graded here, so that report is only ever the program's own story."""
        deadline = time.monotonic() + job["timeout"]
        out_r, out_w = os.pipe()
        info_r, info_w = os.pipe()
        try:
            token, pidfd, pid = self._launch(job, "exec", [out_w, info_w])
        except BaseException:
            os.close(out_r)
            os.close(info_r)
            raise
        finally:
            os.close(out_w)
            os.close(info_w)
        out = _OutputSink(out_r, job["max_output"], keep=job["keep_output"])
        info = _OutputSink(info_r, _INFO_BYTES, keep=_INFO_BYTES)
        poller = select.poll()
        for fd in (out_r, info_r, self.zfd, 0):
            poller.register(fd, select.POLLIN)
        open_streams = {out_r, info_r}
        end = deadline
        while (open_streams or token not in self.exits) and not out.over and time.monotonic() < end:
            for fd, _ in poller.poll(max(0.0, end - time.monotonic()) * 1000):
                if fd == 0:
                    os._exit(0)
                elif fd == self.zfd:
                    self._zygote_message(None)
                    if token in self.exits:
                        end = min(end, time.monotonic() + 0.5)  # drain what is left, briefly
                else:
                    sink = out if fd == out_r else info
                    if not sink.read() or (sink is info and info.over):  # a flooded report pipe: stop listening
                        poller.unregister(fd)
                        open_streams.discard(fd)
        self._kill(pidfd, pid)
        os.close(out_r)
        os.close(info_r)
        status, message = _exec_status(out, info, token in self.exits, self.exits.get(token), job)
        return {"status": status, "passed": int(status == "ok"), "total": 1, "message": _short(message),
                "output": _prefix_text(bytes(out.data), out.count > len(out.data)), "output_bytes": out.count}


_INFO_BYTES = 8192  # the exec candidate's report of how its program ended


def _exec_status(out: _OutputSink, info: _OutputSink, exited: bool, code: int | None, job: dict) -> tuple[str, str]:
    """exec mode: (status, message) from the candidate's report and its exit."""
    if out.over:
        return "output_limit", f"output over {job['max_output']} bytes"
    if not exited:
        return "timeout", f"no exit within {job['timeout']} s"
    if code is None or code < 0:
        return "crashed", _describe_exit(code)
    report = None
    for line in info.text().splitlines():  # the last well-formed report counts
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if type(value) is dict and value.get("end") in ("ok", "error"):
            report = value
    if report is None:  # os._exit(), or the candidate died before it could say
        return "exited", f"the program ended the process itself ({_describe_exit(code)})"
    if report["end"] == "error":
        return "error", str(report.get("message") or "error")
    return "ok", ""


def _prefix_text(data: bytes, cut: bool) -> str:
    """Kept output as text; when it was cut, a character split at the cut is dropped."""
    if not cut:
        return data.decode("utf-8", "replace")
    import codecs

    return codecs.getincrementaldecoder("utf-8")("replace").decode(data, final=False)


class _OutputSink:
    """Reads a pipe, counting bytes against a cap shared between stdout and stderr."""

    def __init__(self, fd: int, cap: int, keep: int = 4096, shared: _OutputSink | None = None) -> None:
        self.fd, self.cap, self.keep = fd, cap, keep
        self.shared = shared
        self.count = 0
        self.data = bytearray()
        self._over = False

    @property
    def over(self) -> bool:
        return self._over or (self.shared is not None and self.shared.over)

    def total(self) -> int:
        return self.count + (self.shared.total() if self.shared is not None else 0)

    def read(self) -> bool:
        chunk = os.read(self.fd, 1 << 16)
        if not chunk:
            return False
        self.count += len(chunk)
        if len(self.data) < self.keep:
            self.data += chunk[: self.keep - len(self.data)]
        if self.total() > self.cap:
            self._over = True
            if self.shared is not None:
                self.shared._over = True
        return True

    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


def _parent_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _normalize_output(text: str) -> str:
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return "\n".join(line.rstrip() for line in lines).strip()


def _describe_exit(status: int | None) -> str:
    if status is None:
        return "exit status unknown"
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = str(-status)
        return f"killed by {name}"
    return f"exit code {status}"


def _check_report(report: dict) -> Any:
    if (report.get("status") not in _TESTER_STATUSES or type(report.get("passed")) is not int
            or type(report.get("total")) is not int):
        return "gone"
    return {"status": report["status"], "passed": report["passed"], "total": report["total"],
            "message": _short(str(report.get("message", "")))}


_TESTER_STATUSES = {"passed", "failed", "error", "timeout", "crashed", "invalid_test"}


# -- the zygote ---------------------------------------------------------------


def _zygote_main(sock: socket.socket, config: dict) -> None:
    """Z: forks the candidates. Never sees tests, expected outputs or program text.

    With namespaces it first enters a user and pid namespace of its own (where it
    holds capabilities, so that it may make a new pid namespace per program and
    step back out of it) and runs its loop as pid 1 there."""
    _null_stdio()
    sock = socket.socket(fileno=_move_fds([sock.detach()])[0])
    pidns = -1
    if config["namespaces"]:
        uid, gid = os.getuid(), os.getgid()
        _check(_libc().unshare(_CLONE_NEWUSER | _CLONE_NEWPID), "unshare")
        _write_id_maps(uid, gid)
        pid = os.fork()
        if pid:
            sock.close()
            os.waitpid(pid, 0)
            return
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        pidns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    _Zygote(sock, config, pidns).loop()


def _write_id_maps(uid: int, gid: int) -> None:
    # Our /proc files are ours only while we are dumpable: be so just long enough.
    _prctl(_PR_SET_DUMPABLE, 1)
    try:
        for path, text in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"{uid} {uid} 1"),
                           ("/proc/self/gid_map", f"{gid} {gid} 1")):
            with open(path, "w") as f:
                f.write(text)
    finally:
        _prctl(_PR_SET_DUMPABLE, 0)


class _Zygote:
    """Z's loop. Keeps one *spare* candidate process ready -- forked, in its own pid
    and IPC namespace, capabilities dropped -- so that a job only has to hand it
    the program; the next spare is forked while that job runs."""

    def __init__(self, sock: socket.socket, config: dict, pidns: int) -> None:
        self.sock, self.config, self.pidns = sock, config, pidns
        self.children: dict[int, tuple[int, str | None]] = {}  # pidfd -> (token, workdir)
        self.token = 0
        self.spare: tuple[int, int, socket.socket, str | None] | None = None  # pid, pidfd, socket, workdir
        self.poller = select.poll()
        self.poller.register(sock.fileno(), select.POLLIN)

    def loop(self) -> None:
        self._new_spare()
        while True:
            for fd, _ in self.poller.poll():
                if fd == self.sock.fileno():
                    msg, fds, _flags, _addr = socket.recv_fds(self.sock, 1 << 16, 8)
                    if not msg:
                        os._exit(0)
                    try:
                        self._launch(json.loads(msg), fds)
                    finally:
                        for f in fds:
                            os.close(f)
                    # Only now, holding none of that job's descriptors (a copy
                    # would keep its channels open past the candidate's death):
                    if self.spare is None:
                        try:
                            self._new_spare()
                        except Exception:
                            pass  # tried again at the next job, which reports the error
                elif self.spare is not None and fd == self.spare[1]:
                    self._drop_spare()  # it died waiting (e.g. chosen by the OOM killer): make another
                    self._new_spare()
                elif fd in self.children:
                    self._reap(fd)

    def _launch(self, spec: dict, fds: list[int]) -> None:
        # F has killed the previous program already; wait until all of its processes
        # are gone, so that it cannot hold pids or memory the next program needs,
        # then empty the scratch space it may have written.
        settle = time.monotonic() + 5.0
        while self.children and time.monotonic() < settle:
            for pidfd in list(self.children):
                ready, _, _ = select.select([pidfd], [], [], max(0.0, settle - time.monotonic()))
                if ready:
                    self._reap(pidfd)
        if self.pidns >= 0 and not self.children:
            _empty_scratch()
        for attempt in (1, 2):  # a spare that died waiting is replaced once
            try:
                if self.spare is None:
                    self._new_spare()
                pid, pidfd, spare_sock, workdir = self.spare
                socket.send_fds(spare_sock, [json.dumps(spec).encode()], fds)
                self.spare = None
                spare_sock.close()
                break
            except Exception as e:
                if self.spare is not None:
                    self._drop_spare()
                if attempt == 2:
                    _zygote_send(self.sock, {"error": f"{type(e).__name__}: {e}"})
                    return
        self.token += 1
        self.children[pidfd] = (self.token, workdir)
        _zygote_send(self.sock, {"launched": self.token, "pid": pid}, [pidfd])

    def _new_spare(self) -> None:
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        workdir = None
        if self.pidns < 0:
            import tempfile

            # Inside the worker's own directory, which the host removes with the worker.
            workdir = tempfile.mkdtemp(prefix="run-", dir=self.config["workdir"])
            if self.config["uid"] is not None:
                os.chown(workdir, self.config["uid"], self.config["uid"])
        else:
            # The child becomes pid 1 of a new namespace: when it dies, so does
            # everything it started. Then step back so the next fork is ours again.
            _check(_libc().unshare(_CLONE_NEWPID), "unshare")
        pid = -1
        try:
            for attempt in range(50):
                try:
                    pid = _raw_fork()
                    break
                except BlockingIOError:  # EAGAIN: the pids cgroup is momentarily full
                    if attempt == 49:
                        raise
                    time.sleep(0.01)
        finally:
            if self.pidns >= 0 and pid != 0:  # the parent (only) steps back
                _check(_libc().setns(self.pidns, _CLONE_NEWPID), "setns")
        if pid == 0:
            try:
                self.sock.close()
                parent_end.close()
                _candidate_main(child_end, self.config, workdir)
            finally:
                os._exit(127)
        child_end.close()
        pidfd = os.pidfd_open(pid)
        self.poller.register(pidfd, select.POLLIN)
        self.spare = (pid, pidfd, parent_end, workdir)

    def _drop_spare(self) -> None:
        pid, pidfd, spare_sock, workdir = self.spare
        self.spare = None
        spare_sock.close()
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.poller.unregister(pidfd)
        try:
            os.waitid(os.P_PIDFD, pidfd, os.WEXITED)
        except ChildProcessError:
            pass
        os.close(pidfd)
        if workdir is not None:
            import shutil

            shutil.rmtree(workdir, ignore_errors=True)

    def _reap(self, pidfd: int) -> None:
        self.poller.unregister(pidfd)
        token, workdir = self.children.pop(pidfd)
        try:
            si = os.waitid(os.P_PIDFD, pidfd, os.WEXITED)
            status = si.si_status if si.si_code == os.CLD_EXITED else -si.si_status
        except ChildProcessError:
            status = None
        os.close(pidfd)
        if workdir is not None:
            import shutil

            shutil.rmtree(workdir, ignore_errors=True)
        _zygote_send(self.sock, {"exited": token, "status": status})


_SCRATCH = ("/tmp", "/dev/shm")  # the sandbox's only writable places


def _empty_scratch() -> None:
    """Remove whatever the last program left in the writable tmpfs mounts, so that
    nothing passes from one program to the next. (Cheaper than a mount namespace
    per program, whose teardown costs every CPU an RCU grace period.) In our user
    namespace we hold CAP_DAC_OVERRIDE over the program's files: no mode it set
    can stop this."""
    import shutil

    for top in _SCRATCH:
        try:
            entries = list(os.scandir(top))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
            except OSError:
                pass


def _zygote_send(sock: socket.socket, message: dict, fds: list[int] = ()) -> None:
    try:
        socket.send_fds(sock, [json.dumps(message).encode()], list(fds))
    except OSError:
        os._exit(0)  # F is gone


# -- the candidate ------------------------------------------------------------


def _candidate_main(sock: socket.socket, config: dict, workdir: str | None) -> None:
    """C: build the cage (before any job: this is the zygote's spare), wait for a
    program, then run it (and serve the tester's calls in call mode)."""
    import random

    random.seed()  # see _raw_fork
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    # A session and process group of its own, on every path: otherwise the program
    # shares the fork server's group (bwrap's --new-session makes one session for
    # all of them), and kill(0, ...) or killpg(getpgrp(), ...) stops or kills the
    # fork server, the zygote and the tester -- process groups span pid namespaces.
    os.setsid()
    if config["namespaces"]:
        # Still holding the zygote's capabilities (in its user namespace only):
        # SysV IPC and POSIX message queues of its own, then drop them all.
        _check(_libc().unshare(_CLONE_NEWIPC), "unshare")
        _drop_all_capabilities(config["last_cap"])
        workdir = "/tmp"
    else:
        _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    try:  # if a cgroup runs out of memory, kill the candidate first
        fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
        os.write(fd, b"1000")
        os.close(fd)
    except OSError:
        pass
    msg, fds, _flags, _addr = socket.recv_fds(sock, 1 << 16, 8)
    sock.close()
    if not msg:
        os._exit(0)  # the zygote is gone
    if not config["namespaces"] and config["uid"] is not None:
        # The worker's own uid (as root), so that kill(-1) reaches this worker's
        # programs only. Taken only now: a spare that waited under it could be
        # stopped by the running program's kill(-1, SIGSTOP), and the next job with it.
        uid = config["uid"]
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # the uid change cleared it
    spec = json.loads(msg)
    mode = spec["mode"]
    program_fd, fds = fds[0], fds[1:]
    source = os.pread(program_fd, os.fstat(program_fd).st_size, 0).decode("utf-8", "surrogatepass")
    os.close(program_fd)
    setup, seed = [], spec.get("seed")
    if mode == "exec":
        cells = json.loads(source)
        setup, source = cells["setup"], cells["program"]
    # RLIMIT_NPROC counts the processes of our uid in our user namespace (there:
    # this program's, the zygote's and its spare's; the kernel applies it even
    # where that uid is root outside). Without namespaces it counts all of the
    # uid's processes on the host (as root: the worker's own uid, which only this
    # program's processes and leftovers hold; the spare waits under the zygote's).
    nproc = spec["max_procs"] + 4
    if not config["namespaces"]:
        nproc += config["user_processes"]
    _set_rlimits(spec["timeout"], spec["memory_mb"], 256, nproc)
    os.chdir(workdir)
    if mode == "io":
        stdin_fd, out_fd, err_fd = fds
        os.dup2(stdin_fd, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        os.closerange(3, 1 << 16)
        chan = -1
    else:
        if mode == "exec":  # stdout and stderr on one pipe, the end-of-run report on fd 3
            out_fd, chan_fd = fds
        else:
            chan_fd, out_fd = fds
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.dup2(chan_fd, 3)
        os.closerange(4, 1 << 16)
        chan = 3
        if mode == "exec":
            os.set_inheritable(chan, False)  # the report is this process's; its children need not hold it
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_IGN)  # Python's own defaults
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGXCPU, signal.SIGHUP, signal.SIGALRM):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import types

    # sys.stdin/stdout/stderr already wrap fds 0-2, which now are the program's
    # (the zygote never used them, so nothing is buffered).
    sys.stdin, sys.stdout, sys.stderr = sys.__stdin__, sys.__stdout__, sys.__stderr__
    sys.argv = ["main.py"]
    filename = os.path.join(workdir, "main.py")
    module = types.ModuleType("__candidate__" if mode == "call" else "__main__")
    module.__file__ = filename
    module.__builtins__ = builtins
    sys.modules[module.__name__] = module
    if mode == "call":
        sys.modules["__main__"] = module
    import linecache

    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    del spec, fds, config
    if mode == "io":
        _run_main_program(source, filename, module)
    elif mode == "exec":
        if seed is not None:
            random.seed(seed)  # the same draws each time the cells are replayed
        _run_cells(setup, source, filename, module, chan)
    else:
        _serve_calls(source, filename, module, chan)


def _run_cells(setup: list, source: str, filename: str, module: Any, info: int) -> None:
    """exec mode: the session's earlier cells with their output discarded, then the program,
    all in one namespace, as a notebook kernel would have run them: an exception ends its own
    cell only. Reports on ``info`` how the program ended: ok, or its exception's last
    traceback line (what the caller shows next to the output)."""
    import atexit

    for stream in (sys.stdout, sys.stderr):  # they share one pipe: keep their lines in order
        stream.reconfigure(line_buffering=True)
    g = module.__dict__
    if setup:
        saved = [os.dup(1), os.dup(2)]
        null = os.open("/dev/null", os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.close(null)
        for index, cell in enumerate(setup):
            try:
                exec(compile(str(cell), f"cell_{index}.py", "exec"), g)
            except BaseException:  # SystemExit and KeyboardInterrupt too: they ended that cell
                pass
        _flush_stdio()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
    error = None
    try:
        exec(compile(source, filename, "exec"), g)
        for thread in threading.enumerate():
            if thread is not threading.main_thread() and not thread.daemon:
                thread.join()
    except SystemExit as e:
        if e.code not in (None, 0):
            error = f"SystemExit: {e.code}"
    except BaseException as e:
        error = _last_traceback_line(e)
    try:
        atexit._run_exitfuncs()
    except BaseException:
        pass
    _flush_stdio()
    report = {"end": "ok"} if error is None else {"end": "error", "message": error}
    try:
        _write_all(info, (json.dumps(report) + "\n").encode())
    except OSError:
        pass
    os._exit(0 if error is None else 1)


def _flush_stdio() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass


def _last_traceback_line(e: BaseException) -> str:
    """What Python prints last for an uncaught exception (``ZeroDivisionError: division by
    zero``); for a syntax error, with the line number its caret line would have shown."""
    try:
        if isinstance(e, SyntaxError):
            return f"{type(e).__name__}: {e.msg} (line {e.lineno})"
        import traceback

        return traceback.format_exception_only(type(e), e)[0].strip()
    except BaseException:
        return type(e).__name__


def _run_main_program(source: str, filename: str, module: Any) -> None:
    """io mode: behave like ``python main.py`` (threads joined, atexit run, exit code)."""
    import atexit
    import traceback

    code = 0
    try:
        exec(compile(source, filename, "exec"), module.__dict__)
        for thread in threading.enumerate():
            if thread is not threading.main_thread() and not thread.daemon:
                thread.join()
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code & 0xFF
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        code = code or 1
    os._exit(code)


def _serve_calls(source: str, filename: str, module: Any, chan: int) -> None:
    """call mode: load the program, announce its names, answer the tester's requests."""
    import types

    try:
        exec(compile(source, filename, "exec"), module.__dict__)
    except BaseException as e:  # SystemExit included: the program must load to be tested
        _send(chan, {"load_error": _exception_text(e)})
        os._exit(1)
    g = module.__dict__
    exports = {}
    for name, value in list(g.items()):
        if name.startswith("__"):
            continue
        if isinstance(value, types.ModuleType):
            exports[name] = "module:" + value.__name__
        elif callable(value):
            exports[name] = "callable"
        else:
            exports[name] = "data"
    _send(chan, {"ready": exports})
    resolve = g.__getitem__
    while True:
        try:
            request = _recv(chan)
        except _Closed:
            os._exit(0)
        try:
            if "get" in request:
                value = g[request["get"]]
            else:
                fn = g[request["call"]]
                value = fn(*_decode(request["args"], resolve), **_decode(request["kwargs"], resolve))
            reply = {"ok": _encode(value)}
        except BaseException as e:
            reply = {"raise": [type(e).__name__, _short(str(e), 500)]}
        _send(chan, reply)


def _exception_text(e: BaseException) -> str:
    if isinstance(e, SyntaxError):
        return _short(f"SyntaxError: {e.msg} (line {e.lineno})")
    return _short(f"{type(e).__name__}: {e}")


# -- the tester -----------------------------------------------------------------


class _Abort(BaseException):
    """Stops all tests: timeout, candidate gone, or (without partial credit) a failure."""


class CandidateError(Exception):
    """The candidate raised an exception that is not a builtin one."""


_BUILTIN_EXCEPTIONS = {
    name: obj for name, obj in vars(builtins).items()
    if isinstance(obj, type) and issubclass(obj, Exception)
}


class _Proxy:
    """Stands in for a candidate function inside the tester: every call is a round
    trip to the candidate process; what comes back is decoded into plain data."""

    def __init__(self, tester: _Tester, name: str) -> None:
        self._tester = tester
        self.__name__ = self.__qualname__ = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._tester.request({"call": self.__name__, "args": self._tester.encode(list(args)),
                                     "kwargs": self._tester.encode(kwargs)})

    def __repr__(self) -> str:
        return f"<sandboxed function {self.__name__}>"


_CODE_CACHE: dict[tuple[str, str], Any] = {}  # the tester sees the same tests for every sample of a prompt


def _cached(key: tuple[str, str], make: Any) -> Any:
    try:
        return _CODE_CACHE[key]
    except KeyError:
        pass
    value = make()
    if len(_CODE_CACHE) >= 512:
        _CODE_CACHE.pop(next(iter(_CODE_CACHE)))
    _CODE_CACHE[key] = value
    return value


def _compile_unit(text: str, filename: str) -> tuple[Any, int, frozenset, frozenset]:
    """Compile one test unit with counted asserts; also the names it reads and binds."""

    def make() -> tuple[Any, int, frozenset, frozenset]:
        tree = ast.parse(text, filename)
        loads, bound = set(), set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                (loads if isinstance(node.ctx, ast.Load) else bound).add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, ast.arg):
                bound.add(node.arg)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        counter = _AssertCounter()
        tree = ast.fix_missing_locations(counter.visit(tree))
        return compile(tree, filename, "exec"), counter.count, frozenset(loads), frozenset(bound)

    return _cached(("unit", filename + "\0" + text), make)


class _AssertCounter(ast.NodeTransformer):
    """Wraps each non-constant ``assert`` so that passes and failures are counted."""

    def __init__(self) -> None:
        self.count = 0

    def visit_Assert(self, node: ast.Assert) -> Any:
        if isinstance(node.test, ast.Constant):
            return node  # ``assert True`` in HumanEval tests: not a check
        self.count += 1
        wrapped = ast.parse(
            "try:\n    pass\nexcept __rlvr_abort__:\n    raise\n"
            f"except BaseException as __rlvr_e__:\n    __rlvr_fail__({node.lineno}, __rlvr_e__)\n"
            "else:\n    __rlvr_pass__()\n"
        ).body[0]
        for part in ast.walk(wrapped):  # report the assert's own line in tracebacks
            if hasattr(part, "lineno"):
                ast.copy_location(part, node)
        wrapped.body = [node]
        return wrapped


def _tester_main(sock: socket.socket) -> None:
    """T: one job at a time from F -- the tests, and a socket to the candidate --
    one verdict back on the same socket, which no candidate ever holds."""
    _null_stdio()
    sock = socket.socket(fileno=_move_fds([sock.detach()])[0])
    _set_rlimits(None, TESTER_MEMORY_MB, 256, None)
    while True:
        msg, fds, _flags, _addr = socket.recv_fds(sock, 16, 2)
        if not msg:
            return
        payload, chan = fds
        job = json.loads(os.pread(payload, os.fstat(payload).st_size, 0))
        os.close(payload)
        report = _Tester(job, chan, job["deadline"]).run()
        report["id"] = job["id"]
        sock.send(json.dumps(report).encode())
        os.close(chan)  # after the verdict: the candidate's exit is off the critical path


class _Tester:
    """T: runs the (trusted) tests against proxies of the candidate's functions and
    decides the verdict. Only this process's report counts."""

    def __init__(self, job: dict, chan: int, deadline: float) -> None:
        self.job = job
        self.chan = chan
        self.deadline = deadline
        self.partial = bool(job.get("partial"))
        self.passed = 0
        self.failed = 0
        self.status = "failed"
        self.message = ""
        self.globals: dict[str, Any] = {}
        self.ref_names: dict[int, str] = {}

    # -- talking to the candidate

    def encode(self, value: Any) -> Any:
        return _encode(value, lambda obj: self.ref_names.get(id(obj)))

    def request(self, message: dict) -> Any:
        try:
            _send(self.chan, message)
            reply = _recv(self.chan, self.deadline)
        except _Timeout:
            self.abort("timeout", f"timed out after {self.job['timeout']} s")
        except (_Closed, OSError) as e:
            self.abort("crashed", f"the candidate process ended during the tests ({e})")
        except (ValueError, RecursionError) as e:
            self.abort("error", f"unreadable reply from the candidate: {type(e).__name__}")
        if type(reply) is dict and len(reply) == 1:
            if "ok" in reply:
                try:
                    return _decode(reply["ok"])
                except (ValueError, TypeError, RecursionError) as e:
                    raise CandidateError(f"unreadable return value: {e}") from None
            raised = reply.get("raise")
            if type(raised) is list and len(raised) == 2 and all(type(x) is str for x in raised):
                name, text = raised
                cls = _BUILTIN_EXCEPTIONS.get(name)
                try:
                    exc = cls(text) if cls is not None else CandidateError(f"{name}: {text}")
                except Exception:
                    exc = CandidateError(f"{name}: {text}")
                raise exc
        self.abort("error", "malformed reply from the candidate")

    # -- bookkeeping; every failure counts, so a test that swallows _Abort still fails

    def record_failure(self, status: str, message: str) -> None:
        self.failed += 1
        if not self.message:
            self.status, self.message = status, _short(message)

    def abort(self, status: str, message: str) -> NoReturn:
        self.record_failure(status, message)
        raise _Abort(message)

    def _pass(self) -> None:  # called by rewritten asserts
        self.passed += 1

    def _fail(self, lineno: int, e: BaseException) -> None:  # called by rewritten asserts
        if isinstance(e, AssertionError):
            text = f"assertion failed (line {lineno})" + (f": {e}" if str(e) else "")
        else:
            text = f"line {lineno}: {type(e).__name__}: {e}"
        self.record_failure("failed", text)
        if not self.partial:
            raise _Abort(text)

    # -- the run

    def run(self) -> dict:
        job = self.job
        try:
            units, static_asserts, wanted = self._compile_tests(job["tests"])
        except Exception as e:
            return self._invalid(f"tests do not compile: {_exception_text(e)}")
        g = self.globals
        g.update({"__name__": "__rlvr_tests__", "__builtins__": builtins,
                  "__rlvr_abort__": _Abort, "__rlvr_pass__": self._pass, "__rlvr_fail__": self._fail})
        trusted = job.get("trusted") or ""
        if trusted:
            try:
                exec(_cached(("trusted", trusted), lambda: compile(trusted, "trusted.py", "exec")), g)
            except BaseException as e:
                return self._invalid(f"test setup failed: {_exception_text(e)}")
        # Objects made by trusted code may be passed to the candidate by name.
        self.ref_names = {id(v): k for k, v in g.items() if not k.startswith("__")}
        try:
            self._connect(wanted)
            for code in units:
                try:
                    exec(code, g)
                except _Abort:
                    raise
                except BaseException as e:
                    self.record_failure("failed", f"{type(e).__name__}: {e}")
                    if not self.partial:
                        raise _Abort(str(e)) from None
        except _Abort:
            pass
        if self.failed == 0:
            return {"status": "passed", "passed": self.passed, "total": self.passed, "message": ""}
        total = max(self.passed + self.failed, static_asserts)
        return {"status": self.status, "passed": self.passed, "total": total, "message": self.message}

    def _invalid(self, message: str) -> dict:
        return {"status": "invalid_test", "passed": 0, "total": 0, "message": _short(message)}

    def _connect(self, wanted: set[str]) -> None:
        """Wait for the program to load, then bind what the tests use of it."""
        try:
            hello = _recv(self.chan, self.deadline)
        except _Timeout:
            self.abort("timeout", f"the program did not load within {self.job['timeout']} s")
        except (_Closed, ValueError, RecursionError, OSError):
            self.abort("crashed", "the program ended before the tests could run")
        if type(hello) is dict and len(hello) == 1 and "load_error" in hello:
            self.abort("error", f"the program failed to load: {hello['load_error']}")
        exports = hello.get("ready") if type(hello) is dict and len(hello) == 1 else None
        if type(exports) is not dict:
            self.abort("error", "malformed message from the candidate")
        self._bind(exports, wanted)

    def _compile_tests(self, tests: list[str]) -> tuple[list[Any], int, set[str]]:
        units = []
        count = 0
        loads: set[str] = set()
        bound: set[str] = set()
        for index, text in enumerate(tests):
            code, n, unit_loads, unit_bound = _compile_unit(text, f"test_{index}.py")
            units.append(code)
            count += n
            loads |= unit_loads
            bound |= unit_bound
        wanted = {n for n in loads - bound if not hasattr(builtins, n)}
        return units, count, wanted

    def _bind(self, exports: dict, wanted: set[str]) -> None:
        """Give the tests what they use of the candidate's namespace -- never
        shadowing a builtin or anything the trusted code defined."""
        import importlib

        g = self.globals
        entry = self.job.get("entry_point")
        if entry:
            g[entry] = _Proxy(self, entry)
        for name in sorted(wanted):
            if name in g:
                continue
            kind = exports.get(name)
            if kind == "callable":
                g[name] = _Proxy(self, name)
            elif type(kind) is str and kind.startswith("module:"):
                try:  # the tester imports the module itself, from its own path
                    g[name] = importlib.import_module(kind[len("module:"):])
                except Exception:
                    pass
            elif kind == "data":
                try:
                    g[name] = self.request({"get": name})
                except CandidateError:
                    pass
