"""The fork server F, the jail's entry point (``main``, which the bootstrap calls): it
starts the zygote and the tester, then takes one job at a time from the host (fds 0/1),
runs it -- candidates through the zygote, the tests in the tester, deadlines and output
caps enforced here -- and sends one result back."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import time
from typing import Any

from ..limits import DEFAULT_MAX_PROCS, GRACE, TESTER_JOBS
from .cage import PR_SET_DUMPABLE, PR_SET_PDEATHSIG, last_capability, prctl
from .report import (
    INFO_BYTES,
    OutputSink,
    check_report,
    describe_exit,
    exec_status,
    normalize_output,
    prefix_text,
)
from .tester import tester_main
from .wire import Closed, Timeout, recv, send, short, wait_readable, write_all
from .zygote import zygote_main


# Modules most programs and tests import, loaded once in the fork server so that
# candidates and the tester get them for free after fork.
_PRELOAD = (
    "typing", "re", "collections", "itertools", "functools", "math", "heapq", "bisect",
    "string", "random", "copy", "fractions", "decimal", "statistics", "datetime",
    "operator", "dataclasses", "enum", "traceback", "linecache", "types",
    "threading", "atexit", "io", "importlib", "array", "resource", "ctypes", "tempfile", "shutil",
)


def main() -> None:
    """Fork server F: one job at a time from the host, one result back."""
    config = recv(0)
    if config.get("cpus"):
        os.sched_setaffinity(0, config["cpus"])
    prctl(PR_SET_DUMPABLE, 0)  # nothing in the sandbox may ptrace or read our memory
    if not config["namespaces"]:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # bwrap does this for us otherwise
    for name in _PRELOAD:
        __import__(name)
    import gc

    gc.collect()
    gc.freeze()  # fewer copy-on-write faults in the children
    config["last_cap"] = last_capability()
    server = _Server(config)
    # Self-test: both modes end to end, so a kernel that refuses some step fails here.
    for probe in (
        {"mode": "io", "program": "print(6 * 7)", "cases": [["", "42"]]},
        {"mode": "call", "program": "def f(x):\n    return x * 7\n", "tests": ["assert f(6) == 42"]},
    ):
        probe.update(timeout=10.0, memory_mb=256, max_output=4096, partial=False)
        result = server.run_job(probe)
        if result["status"] != "passed":
            send(1, {"error": f"self-test failed: {result['status']}: {result['message']}"})
            return
    send(1, {"ready": True})
    os.dup2(os.open("/dev/null", os.O_WRONLY), 2)  # the host stops reading our stderr now
    while True:
        try:
            job = recv(0)
        except Closed:
            return
        try:
            result = server.run_job(job)
        except Exception as e:  # a bug or exhausted resources: report, then let the host restart us
            import traceback

            send(1, {"status": "sandbox_error", "passed": 0, "total": 0,
                      "message": short("".join(traceback.format_exception_only(e)))})
            return
        send(1, result)


class _Server:
    def __init__(self, config: dict) -> None:
        self.config = config
        self.zsock, zsock_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            self.zsock.close()
            try:
                zygote_main(zsock_child, config)
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
                tester_main(child)
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
        wait_readable(self.zfd, deadline)
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
            write_all(program, text.encode("utf-8", "surrogatepass"))
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
            except Timeout:
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
            write_all(payload, json.dumps(tests).encode())
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
        output = OutputSink(out_r, job["max_output"])
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
            report["message"] = short(f"{report['message']} ({describe_exit(status)})")
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
        return check_report(reply)

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
        return {"status": first[0], "passed": passed, "total": len(cases), "message": short(first[1])}

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
        out = OutputSink(out_r, job["max_output"], keep=job["max_output"])
        err = OutputSink(err_r, job["max_output"], keep=4096, shared=out)
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
            return ("error" if code is not None and code > 0 else "crashed"), f"{describe_exit(code)}: {tail}"
        got = normalize_output(out.text())
        if got == normalize_output(expected):
            return "passed", ""
        return "failed", f"expected {short(expected, 80)!r}, got {short(got, 80)!r}"

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
        out = OutputSink(out_r, job["max_output"], keep=job["keep_output"])
        info = OutputSink(info_r, INFO_BYTES, keep=INFO_BYTES)
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
        status, message = exec_status(out, info, token in self.exits, self.exits.get(token), job)
        return {"status": status, "passed": int(status == "ok"), "total": 1, "message": short(message),
                "output": prefix_text(bytes(out.data), out.count > len(out.data)), "output_bytes": out.count}


def _parent_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0
