"""Hostile programs against the sandbox, and the check that one left nothing behind: the attacks
of tests/integration/test_plugins_sandbox.py, which tests/integration/test_plugins_python_env.py sends again as tool calls and
tests/integration/test_plugins_sandbox_signals.py reuses. Each program is a module constant or a builder; a
program defines ``f(x)`` where the tests ask for it, and never computes the right answers, so any
pass would be a faked verdict."""

from __future__ import annotations

import os
import secrets
import socket
import sys
from pathlib import Path

from rlvr_plugins import sandbox as sb

from helpers import ROOT, wait_until

SECRET_ENV = "RLVR_SANDBOX_TEST_SECRET"
SECRET_VALUE = "s3cr3t-" + secrets.token_hex(8)  # a parent secret the sandbox must not see
MARKER = f"rlvr-hostile-marker-{os.getpid()}-{secrets.token_hex(4)}"  # carried by the processes an attack leaves
SQUARE_TESTS = ["assert f(2) == 4", "assert f(3) == 9", "assert f(-4) == 16"]
WRONG = "\ndef f(x):\n    return -1\n"
CORRECT = "def f(x):\n    return x * x\n"
HANG_TIMEOUT = 1.5


def pids_current(worker) -> int:
    path = worker.cgroups.get("pids")
    return int(Path(path, "pids.current").read_text()) if path else 0


def marked_processes() -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if MARKER.encode() in Path("/proc", entry, "cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                pass
    return found


def assert_clean(box) -> None:
    """Nothing left running: process counts back to baseline, no marked process."""
    def settled() -> bool:
        counts = {w.name: pids_current(w) for w in box.workers if w.proc is not None}
        return not marked_processes() and all(counts[n] <= box.baseline[n] for n in counts)

    # A worker reaps the program and forks its next spare in its own time: the counts must settle
    # (a process left behind never lets them), not hold at one instant read after another.
    assert wait_until(settled), (marked_processes(), {w.name: pids_current(w) for w in box.workers}, box.baseline)
    # and the workers still grade correctly
    results = box.run_many([sb.Job(program=CORRECT, tests=SQUARE_TESTS) for _ in box.workers])
    assert all(r.ok for r in results), results


FORK_BOMB = (
    "import os\n"
    "while True:\n"
    "    try:\n"
    "        os.fork()\n"
    "    except OSError:\n"
    "        pass\n"
)
MEMORY_BOMB = "x = []\nwhile True:\n    x.append(b'\\1' * (64 << 20))\n"
MEMORY_BOMB_PROCESSES = (
    "import os, time\n"
    "for _ in range(12):\n"
    "    if os.fork() == 0:\n"
    "        x = b'\\1' * (200 << 20)\n"
    "        time.sleep(60)\n"
    "time.sleep(60)\n"
)
IGNORE_SIGNALS = (
    "import signal\n"
    "for s in (signal.SIGTERM, signal.SIGINT, signal.SIGXCPU, signal.SIGALRM, signal.SIGHUP):\n"
    "    signal.signal(s, signal.SIG_IGN)\n"
)
SLEEP_FOREVER = "import time\ntime.sleep(10 ** 6)\n"


FLOOD_WRITERS = {
    "print": "print('x' * 100000)",
    "stderr": "sys.stderr.write('y' * 100000)",
    "raw_fds": "os.write(1, b'z' * 65536); os.write(2, b'z' * 65536)",
}


def flood_program(stream: str) -> str:
    return f"import os, sys\nwhile True:\n    {FLOOD_WRITERS[stream]}\n"


def outside_targets(tmp_path: Path) -> tuple[list[Path], Path, Path]:
    """Files a program must not be able to write, the victim (an existing host file) and the one
    path that is writable: the sandbox's own /tmp (the host's /tmp path, so it must not appear there)."""
    victim = tmp_path / "victim.txt"
    victim.write_text("original")
    host_tmp = Path("/tmp") / f"{MARKER}-pwned"
    targets = [tmp_path / "pwned.txt", victim, ROOT / f"{MARKER}-pwned", host_tmp, Path("/usr") / f"{MARKER}-pwned",
               Path(sys.base_prefix) / f"{MARKER}-pwned"]
    return targets, victim, host_tmp


def writing_program(targets: list[Path]) -> str:
    """Defines f(x): writes (and chmods) every target it can, returns the ones it wrote."""
    return (
        "import os\n"
        f"TARGETS = {[str(t) for t in targets]!r}\n"
        "def f(x):\n"
        "    wrote = []\n"
        "    for path in TARGETS:\n"
        "        try:\n"
        "            with open(path, 'w') as fh:\n"
        "                fh.write('pwned')\n"
        "            wrote.append(path)\n"
        "        except OSError:\n"
        "            pass\n"
        "    for path in TARGETS:\n"
        "        try:\n"
        "            os.chmod(path, 0o777)\n"
        "        except OSError:\n"
        "            pass\n"
        "    return wrote\n"
    )


READ_PARENT_ENV = (  # f(x): the parent's secret, if any process's environment shows it
    "import os\n"
    "def f(x):\n"
    f"    found = os.environ.get({SECRET_ENV!r}, '')\n"
    "    for path in ('/proc/self/environ', '/proc/1/environ', '/proc/2/environ'):\n"
    "        try:\n"
    "            with open(path, 'rb') as fh:\n"
    "                data = fh.read().decode(errors='replace')\n"
    f"            if {SECRET_VALUE!r}[:6] in data:\n"
    "                found = data\n"
    "        except OSError:\n"
    "            pass\n"
    "    return found\n"
)


def listening_socket() -> socket.socket:
    """A host listener on loopback that no sandboxed program may reach (accept times out)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.5)
    return listener


def connecting_program(port: int) -> str:
    """Defines f(x): 'connected' if the host's loopback port (the test's own listener) is
    reachable. Loopback only: a test never sends a packet that could leave the machine; the
    sandbox's own network namespace is what makes the host's loopback unreachable."""
    return (
        "import socket\n"
        "def f(x):\n"
        "    for host, family in (('127.0.0.1', socket.AF_INET), ('::1', socket.AF_INET6)):\n"
        "        try:\n"
        "            s = socket.socket(family, socket.SOCK_STREAM)\n"
        "            s.settimeout(1)\n"
        f"            s.connect((host, {port}))\n"
        "            return 'connected'\n"
        "        except OSError:\n"
        "            pass\n"
        "    return 'blocked'\n"
    )


SIGNAL_EVERYTHING = (
    "import ctypes, os, signal\n"
    "libc = ctypes.CDLL(None)\n"
    "targets = [os.getppid(), 1, -1, 0] + [int(p) for p in os.listdir('/proc') if p.isdigit()]\n"
    "for pid in targets:\n"
    "    for sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGTERM):\n"
    "        if pid in (0, os.getpid()):\n"
    "            continue\n"
    "        try:\n"
    "            os.kill(pid, sig)\n"
    "        except OSError:\n"
    "            pass\n"
    "        libc.kill(pid, sig)\n"
    "for pgid in range(1, 400):\n"
    "    libc.kill(-pgid, signal.SIGKILL)\n"
)


ORPHAN_ESCAPES = {
    "setsid_double_fork": "os.setsid()",
    "clear_pdeathsig": "os.setsid(); ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)",
    "new_user_namespace": "ctypes.CDLL(None).unshare(0x10000000 | 0x20000000)",
}


def orphan_program(escape: str) -> str:
    """Leaves a grandchild carrying MARKER, escaped from its session as ``escape`` says."""
    return (
        "import ctypes, os, sys, time, signal\n"
        "if os.fork() == 0:\n"
        f"    {ORPHAN_ESCAPES[escape]}\n"
        "    if os.fork() == 0:\n"
        "        signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "        signal.signal(signal.SIGHUP, signal.SIG_IGN)\n"
        f"        os.execv(sys.executable, [sys.executable, '-c', 'import time\\nwhile True: time.sleep(0.1)', {MARKER!r}])\n"
        "    os._exit(0)\n"
        "time.sleep(0.3)\n"
    )


def call(box, program, tests=SQUARE_TESTS, **kw) -> sb.Result:
    """``program`` graded by the sandbox ``box`` against ``tests`` (5 s unless told)."""
    kw.setdefault("timeout", 5.0)
    return box.run(sb.Job(program=program, tests=tests, **kw))


def assert_no_pass(result: sb.Result) -> None:
    assert result.status != "passed", result
    assert not result.ok
