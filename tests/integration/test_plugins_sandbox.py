"""Hostile programs against the sandbox: none may pass, none may leave anything behind.

Each attack runs as a candidate whose tests a correct program would pass; the
attack itself never computes the right answers, so any pass would be a faked
verdict. After each one the sandbox's process count must return to its
baseline, no process carrying the test's marker may exist anywhere on the host,
and the same worker must still grade a correct program correctly.
"""

from __future__ import annotations

import os
import socket
import time

import pytest

from rlvr_plugins import sandbox as sb
from rlvr_plugins.sandbox import launch as sb_launch

from helpers import wait_until
from helpers.attacks import (
    FAKE_PASS_PROGRAMS,
    assert_no_pass, call,
    CORRECT, FLOOD_WRITERS, FORK_BOMB, HANG_TIMEOUT, IGNORE_SIGNALS, MARKER, MEMORY_BOMB, MEMORY_BOMB_PROCESSES,
    ORPHAN_ESCAPES, READ_PARENT_ENV, SECRET_ENV, SECRET_VALUE, SIGNAL_EVERYTHING, SLEEP_FOREVER, SQUARE_TESTS,
    WRONG, assert_clean, connecting_program, flood_program, listening_socket, marked_processes, orphan_program,
    outside_targets, writing_program,
)
from helpers.skips import expected_skip
from rlvr import RlvrError


# -- sanity -------------------------------------------------------------------


def test_correct_program_passes_and_wrong_fails(box):
    assert call(box, CORRECT).ok
    result = call(box, WRONG)
    assert result.status == "failed" and "assertion failed" in result.message


def test_reports_isolation_and_limits(box):
    result = call(box, CORRECT)
    assert result.isolation == "bwrap"
    assert box.limits in ("cgroup", "rlimit")


# -- resource abuse -------------------------------------------------------------


def test_fork_bomb(box):
    start = time.monotonic()
    assert_no_pass(call(box, FORK_BOMB, timeout=HANG_TIMEOUT))
    assert time.monotonic() - start < HANG_TIMEOUT + 10
    assert_clean(box)


def test_memory_bomb_single_process(box):
    result = call(box, MEMORY_BOMB + WRONG, memory_mb=256)
    assert_no_pass(result)
    assert "MemoryError" in result.message
    assert_clean(box)


def test_memory_bomb_across_processes(box):
    assert_no_pass(call(box, MEMORY_BOMB_PROCESSES, memory_mb=256, timeout=HANG_TIMEOUT + 1))
    assert_clean(box)


@pytest.mark.parametrize("where", ["load", "call"])
def test_infinite_loop_ignoring_signals(box, where):
    loop = "while True:\n    pass\n" if where == "load" else "def f(x):\n    while True:\n        pass\n"
    program = IGNORE_SIGNALS + loop
    start = time.monotonic()
    result = call(box, program, timeout=HANG_TIMEOUT)
    assert result.status == "timeout", result
    assert time.monotonic() - start < HANG_TIMEOUT + 5
    assert_clean(box)


def test_sleeping_forever(box):
    start = time.monotonic()
    result = call(box, SLEEP_FOREVER, timeout=HANG_TIMEOUT)
    assert result.status == "timeout", result
    assert time.monotonic() - start < HANG_TIMEOUT + 5
    result = box.run(sb.Job(program=SLEEP_FOREVER, mode="io", cases=[("", "")],
                            timeout=HANG_TIMEOUT))
    assert result.status == "timeout", result
    assert_clean(box)


@pytest.mark.parametrize("stream", list(FLOOD_WRITERS))
def test_output_flood(box, stream):
    program = flood_program(stream)
    for mode in ("call", "io"):
        job = sb.Job(program=program, mode=mode, tests=SQUARE_TESTS, cases=[("", "4")], timeout=5.0,
                     max_output=1 << 20)
        result = box.run(job)
        assert result.status == "output_limit", result
    assert_clean(box)


def test_deep_recursion(box):
    program = "import sys\nsys.setrecursionlimit(10 ** 8)\ndef f(x):\n    return f(x + 1) + 1\n"
    # Python 3.11 keeps frames on the heap: this ends in MemoryError (or a crash), not a hang.
    assert_no_pass(call(box, program, memory_mb=256, timeout=2.0))
    assert_no_pass(call(box, program + "f(0)\n", memory_mb=256, timeout=2.0))
    assert_clean(box)


def test_thread_swarm(box):
    program = (
        "import threading, time\n"
        "threads = [threading.Thread(target=time.sleep, args=(60,)) for _ in range(20000)]\n"
        "for t in threads:\n"
        "    t.start()\n" + WRONG
    )
    assert_no_pass(call(box, program, timeout=HANG_TIMEOUT + 2))
    assert_clean(box)


# -- escaping the sandbox ---------------------------------------------------------


def test_writes_outside_do_not_reach_the_host(box, tmp_path):
    targets, victim, host_tmp = outside_targets(tmp_path)
    program = writing_program(targets)
    # The sandbox's own /tmp is writable (private); nothing else is.
    result = call(box, program, tests=[f"assert f(0) == [{str(host_tmp)!r}]"])
    assert result.ok, result
    result = call(box, program, tests=["assert len(f(0)) > 1"])
    assert_no_pass(result)
    assert victim.read_text() == "original"
    for target in targets:
        if target != victim:
            assert not target.exists(), target
    assert_clean(box)


def test_nothing_passes_from_one_program_to_the_next():
    """Scratch space (/tmp, /dev/shm) is emptied between programs, whatever modes
    the last one left on its files; SysV IPC is per program."""
    leave = (
        "import os, sys\n"
        "for top in ('/tmp', '/dev/shm'):\n"
        "    os.makedirs(top + '/locked/inner', exist_ok=True)\n"
        "    open(top + '/locked/inner/data', 'w').write('left behind')\n"
        "    open(top + '/note', 'w').write('left behind')\n"
        "    os.chmod(top + '/locked/inner', 0)\n"
        "    os.chmod(top + '/locked', 0)\n"
        "import ctypes\n"
        "libc = ctypes.CDLL(None)\n"
        "print(libc.shmget(0x5EC12E7, 4096, 0o1666))\n"  # IPC_CREAT | 0666
    )
    look = (
        "import os, ctypes\n"
        "found = sorted(os.listdir('/tmp')) + sorted(os.listdir('/dev/shm'))\n"
        "found.append(ctypes.CDLL(None).shmget(0x5EC12E7, 0, 0) >= 0)\n"
        "print(found)\n"
    )
    with sb.Sandbox("bwrap", workers=1) as one:
        first = one.run(sb.Job(program=leave, mode="io", cases=[("", "0")]))
        assert first.status in ("passed", "failed"), first  # it ran
        second = one.run(sb.Job(program=look, mode="io", cases=[("", "[False]")]))
        assert second.ok, second


def test_parent_environment_is_not_visible(box):
    program = READ_PARENT_ENV
    assert_no_pass(call(box, program, tests=[f"assert {SECRET_VALUE!r} in f(0)"]))
    io = box.run(sb.Job(program="import os\nprint(os.environ.get(%r, 'missing'))\n" % SECRET_ENV, mode="io",
                        cases=[("", SECRET_VALUE)]))
    assert io.status == "failed" and "missing" in io.message, io
    assert_clean(box)


def test_root_only_files_are_unreadable(box, tmp_path):
    secret = tmp_path / "root-only.txt"
    secret.write_text(SECRET_VALUE)
    os.chmod(secret, 0o600)
    program = (
        "def f(x):\n"
        f"    for path in ({str(secret)!r}, '/etc/shadow', '/root/.bashrc', '/etc/passwd'):\n"
        "        try:\n"
        "            with open(path) as fh:\n"
        "                return fh.read()\n"
        "        except OSError:\n"
        "            pass\n"
        "    return ''\n"
    )
    assert_no_pass(call(box, program, tests=[f"assert f(0) == {SECRET_VALUE!r}"]))
    assert_no_pass(call(box, program, tests=["assert f(0) != ''"]))  # none of them is even readable
    assert_clean(box)


def test_no_network_not_even_loopback(box):
    listener = listening_socket()
    program = connecting_program(listener.getsockname()[1])
    try:
        assert_no_pass(call(box, program, tests=["assert f(0) == 'connected'"]))
        assert call(box, program, tests=["assert f(0) == 'blocked'"]).ok
        with pytest.raises(socket.timeout):
            listener.accept()
    finally:
        listener.close()
    assert_clean(box)


def test_signalling_the_parent_and_everything_else(box):
    program = SIGNAL_EVERYTHING + WRONG
    workers_before = {w.name: w.proc.pid for w in box.workers}
    assert_no_pass(call(box, program))
    assert_no_pass(call(box, program.replace(WRONG, "") + "os.kill(os.getpid(), signal.SIGKILL)\n"))
    assert {w.name: w.proc.pid for w in box.workers} == workers_before  # no worker was taken down
    assert_clean(box)


@pytest.mark.parametrize("escape", list(ORPHAN_ESCAPES))
def test_orphans_are_killed(box, escape):
    assert_no_pass(call(box, orphan_program(escape) + WRONG))
    assert_clean(box)


# -- faking the verdict --------------------------------------------------------------

def test_missing_bwrap_refuses_to_run(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(RlvrError) as err:
        sb.Sandbox("bwrap")
    text = str(err.value)
    assert "bubblewrap" in text and "isolation='process'" in text


def test_unknown_isolation_is_refused():
    with pytest.raises(RlvrError):
        sb.Sandbox("none")


def test_broken_sandbox_fails_closed(monkeypatch):
    """bwrap present but unable to build the sandbox: an error, never unsandboxed code."""
    monkeypatch.setattr(sb_launch, "bind_args", lambda: ["--ro-bind", "/nonexistent-rlvr", "/usr"])
    sandbox = sb.Sandbox("bwrap", workers=1)
    try:
        with pytest.raises(RlvrError) as err:
            sandbox.run(sb.Job(program=CORRECT, tests=SQUARE_TESTS))
        assert "bwrap" in str(err.value)
    finally:
        sandbox.close()


# -- the weaker level still cannot be fooled ---------------------------------------------


@pytest.fixture(scope="module")
def process_box():
    sandbox = sb.Sandbox("process", workers=1)
    yield sandbox
    sandbox.close()


def test_process_isolation_grades_and_resists_fake_passes(process_box):
    assert process_box.run(sb.Job(program=CORRECT, tests=SQUARE_TESTS)).ok
    jobs = [sb.Job(program=FAKE_PASS_PROGRAMS[name], tests=SQUARE_TESTS, timeout=5.0)
            for name in ("os_exit_at_load", "sys_exit_in_call", "eq_always_true", "patched_builtins",
                         "print_fake_verdicts", "kill_the_tester", "close_all_fds", "atexit_tricks")]
    for result in process_box.run_many(jobs):
        assert_no_pass(result)
        assert result.isolation == "process"


def test_network_probe_connects_without_namespaces(process_box):
    """The probe of test_no_network_not_even_loopback works: where there is no network
    namespace (the weaker level), it reaches the test's loopback listener."""
    listener = listening_socket()
    try:
        program = connecting_program(listener.getsockname()[1])
        assert process_box.run(sb.Job(program=program, tests=["assert f(0) == 'connected'"])).ok
        listener.settimeout(10)
        listener.accept()[0].close()
    finally:
        listener.close()


def test_process_isolation_kills_orphans(process_box):
    if os.geteuid() != 0 or not process_box.cgroup_controllers.get("pids"):
        expected_skip("process isolation sweeps orphans through the pids cgroup, which needs root")
    program = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execv(sys.executable, [sys.executable, '-c', 'import time\\nwhile True: time.sleep(0.1)', {MARKER!r}])\n"
        "    os._exit(0)\n"
        "time.sleep(0.3)\n" + WRONG
    )
    assert_no_pass(process_box.run(sb.Job(program=program, tests=SQUARE_TESTS)))
    wait_until(lambda: not marked_processes())
    assert marked_processes() == []


# -- throughput under threads -----------------------------------------------------------------


def test_thread_safe_parallel_use(box):
    import threading

    results: list[sb.Result] = []
    lock = threading.Lock()

    def worker(program: str) -> None:
        batch = box.run_many([sb.Job(program=program, tests=SQUARE_TESTS) for _ in range(10)])
        with lock:
            results.extend((program == CORRECT, r.ok) for r in batch)

    threads = [threading.Thread(target=worker, args=(p,)) for p in (CORRECT, WRONG, CORRECT)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 30
    assert all(expected == got for expected, got in results)
