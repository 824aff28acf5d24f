"""A candidate C: one program run. As the zygote's spare it builds its cage (session,
namespaces, capabilities, uid, rlimits); handed a program, it runs it as ``__main__``
(io mode), as a replayed notebook session (exec mode) or loads it and answers the
tester's calls (call mode)."""

from __future__ import annotations

import builtins
import json
import os
import signal
import socket
import sys
import threading
from typing import Any

from .cage import (
    CLONE_NEWIPC,
    PR_SET_NO_NEW_PRIVS,
    PR_SET_PDEATHSIG,
    drop_all_capabilities,
    forbid_affinity_changes,
    prctl,
    set_rlimits,
    unshare,
)
from .wire import Closed, decode, encode, exception_text, recv, send, short, write_all


def candidate_main(sock: socket.socket, config: dict, workdir: str | None) -> None:
    """C: build the cage (before any job: this is the zygote's spare), wait for a
    program, then run it (and serve the tester's calls in call mode)."""
    import random

    random.seed()  # see cage.raw_fork
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    # A session and process group of its own, on every path: otherwise the program
    # shares the fork server's group (bwrap's --new-session makes one session for
    # all of them), and kill(0, ...) or killpg(getpgrp(), ...) stops or kills the
    # fork server, the zygote and the tester -- process groups span pid namespaces.
    os.setsid()
    if config["namespaces"]:
        # Still holding the zygote's capabilities (in its user namespace only):
        # SysV IPC and POSIX message queues of its own, then drop them all.
        unshare(CLONE_NEWIPC)
        drop_all_capabilities(config["last_cap"])
        workdir = "/tmp"
    else:
        prctl(PR_SET_NO_NEW_PRIVS, 1)
    if config.get("cpus"):
        forbid_affinity_changes()  # the worker's pinning holds for the program and all it starts
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
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the uid change cleared it
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
    set_rlimits(spec["timeout"], spec["memory_mb"], 256, nproc)
    os.chdir(workdir)
    if not config["namespaces"]:  # temporary files in the run's own folder, removed with it
        os.environ["TMPDIR"] = workdir
        import tempfile

        tempfile.tempdir = None
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
        write_all(info, (json.dumps(report) + "\n").encode())
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
        send(chan, {"load_error": exception_text(e)})
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
    send(chan, {"ready": exports})
    resolve = g.__getitem__
    while True:
        try:
            request = recv(chan)
        except Closed:
            os._exit(0)
        try:
            if "get" in request:
                value = g[request["get"]]
            else:
                fn = g[request["call"]]
                value = fn(*decode(request["args"], resolve), **decode(request["kwargs"], resolve))
            reply = {"ok": encode(value)}
        except BaseException as e:
            reply = {"raise": [type(e).__name__, short(str(e), 500)]}
        send(chan, reply)
