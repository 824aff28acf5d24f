"""Sandboxed programs against the host's kernel, as root and as an ordinary user.

No file under ``/proc/sys``, ``/sys``, ``/proc/sysrq-trigger`` or ``/proc/pressure`` opens for
writing from a program; a watcher on the host sees ``kernel.core_pattern`` unchanged while a
program tries every route to it we know (the paths through ``/proc/*/root``, the ``sysctl(2)``
system call, a user and mount namespace of its own that remounts the sysctls or mounts a fresh
procfs or sysfs); the jail is never host uid 0; and a program pinned to a CPU cannot widen its
set. Each through a code cell (the ``python`` tool's route) and through the ``code`` reward.

When the suite runs as root, each case runs again as an ordinary user: a child process drops to
an unused uid first (in a mount namespace of its own where the interpreter's prefix is
reachable: on machines where Python lives under ``/root``, only root could start it).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from helpers.ordinary_user import USERS, as_ordinary_user
from helpers.skips import expected_skip

from rlvr_plugins import code_reward as cr
from rlvr_plugins import python_env
from rlvr_plugins import sandbox as sb

CORE_PATTERN = Path("/proc/sys/kernel/core_pattern")
MARK = f"rlvr-sandbox-test-core-{os.getpid()}"  # what a program tries to write: a plain file name

# Defines attack() -> {"uid", "writable", "wrote", "notes"}: every kernel knob that opens for
# writing, every route by which ``core_pattern`` took the program's value. Standard library
# only, and only what the jail has loaded already (process isolation as root reaches no more).
ATTACK = r'''
import ctypes, json, os

KNOBS = ("/proc/sys", "/sys", "/proc/sysrq-trigger", "/proc/pressure")
CORE = "/sys/kernel/core_pattern"


def _opens_for_writing(path):
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return False
    os.close(fd)
    return True


def _write(path, wrote, notes):
    try:
        with open(path, "w") as f:
            f.write(VALUE)
        wrote.append(path)
    except OSError as e:
        notes.append("%s: %s" % (path, e.strerror))


def _in_namespace_of_its_own(wrote, notes):
    """A child in a user and mount namespace of its own (where it holds every capability)
    remounts the sysctls writable, mounts a fresh procfs and sysfs, and writes through each."""
    libc = ctypes.CDLL(None, use_errno=True)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        out = {"wrote": [], "notes": []}
        try:
            uid, gid = os.getuid(), os.getgid()
            if libc.unshare(0x10000000 | 0x00020000) != 0:
                out["notes"].append("unshare: " + os.strerror(ctypes.get_errno()))
            else:
                for name, text in (("setgroups", "deny"), ("uid_map", "0 %d 1" % uid), ("gid_map", "0 %d 1" % gid)):
                    try:
                        with open("/proc/self/" + name, "w") as f:
                            f.write(text)
                    except OSError as e:
                        out["notes"].append("%s: %s" % (name, e.strerror))
                if libc.mount(None, b"/proc/sys", None, 0x20 | 0x1000, None) != 0:  # MS_REMOUNT|MS_BIND, not ro
                    out["notes"].append("remount /proc/sys rw: " + os.strerror(ctypes.get_errno()))
                _write("/proc" + CORE, out["wrote"], out["notes"])
                for fs, target in ((b"proc", "/tmp/fresh-proc"), (b"sysfs", "/tmp/fresh-sys")):
                    os.makedirs(target, exist_ok=True)
                    if libc.mount(fs, target.encode(), fs, 0, None) != 0:
                        out["notes"].append("mount %s: %s" % (fs.decode(), os.strerror(ctypes.get_errno())))
                    elif fs == b"proc":
                        _write(target + CORE, out["wrote"], out["notes"])
                    else:
                        for root, _dirs, files in os.walk(target):
                            out["wrote"] += [os.path.join(root, n) for n in files
                                             if _opens_for_writing(os.path.join(root, n))]
        except BaseException as e:
            out["notes"].append("namespace child: %r" % (e,))
        os.write(write, json.dumps(out).encode())
        os._exit(0)
    os.close(write)
    data = b""
    while True:
        chunk = os.read(read, 1 << 16)
        if not chunk:
            break
        data += chunk
    os.waitpid(pid, 0)
    out = json.loads(data or b'{"wrote": [], "notes": ["namespace child: no report"]}')
    wrote += out["wrote"]
    notes += out["notes"]


def _sysctl_syscall(wrote, notes):
    """sysctl(2) with {CTL_KERN, KERN_CORE_PATTERN} (x86_64: gone from kernels since 5.5)."""
    if os.uname().machine != "x86_64":
        return
    class Args(ctypes.Structure):
        _fields_ = [("name", ctypes.POINTER(ctypes.c_int)), ("nlen", ctypes.c_int), ("oldval", ctypes.c_void_p),
                    ("oldlenp", ctypes.c_void_p), ("newval", ctypes.c_char_p), ("newlen", ctypes.c_size_t),
                    ("unused", ctypes.c_ulong * 4)]
    libc = ctypes.CDLL(None, use_errno=True)
    args = Args((ctypes.c_int * 2)(1, 56), 2, None, None, VALUE.encode(), len(VALUE))
    if libc.syscall(156, ctypes.byref(args)) == 0:
        wrote.append("sysctl(2)")
    else:
        notes.append("sysctl(2): " + os.strerror(ctypes.get_errno()))


def attack():
    writable, wrote, notes = [], [], []
    for knob in KNOBS:
        if os.path.isfile(knob) and _opens_for_writing(knob):
            writable.append(knob)
        for root, _dirs, files in os.walk(knob):
            writable += [os.path.join(root, n) for n in files if _opens_for_writing(os.path.join(root, n))]
    for path in writable:  # a sysctl that opened: write back what it holds (harmless if it takes)
        if path.startswith("/proc/sys/"):
            try:
                with open(path) as f:
                    held = f.read()
                with open(path, "w") as f:
                    f.write(held)
                wrote.append(path)
            except OSError as e:
                notes.append("%s: %s" % (path, e.strerror))
    writable = [[path, os.stat(path).st_mode & 0o777] for path in writable]
    for proc in ("/proc", "/proc/self/root/proc", "/proc/1/root/proc", "/proc/thread-self/root/proc"):
        _write(proc + CORE, wrote, notes)
    _sysctl_syscall(wrote, notes)
    _in_namespace_of_its_own(wrote, notes)
    return {"uid": os.getuid(), "writable": writable, "wrote": wrote, "notes": notes}
'''


def attack_cell() -> str:
    """The attack as a tool call: the cell prints its findings as JSON."""
    return f"VALUE = {MARK!r}\n" + ATTACK + "print(json.dumps(attack()))\n"


def attack_completion() -> str:
    """The attack as a HumanEval completion: ``probe()`` says "clean" or what it found."""
    return (f"VALUE = {MARK!r}\n" + ATTACK + "def probe():\n    found = attack()\n"
            "    return 'clean' if not found['wrote'] else json.dumps(found)\n")


PROBE_RECORD = {"prompt": "def probe():\n", "entry_point": "probe",
                "test": "def check(candidate):\n    assert candidate() == 'clean'\n"}


def run_routes(isolation: str) -> dict:
    """The attack through the ``python`` tool (its findings) and the ``code`` reward (its
    score), on ``isolation``; the process-wide pools are closed afterwards."""
    try:
        env = python_env.make_python_env({}, isolation=isolation, timeout_s=120.0, episode_timeout_s=240.0,
                                         max_output_chars=1 << 20)
        reply = env.step("```python\n" + attack_cell() + "```")
        output = reply.text.split("```output\n", 1)[1].rsplit("\n```", 1)[0]
        score = cr.code_reward(["<prompt>"], [attack_completion()], [[]], isolation=isolation, timeout=120.0,
                               **{k: [v] for k, v in PROBE_RECORD.items()})[0]
        return {"tool": env.state["statuses"][-1], "cell": output, "score": score.value, "info": score.info}
    finally:
        sb.close_all()


class CorePatternWatch:
    """Polls ``kernel.core_pattern`` on the host while a program runs: every value it saw. As
    root, a changed pattern is put back when the watch ends (and the test fails)."""

    def __init__(self) -> None:
        self.original = CORE_PATTERN.read_text()
        self.seen = {self.original}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.wait(0.002):
            self.seen.add(CORE_PATTERN.read_text())

    def __enter__(self) -> CorePatternWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.seen.add(CORE_PATTERN.read_text())
        if CORE_PATTERN.read_text() != self.original and os.geteuid() == 0:
            CORE_PATTERN.write_text(self.original)


@pytest.mark.parametrize("isolation", ["bwrap", "process"])
@pytest.mark.parametrize("user", USERS)
def test_no_kernel_knob_is_writable_and_core_pattern_holds(isolation, user):
    with CorePatternWatch() as watch:
        if user == "as-run":
            found = run_routes(isolation)
        else:
            found = as_ordinary_user(__file__, "run_routes", isolation)
    assert watch.seen == {watch.original}, f"kernel.core_pattern changed on the host: {watch.seen}"
    assert found["tool"] == "ok", found
    cell = json.loads(found["cell"])
    assert cell["wrote"] == [], cell
    if isolation == "process" and (user == "ordinary" or os.geteuid() != 0):
        # No mount namespace to make them read-only: what opens is what the kernel opens to
        # every user (mode o+w), and a write to those sysctls needs capabilities it lacks.
        assert all(mode & 0o002 for _path, mode in cell["writable"]), cell
    else:
        assert cell["writable"] == [], cell
    # every route was tried and refused, none skipped for want of a module
    assert len([n for n in cell["notes"] if "core_pattern" in n]) >= 4, cell["notes"]
    if os.geteuid() == 0 or user == "ordinary":
        assert cell["uid"] != 0 or isolation == "bwrap"  # in bwrap the jail's own uid is 65534
    assert found["score"] == 1.0, found["info"]


def test_the_jail_is_never_host_root():
    """Every process of a bwrap worker's jail, as the host sees it: not uid 0 in any of its
    real, effective, saved or filesystem ids (as root: the worker's own uid)."""
    box = sb.Sandbox("bwrap", workers=1)
    try:
        box.start()
        assert box.run(sb.Job(program="def f(x):\n    return x * x\n", tests=["assert f(3) == 9"])).ok
        worker = box.workers[0]
        jail = _descendants(worker.proc.pid) | {worker.proc.pid}
        checked = 0
        for pid in jail:
            try:  # a program's process may end between the listing and here
                status = Path(f"/proc/{pid}/status").read_text()
            except FileNotFoundError:
                continue
            checked += 1
            ids = {line.split(":")[0]: line.split()[1:] for line in status.splitlines()
                   if line.startswith(("Uid:", "Gid:"))}
            expected = str(worker.uid if os.geteuid() == 0 else os.getuid())
            assert ids["Uid"] == [expected] * 4, (pid, ids)
            assert "0" not in ids["Uid"] and "0" not in ids["Gid"], (pid, ids)
        assert checked >= 4, jail  # bwrap, fork server, zygote, tester (and the spare candidate)
    finally:
        box.close()


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


WIDEN = (
    "import os\n"
    "before = sorted(os.sched_getaffinity(0))\n"
    "try:\n"
    "    os.sched_setaffinity(0, range(os.cpu_count()))\n"
    "    print('widened', sorted(os.sched_getaffinity(0)))\n"
    "except OSError as e:\n"
    "    print('refused', e.errno, before == sorted(os.sched_getaffinity(0)))\n"
)


@pytest.mark.parametrize("isolation", ["bwrap", "process"])
def test_a_pinned_program_cannot_widen_its_cpus(isolation):
    box = sb.Sandbox(isolation, workers=2, pin_cpus=True)
    try:
        box.start()
        results = box.run_many([sb.Job(program=WIDEN, mode="exec") for _ in box.workers])
        for worker, result in zip(box.workers, results):
            assert worker.cpus and len(worker.cpus) == 1
            assert result.output.strip() == "refused 1 True", result  # EPERM, its one CPU kept
        # unpinned, a program may set its own affinity within what it was given
        free = sb.Sandbox(isolation, workers=1, pin_cpus=False)
        try:
            result = free.run(sb.Job(program=WIDEN, mode="exec"))
            assert result.output.startswith("widened"), result
        finally:
            free.close()
    finally:
        box.close()


def test_process_isolation_leaves_nothing_in_the_hosts_temporary_folders(tmp_path):
    """Without namespaces a program shares the host's /tmp and /dev/shm: its temporary files go
    to its run's own folder (TMPDIR), removed with it, and as root what its private uid left
    at the top of /tmp, /var/tmp and /dev/shm is removed when its worker stops."""
    import secrets

    tag = f"rlvr-leftover-{secrets.token_hex(6)}"
    program = (
        "import os, tempfile\n"
        f"open('/tmp/{tag}-file', 'w').write('x')\n"
        f"os.makedirs('/tmp/{tag}-dir/sub')\n"
        f"open('/dev/shm/{tag}-shm', 'w').write('x')\n"
        "fd, name = tempfile.mkstemp()\n"
        "def f(x):\n    return name\n"
    )
    box = sb.Sandbox("process", workers=1)
    try:
        result = box.run(sb.Job(program=program, tests=["assert not f(0).startswith('/tmp/tmp')"]))
        assert result.ok, result
    finally:
        box.close()
    left = [p for folder in ("/tmp", "/dev/shm") for p in Path(folder).glob(f"{tag}*")]
    if os.geteuid() != 0:
        for path in left:
            path.unlink() if path.is_file() else __import__("shutil").rmtree(path)
        expected_skip("only as root do programs run as a uid of their own, whose leftovers can be told apart")
    assert left == []
