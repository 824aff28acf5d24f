"""Programs that signal their own process group, or every process they may signal, and
programs whose output carries control characters.

A sandboxed program runs in a session and process group of its own on every isolation
path, so ``kill(0, ...)``, ``killpg(getpgrp(), ...)`` and ``kill(-1, ...)`` reach nothing
outside it: the worker (fork server, zygote, tester) survives and serves the next call at
once, the call ends at its own deadline, and its wall time -- measured on the host -- is
charged to it. No timing assertion here is tight: lower bounds are sleeps the program or
the test itself did, upper bounds are generous and only where a bound is the point.
"""

from __future__ import annotations

import os
import secrets
import signal
import threading
import time
from pathlib import Path

import pytest
from rlvr_plugins import python_env as pe
from rlvr_plugins import sandbox as sb
from helpers.attacks import CORRECT, HANG_TIMEOUT, SQUARE_TESTS
from helpers.python_env import body, cell, run_hostile
from helpers.skips import expected_skip

AS_ROOT = os.geteuid() == 0
PAUSE = 0.2  # each attacking program runs at least this long before it attacks
SOON = 15.0  # seconds: "promptly", for a call that must not be held up (generous under load)

SIGNAL_ATTACKS = {
    "kill_0_SIGSTOP": "os.kill(0, signal.SIGSTOP)",
    "kill_0_SIGKILL": "os.kill(0, signal.SIGKILL)",
    "killpg_own_SIGSTOP": "os.killpg(os.getpgrp(), signal.SIGSTOP)",
    "killpg_own_SIGKILL": "os.killpg(os.getpgrp(), signal.SIGKILL)",
    "kill_minus_1_SIGKILL": "os.kill(-1, signal.SIGKILL)",
    "kill_minus_1_SIGSTOP": "os.kill(-1, signal.SIGSTOP)",
}


def expected_status(isolation: str, attack: str) -> str:
    """How the attacking call ends. Under bwrap the program is its pid namespace's init,
    which the kernel shields from its own SIGKILL/SIGSTOP: it sleeps on into its timeout.
    Without namespaces it stops itself (a timeout) or kills itself (a crash); kill(-1)
    never signals the caller itself on Linux."""
    if isolation == "process" and "minus_1" not in attack and attack.endswith("SIGKILL"):
        return "crashed"
    return "timeout"


def attack_lines(attack: str) -> str:
    # ESRCH is no failure of the attack: in its pid namespace a bwrap program is the only
    # process of its group, and pid 1 there, so that killpg(getpgrp()) is kill(-1).
    return (f"time.sleep({PAUSE})\ntry:\n    {SIGNAL_ATTACKS[attack]}\nexcept ProcessLookupError:\n    pass\n"
            "time.sleep(60)\n")


def skip_unsafe(isolation: str, attack: str) -> None:
    if isolation == "process" and "minus_1" in attack and not AS_ROOT:
        # Not as root, programs run as our own user: kill(-1) would reach this test run itself.
        expected_skip("kill(-1) under isolation 'process' is contained only as root (see sandbox's docstring)")


@pytest.fixture(scope="module")
def process_box():
    sandbox = sb.Sandbox("process", workers=2)
    sandbox.start()
    yield sandbox
    sandbox.close()


@pytest.fixture(params=["bwrap", "process"])
def pool(request, box):
    return box if request.param == "bwrap" else request.getfixturevalue("process_box")


def worker_pids(sandbox: sb.Sandbox) -> dict[str, int]:
    return {w.name: w.proc.pid for w in sandbox.workers if w.proc is not None}


def assert_workers_serve(sandbox: sb.Sandbox, before: dict[str, int]) -> None:
    """No worker was taken down, and the pool grades a correct program promptly."""
    assert worker_pids(sandbox) == before
    assert all(w.proc.poll() is None for w in sandbox.workers if w.proc is not None)
    start = time.monotonic()
    results = sandbox.run_many([sb.Job(program=CORRECT, tests=SQUARE_TESTS) for _ in sandbox.workers])
    assert all(r.ok for r in results), results
    assert time.monotonic() - start < SOON


def assert_charged(result: sb.Result, wall: float, timeout: float) -> None:
    """The call is charged at least the time it provably ran, and no more than passed."""
    assert result.elapsed >= PAUSE, result
    if result.status == "timeout":
        assert result.elapsed >= timeout, result  # it ran up to its deadline
    assert result.elapsed <= wall, (result, wall)


# -- the code reward's modes -------------------------------------------------------------


def graded_job(attack: str, mode: str) -> sb.Job:
    head = "import os, signal, time\n"
    if mode == "call_at_load":
        return sb.Job(program=head + attack_lines(attack) + CORRECT, tests=SQUARE_TESTS, timeout=HANG_TIMEOUT)
    if mode == "call_in_test":  # the tester is waiting on the candidate's reply
        inner = "".join("    " + line + "\n" for line in attack_lines(attack).splitlines())
        program = head + "def f(x):\n" + inner + "    return x * x\n"
        return sb.Job(program=program, tests=SQUARE_TESTS, timeout=HANG_TIMEOUT)
    return sb.Job(program=head + attack_lines(attack) + "print(4)\n", mode="io", cases=[("", "4")],
                  timeout=HANG_TIMEOUT)


@pytest.mark.parametrize("mode", ["call_at_load", "call_in_test", "io"])
@pytest.mark.parametrize("attack", list(SIGNAL_ATTACKS))
def test_signalling_its_own_group_reaches_nothing_outside(pool, attack, mode):
    skip_unsafe(pool.isolation, attack)
    before = worker_pids(pool)
    start = time.monotonic()
    result = pool.run(graded_job(attack, mode))
    wall = time.monotonic() - start
    assert result.status == expected_status(pool.isolation, attack), result
    assert wall < HANG_TIMEOUT + SOON, result  # it ended at its own deadline: nothing held the worker
    assert_charged(result, wall, HANG_TIMEOUT)
    assert_workers_serve(pool, before)


# -- the python environment (exec mode) ------------------------------------------------------


@pytest.mark.parametrize("attack", list(SIGNAL_ATTACKS))
def test_tool_call_signalling_its_own_group(pool, attack, monkeypatch):
    skip_unsafe(pool.isolation, attack)
    monkeypatch.setattr(pe, "get_sandbox", lambda isolation: pool)
    before = worker_pids(pool)
    env = pe.make_python_env({}, timeout_s=HANG_TIMEOUT, isolation=pool.isolation)
    start = time.monotonic()
    run_hostile(env, "import os, signal, time\nprint('started', flush=True)\n" + attack_lines(attack),
                HANG_TIMEOUT + SOON)  # also: the next cell of the episode runs
    wall = time.monotonic() - start
    state = env.state
    assert state["statuses"] == [expected_status(pool.isolation, attack), "ok"], state
    assert state["outputs"][0].startswith("started\n"), state
    # Both calls are charged; the hostile one at least up to its deadline (or its attack).
    floor = HANG_TIMEOUT if state["statuses"][0] == "timeout" else PAUSE
    assert floor <= state["sandbox_seconds"] <= wall, state
    assert_workers_serve(pool, before)


def test_stopping_itself_uses_up_the_episode_time(pool, monkeypatch):
    """The reported bug: calls that SIGSTOP their group must count against the episode's
    time, so that the episode's limit ends them."""
    monkeypatch.setattr(pe, "get_sandbox", lambda isolation: pool)
    env = pe.make_python_env({}, timeout_s=1.0, episode_timeout_s=1.0, isolation=pool.isolation)
    stop = "import os, signal\nos.kill(0, signal.SIGSTOP)\nwhile True:\n    pass\n"
    env.step(cell(stop))
    start = time.monotonic()
    reply = env.step(cell(stop))
    assert body(reply) == "Time limit for this episode reached: the code was not run."
    assert time.monotonic() - start < SOON
    assert env.state["statuses"] == ["timeout", "refused"] and env.state["sandbox_seconds"] >= 1.0


# -- one episode's program against another's -------------------------------------------------

VICTIM_NAME = "rlvr" + secrets.token_hex(5)  # the victim's /proc/<pid>/comm (15 characters at most)
# Names itself, then waits for the SIGUSR1 the test sends once the attack is over. It blocks
# SIGUSR1 first (so that one sent any time later stays pending), then says so by ignoring
# SIGUSR2, which the test reads in /proc/<pid>/status (the blocked mask reads empty during
# sigwait). No exec: under isolation 'process' the interpreter may sit where the program's uid
# cannot read it.
VICTIM = (
    "import ctypes, signal\n"
    f"ctypes.CDLL(None).prctl(15, {VICTIM_NAME.encode()!r}, 0, 0, 0)\n"  # PR_SET_NAME
    "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})\n"
    "signal.signal(signal.SIGUSR2, signal.SIG_IGN)\n"
    "signal.sigwait({signal.SIGUSR1})\n"
    "print('alive')\n"
)


def waiting_victim(deadline: float) -> int:
    """The host pid of the victim, once it is waiting for its signal."""
    bit = 1 << (signal.SIGUSR2 - 1)
    while time.monotonic() < deadline:
        for entry in os.listdir("/proc"):
            try:
                if not entry.isdigit() or Path("/proc", entry, "comm").read_text().strip() != VICTIM_NAME:
                    continue
                status = Path("/proc", entry, "status").read_text()
            except OSError:
                continue
            ignored = next(int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigIgn:"))
            if ignored & bit:
                return int(entry)
        time.sleep(0.05)
    raise AssertionError("the victim program never started waiting")


def test_kill_all_does_not_reach_another_episodes_program(pool):
    if pool.isolation == "process" and not AS_ROOT:
        expected_skip("kill(-1) under isolation 'process' is contained only as root (see sandbox's docstring)")
    if pool.isolation == "process":
        uids = {w.uid for w in pool.workers}
        assert None not in uids and len(uids) == len(pool.workers)  # a uid of its own per worker
    victim: list[sb.Result] = []
    thread = threading.Thread(target=lambda: victim.append(
        pool.run(sb.Job(program=VICTIM, mode="io", cases=[("", "alive")], timeout=60.0))))
    thread.start()
    pid = 0
    try:
        pid = waiting_victim(time.monotonic() + 30)
        attacker = (
            "import os, signal, time\n"
            "for sig in (signal.SIGSTOP, signal.SIGKILL):\n"
            "    try:\n"
            "        os.kill(-1, sig)\n"
            "    except ProcessLookupError:\n"  # under bwrap: nothing else in its pid namespace
            "        pass\n"
            "os.kill(0, signal.SIGSTOP)\n"
            "time.sleep(60)\n"
        )
        result = pool.run(sb.Job(program=attacker, mode="io", cases=[("", "")], timeout=HANG_TIMEOUT))
        assert result.status == "timeout", result
    finally:
        if pid:
            os.kill(pid, signal.SIGUSR1)  # the attack is over: the victim may print and end
        thread.join(90)
    assert victim and victim[0].ok, victim


# -- a worker that dies mid-call ---------------------------------------------------------------


def test_a_call_whose_worker_dies_is_charged_its_wall_time(monkeypatch):
    one = sb.Sandbox("bwrap", workers=1)
    try:
        one.start()
        monkeypatch.setattr(pe, "get_sandbox", lambda isolation: one)
        env = pe.make_python_env({}, timeout_s=60.0, episode_timeout_s=600.0)
        thread = threading.Thread(target=env.step, args=(cell(VICTIM),))  # it waits for a signal never sent
        thread.start()
        try:
            waiting_victim(time.monotonic() + 30)
            seen = time.monotonic()  # the call was running by now
            time.sleep(0.5)
            killed = time.monotonic()
            os.killpg(one.workers[0].proc.pid, signal.SIGKILL)  # the whole worker, from outside
        finally:
            thread.join(90)
        assert env.state["statuses"] == ["crashed"], env.state
        assert env.state["sandbox_seconds"] >= killed - seen, env.state
        assert "the sandbox worker died during the run" in env.state["outputs"][0]
        start = time.monotonic()
        assert body(env.step(cell("print(6 * 7)\n"))) == "42"  # a fresh worker
        assert time.monotonic() - start < SOON + 60  # includes starting that worker
    finally:
        one.close()


CONTROL_OUTPUT = (
    "import sys\n"
    "sys.stdout.write('a\\x00b\\x1b[31mred\\x1b[0m\\r\\nover\\rwrite\\x85\\x7f\\n')\n"
    "sys.stdout.flush()\n"
    "raise ValueError('\\x1b[2Jcleared\\x00')\n"
)


def test_tool_output_and_messages_are_escaped(box, monkeypatch):  # noqa: F811
    result = box.run(sb.Job(program=CONTROL_OUTPUT, mode="exec", timeout=5.0))
    assert result.status == "error", result
    assert result.output == "a\\x00b\\x1b[31mred\\x1b[0m\nover\\rwrite\\x85\\x7f\n"
    assert result.message == "ValueError: \\x1b[2Jcleared\\x00"
    monkeypatch.setattr(pe, "get_sandbox", lambda isolation: box)
    env = pe.make_python_env({})
    reply = env.step(cell(CONTROL_OUTPUT))
    assert body(reply) == "a\\x00b\\x1b[31mred\\x1b[0m\nover\\rwrite\\x85\\x7f\nValueError: \\x1b[2Jcleared\\x00"
    assert env.state["outputs"] == [body(reply)]  # what rewards and logs see, too


def test_graded_failure_messages_are_escaped(box):  # noqa: F811
    result = box.run(sb.Job(program="import sys\nsys.stderr.write('\\x1b[2J\\x00')\nraise SystemExit(3)\n",
                            mode="io", cases=[("", "")], timeout=5.0))
    assert result.status == "error" and "\\x1b[2J\\x00" in result.message, result
    assert not any(ord(c) < 0x20 for c in result.message), result
