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


# Programs that try to fake a passing verdict (the verdict the sandbox reports is never theirs).
FAKE_VERDICTS = [
    '{"status": "passed", "passed": 3, "total": 3, "message": "", "ok": 1}',
    "PASSED", "OK", "All tests passed", "passed", "1.0", "True",
]

FAKE_PASS_PROGRAMS = {
    "os_exit_at_load": "import os\nos._exit(0)\n",
    "os_exit_in_call": "import os\ndef f(x):\n    os._exit(0)\n",
    "sys_exit_at_load": "import sys\nsys.exit(0)\n",
    "sys_exit_in_call": "import sys\ndef f(x):\n    sys.exit(0)\n",
    "raise_systemexit": "def f(x):\n    raise SystemExit(0)\n",
    "raise_systemexit_at_load": CORRECT + "raise SystemExit(0)\n",
    "keyboard_interrupt": "def f(x):\n    raise KeyboardInterrupt\n",
    "print_fake_verdicts": (
        "import os, struct, json\n"
        f"for text in {FAKE_VERDICTS!r}:\n"
        "    print(text, flush=True)\n"
        "    frame = struct.pack('>I', len(text)) + text.encode()\n"
        "    for fd in range(256):\n"
        "        try:\n"
        "            os.write(fd, frame)\n"
        "        except OSError:\n"
        "            pass\n" + WRONG
    ),
    "forge_protocol_messages": (
        "import os, struct, json\n"
        "def frame(obj):\n"
        "    data = json.dumps(obj).encode()\n"
        "    return struct.pack('>I', len(data)) + data\n"
        "for fd in range(3, 64):\n"
        "    for obj in ({'status': 'passed', 'passed': 3, 'total': 3, 'message': '', 'id': 1},\n"
        "                {'ready': {}}, {'ok': True}, {'ok': {'t': []}}, {'raise': ['AssertionError', '']}):\n"
        "        try:\n"
        "            os.write(fd, frame(obj))\n"
        "        except OSError:\n"
        "            pass\n" + WRONG
    ),
    "close_all_fds": "import os\nfor fd in range(256):\n    try:\n        os.close(fd)\n    except OSError:\n        pass\n"
    + CORRECT,
    "dup_over_fds": "import os\nfor fd in range(256):\n    try:\n        os.dup2(1, fd)\n    except OSError:\n        pass\n"
    + WRONG,
    "eq_always_true": (
        "class Liar:\n"
        "    def __eq__(self, other):\n        return True\n"
        "    def __ne__(self, other):\n        return False\n"
        "    def __bool__(self):\n        return True\n"
        "    __hash__ = object.__hash__\n"
        "def f(x):\n    return Liar()\n"
    ),
    "builtin_subclass_liars": (
        "class LyingInt(int):\n"
        "    def __eq__(self, other):\n        return True\n"
        "    __hash__ = int.__hash__\n"
        "class LyingList(list):\n"
        "    def __eq__(self, other):\n        return True\n"
        "def f(x):\n    return LyingInt(0)\n"
    ),
    "patched_builtins": (
        "import builtins\n"
        "builtins.AssertionError = type('AssertionError', (BaseException,), {})\n"
        "builtins.isinstance = lambda *a: True\n"
        "builtins.abs = lambda x: 0\n"
        "builtins.len = lambda x: 0\n"
        "builtins.print = lambda *a, **k: None\n"
        "builtins.Exception = BaseException\n"
        "def abs(x):\n    return 0\n"
        "def isinstance(*a):\n    return True\n"
        "def f(x):\n    return None\n"
    ),
    "frame_and_gc_walking": (
        "import gc, sys\n"
        "frame = sys._getframe()\n"
        "while frame is not None:\n"
        "    for scope in (frame.f_globals, frame.f_locals):\n"
        "        for key in list(scope):\n"
        "            if key in ('passed', 'failed', 'status', 'ok', 'verdict'):\n"
        "                scope[key] = 'passed'\n"
        "    frame = frame.f_back\n"
        "for obj in gc.get_objects():\n"
        "    if type(obj) is dict:\n"
        "        for key in ('status', 'passed', 'failed', 'total'):\n"
        "            if key in obj:\n"
        "                obj[key] = 'passed' if key == 'status' else 3\n"
        "server = sys.modules.get('rlvr_sandbox_server')\n"
        "if server is not None:\n"
        "    server._encode = lambda *a, **k: True\n"
        "    server._decode = lambda *a, **k: True\n"
        "    server._short = lambda *a, **k: 'passed'\n"
        "for mod in list(sys.modules.values()):\n"
        "    for name in ('_encode', '_send', 'dumps'):\n"
        "        if hasattr(mod, name) and mod is not server and name != 'dumps':\n"
        "            try:\n"
        "                setattr(mod, name, lambda *a, **k: None)\n"
        "            except Exception:\n"
        "                pass\n" + WRONG
    ),
    "atexit_tricks": (
        "import atexit, os\n"
        "atexit.register(os._exit, 0)\n"
        "atexit.register(print, 'PASSED')\n" + WRONG + "import sys\nsys.exit(0)\n"
    ),
    "kill_the_tester": (
        "import os, signal\n"
        "def f(x):\n"
        "    for pid in range(1, 2048):\n"
        "        if pid != os.getpid():\n"
        "            try:\n"
        "                os.kill(pid, signal.SIGKILL)\n"
        "            except OSError:\n"
        "                pass\n"
        "    return -1\n"
    ),
    "ptrace_and_proc_mem": (
        # Reach any other process: ptrace it, open its memory, or open one of its
        # file descriptors (the fork server's pipe to the host would be a forged-
        # result channel). Listing /proc/<pid>/fd is not enough to do any of that.
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "ME = int(os.readlink('/proc/self'))\n"
        "REACHED = []\n"
        "for pid in [int(p) for p in os.listdir('/proc') if p.isdigit() and int(p) != ME]:\n"
        "    if libc.ptrace(16, pid, 0, 0) == 0:\n"  # PTRACE_ATTACH
        "        REACHED.append(('ptrace', pid))\n"
        "    for mode in ('rb', 'r+b'):\n"
        "        try:\n"
        "            with open(f'/proc/{pid}/mem', mode):\n"
        "                REACHED.append(('mem', pid))\n"
        "        except OSError:\n"
        "            pass\n"
        "    try:\n"
        "        fds = os.listdir(f'/proc/{pid}/fd')\n"
        "    except OSError:\n"
        "        fds = []\n"
        "    for fd in fds:\n"
        "        for flags in (os.O_WRONLY, os.O_RDONLY):\n"
        "            try:\n"
        "                os.close(os.open(f'/proc/{pid}/fd/{fd}', flags))\n"
        "                REACHED.append(('fd', pid, fd))\n"
        "            except OSError:\n"
        "                pass\n"
        "def f(x):\n"
        "    return REACHED\n"
    ),
}
