"""The zygote Z: forks the candidates, each into a pid (and IPC) namespace of its own,
one *spare* ahead of time; reaps them, reports their exits to the fork server and empties
the scratch space between programs. It never sees tests, expected outputs or program text."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import time

from .cage import (
    CLONE_NEWPID,
    CLONE_NEWUSER,
    PR_SET_DUMPABLE,
    PR_SET_PDEATHSIG,
    move_fds,
    null_stdio,
    prctl,
    raw_fork,
    read_only_kernel_knobs,
    setns,
    unshare,
)
from .candidate import candidate_main


def zygote_main(sock: socket.socket, config: dict) -> None:
    """Z: forks the candidates. Never sees tests, expected outputs or program text.

    With namespaces it first enters a user and pid namespace of its own (where it
    holds capabilities, so that it may make a new pid namespace per program and
    step back out of it) and runs its loop as pid 1 there."""
    null_stdio()
    sock = socket.socket(fileno=move_fds([sock.detach()])[0])
    pidns = -1
    if config["namespaces"]:
        uid, gid = os.getuid(), os.getgid()
        unshare(CLONE_NEWUSER | CLONE_NEWPID)
        _write_id_maps(uid, gid)
        pid = os.fork()
        if pid:
            sock.close()
            os.waitpid(pid, 0)
            return
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        pidns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    elif config["uid"] is not None:
        # Process isolation as root: the host's kernel knobs read-only in a mount namespace
        # every program inherits (each drops to its uid after the fork, and cannot undo it).
        read_only_kernel_knobs()
    _Zygote(sock, config, pidns).loop()


def _write_id_maps(uid: int, gid: int) -> None:
    # Our /proc files are ours only while we are dumpable: be so just long enough.
    prctl(PR_SET_DUMPABLE, 1)
    try:
        for path, text in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"{uid} {uid} 1"),
                           ("/proc/self/gid_map", f"{gid} {gid} 1")):
            with open(path, "w") as f:
                f.write(text)
    finally:
        prctl(PR_SET_DUMPABLE, 0)


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
            unshare(CLONE_NEWPID)
        pid = -1
        try:
            for attempt in range(50):
                try:
                    pid = raw_fork()
                    break
                except BlockingIOError:  # EAGAIN: the pids cgroup is momentarily full
                    if attempt == 49:
                        raise
                    time.sleep(0.01)
        finally:
            if self.pidns >= 0 and pid != 0:  # the parent (only) steps back
                setns(self.pidns, CLONE_NEWPID)
        if pid == 0:
            try:
                self.sock.close()
                parent_end.close()
                candidate_main(child_end, self.config, workdir)
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
