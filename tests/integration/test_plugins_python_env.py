"""The ``python`` environment: its turn handling, its cells in the real sandbox, and the hostile
programs of test_plugins_sandbox.py sent as tool calls (each gets a reply within its deadline, nothing
escapes or stays behind, and the next cell of the same episode still runs)."""

from __future__ import annotations

import os
import re
import socket
import time

import pytest
from rlvr_plugins import python_env as pe
from rlvr_plugins import sandbox as sb
from rlvr_plugins.sandbox import pool as sb_pool

from rlvr import Reply
from helpers.attacks import (
    FLOOD_WRITERS,
    FORK_BOMB,
    HANG_TIMEOUT,
    IGNORE_SIGNALS,
    MEMORY_BOMB,
    MEMORY_BOMB_PROCESSES,
    ORPHAN_ESCAPES,
    READ_PARENT_ENV,
    SECRET_ENV,
    SECRET_VALUE,
    SIGNAL_EVERYTHING,
    SLEEP_FOREVER,
    assert_clean,
    connecting_program,
    flood_program,
    listening_socket,
    orphan_program,
    outside_targets,
    writing_program,
)
from helpers.python_env import body, cell, run_hostile


@pytest.fixture(scope="module")
def tool_box(box):
    """The sandbox fixture's pool, as the process-wide one the environment uses."""
    before = sb_pool._SHARED.get("bwrap")
    sb_pool._SHARED["bwrap"] = box
    yield box
    if before is None:
        sb_pool._SHARED.pop("bwrap", None)
    else:
        sb_pool._SHARED["bwrap"] = before


def test_cells_share_state_and_return_their_output(tool_box):
    env = pe.make_python_env({})
    first = env.step(cell("x = 41\nprint('first')\n"))
    assert body(first) == "first" and first.metrics == {"tool_calls": 1, "tool_errors": 0, "tool_timeouts": 0}
    second = env.step(cell("import sys\nprint(x + 1)\nprint('to stderr', file=sys.stderr)\nprint('end')\n"))
    assert body(second) == "42\nto stderr\nend"  # the first cell's output is not repeated
    assert env.step(cell("print()\n", before="")).text == "```output\n\n```\n"
    assert env.step("```python\nprint(x)\n```").text == "\n```output\n41\n```\n"  # a turn without the newline
    state = env.state
    assert state["cells"] == ["x = 41\nprint('first')\n",
                              "import sys\nprint(x + 1)\nprint('to stderr', file=sys.stderr)\nprint('end')\n",
                              "print()\n", "print(x)\n"]
    assert state["outputs"][:2] == ["first", "42\nto stderr\nend"] and state["statuses"] == ["ok"] * 4
    assert (state["tool_calls"], state["tool_errors"]) == (4, 0) and state["sandbox_seconds"] > 0
    assert env.step("So x + 1 = \\boxed{42}.") == Reply(done=True)


def test_exceptions_show_their_last_line_and_keep_what_ran(tool_box):
    env = pe.make_python_env({})
    reply = env.step(cell("y = 5\nprint('before')\nraise ValueError('bad value')\nz = 1\n"))
    assert body(reply) == "before\nValueError: bad value" and reply.metrics["tool_errors"] == 1
    assert body(env.step(cell("print(y)\nprint('z' in globals())\n"))) == "5\nFalse"
    assert body(env.step(cell("def f(:\n    pass\n"))) == "SyntaxError: invalid syntax (line 1)"
    assert body(env.step(cell("import sys\nsys.exit(2)\n"))) == "SystemExit: 2"
    assert body(env.step(cell("print(input())\n"))) == "EOFError: EOF when reading a line"
    assert body(env.step(cell("print(y * 2)\n"))) == "10"
    assert env.state["statuses"] == ["error", "ok", "error", "error", "error", "ok"]


def test_replays_draw_the_same_random_numbers(tool_box):
    env = pe.make_python_env({})
    drawn = body(env.step(cell("import random\nr = random.random()\nprint(r)\n")))
    assert body(env.step(cell("print(r)\nprint(random.random() != r)\n"))) == f"{drawn}\nTrue"


def test_long_output_is_truncated_with_a_marker(tool_box):
    env = pe.make_python_env({}, max_output_chars=50)
    reply = env.step(cell("print('é' * 10000)\nprint('done')\n"))
    text = body(reply)
    assert text == "é" * 50 + "\n[... output truncated: the first 50 characters shown]"
    assert reply.metrics["tool_errors"] == 0 and env.state["statuses"] == ["ok"]  # truncation is no failure
    text = body(env.step(cell("print('short')\n")))
    assert text == "short"


def test_timeouts_per_call_and_per_episode(tool_box):
    env = pe.make_python_env({}, timeout_s=1.0, episode_timeout_s=1.8)
    start = time.monotonic()
    reply = env.step(cell("import time\nprint('started', flush=True)\ntime.sleep(30)\n"))
    assert time.monotonic() - start < 1.0 + 5
    assert body(reply) == "started\nTimeout: the code did not finish within 1 seconds and was stopped."
    assert reply.metrics == {"tool_calls": 1, "tool_errors": 1, "tool_timeouts": 1}
    # The timed-out cell is not replayed: this one runs at once, within the time that is left.
    assert body(env.step(cell("print('quick')\n"))) == "quick"
    reply = env.step(cell("while True:\n    pass\n"))
    assert re.fullmatch(r"Timeout: the code did not finish within 0\.\d+ seconds and was stopped\.", body(reply))
    start = time.monotonic()
    reply = env.step(cell("print('never')\n"))
    assert body(reply) == "Time limit for this episode reached: the code was not run."
    assert time.monotonic() - start < 0.5 and reply.metrics["tool_errors"] == 1
    assert env.state["statuses"] == ["timeout", "ok", "timeout", "refused"]


def test_process_isolation_level_runs_cells():
    env = pe.make_python_env({}, isolation="process")
    env.step(cell("n = 20\n"))
    assert body(env.step(cell("print(sum(range(n)))\n"))) == "190"


def test_sandbox_exec_mode(tool_box):
    """The sandbox side: setup cells run quietly and past their exceptions, the kept output is
    cut at a character boundary, a program that ends its own process is told apart."""
    run = lambda program, **kw: tool_box.run(sb.Job(program=program, mode="exec", timeout=5.0, **kw))  # noqa: E731
    setup = ["a = 1\nprint('quiet')", "raise KeyError('x')", "import sys; sys.exit(1)", "b = 2"]
    result = run("print(a, b)", setup=setup)
    assert (result.status, result.ok, result.output, result.output_bytes) == ("ok", True, "1 2\n", 4)
    assert result.message == ""
    result = run("print('é' * 100)", keep_output=11)
    assert (result.status, result.output, result.output_bytes) == ("ok", "é" * 5, 201)
    result = run("import os\nprint('bye', flush=True)\nos._exit(0)\nprint('never')")
    assert (result.status, result.output, result.ok) == ("exited", "bye\n", False)
    assert result.message == "the program ended the process itself (exit code 0)"
    result = run("class Oops(Exception):\n    pass\nraise Oops('no')")
    assert (result.status, result.message, result.passed, result.total) == ("error", "Oops: no", 0, 1)


# -- hostile programs as tool calls ---------------------------------------------------------


HANG = {"timeout_s": HANG_TIMEOUT}
RESOURCE_ABUSE = {  # name: (cell, environment options, the statuses it may end with)
    "fork_bomb": (FORK_BOMB, HANG, {"timeout", "crashed"}),
    "memory_bomb": (MEMORY_BOMB, {"memory_mb": 256}, {"error"}),
    "memory_bomb_processes": (MEMORY_BOMB_PROCESSES, {"memory_mb": 256, "timeout_s": HANG_TIMEOUT + 1},
                              {"timeout", "crashed"}),
    "infinite_loop_ignoring_signals": (IGNORE_SIGNALS + "while True:\n    pass\n", HANG, {"timeout"}),
    "sleeping_forever": (SLEEP_FOREVER, HANG, {"timeout"}),
}


@pytest.mark.parametrize("name", list(RESOURCE_ABUSE))
def test_resource_abuse(tool_box, name):
    code, options, statuses = RESOURCE_ABUSE[name]
    env = pe.make_python_env({}, **options)
    text = run_hostile(env, code, options.get("timeout_s", 5.0) + 10)
    assert env.state["statuses"][0] in statuses, (env.state, text)
    if name == "memory_bomb":
        assert text == "MemoryError"
    assert env.state["statuses"][1] == "ok", env.state
    assert_clean(tool_box)


@pytest.mark.parametrize("stream", list(FLOOD_WRITERS))
def test_output_flood(tool_box, stream):
    env = pe.make_python_env({}, max_output_chars=200)
    text = run_hostile(env, flood_program(stream), 5.0 + 5)
    assert env.state["statuses"][0] == "output_limit"
    shown, marker, note = text.split("\n")[-3:]
    assert len(shown) == 200 and set(shown) <= set("xyz") and marker.startswith("[... output truncated")
    assert note == f"Output limit: the code printed over {pe.MAX_OUTPUT_BYTES} bytes and was stopped."
    assert env.state["statuses"][1] == "ok"  # the flood was not replayed before it
    assert_clean(tool_box)


def test_writes_outside_do_not_reach_the_host(tool_box, tmp_path):
    targets, victim, host_tmp = outside_targets(tmp_path)
    env = pe.make_python_env({})
    text = run_hostile(env, writing_program(targets) + "print(f(0))\n", 5.0 + 5)
    assert text == str([str(host_tmp)])  # the sandbox's own /tmp only
    assert victim.read_text() == "original"
    for target in targets:
        if target != victim:
            assert not target.exists(), target
    assert_clean(tool_box)


def test_parent_environment_is_not_visible(tool_box):
    assert os.environ[SECRET_ENV] == SECRET_VALUE  # set before the pool started
    env = pe.make_python_env({})
    probe = f"import os\nprint(repr(f(0)), os.environ.get({SECRET_ENV!r}, 'missing'))\n"
    text = run_hostile(env, READ_PARENT_ENV + probe, 5.0 + 5)
    assert text == "'' missing"
    assert_clean(tool_box)


def test_no_network(tool_box):
    listener = listening_socket()
    try:
        env = pe.make_python_env({})
        assert run_hostile(env, connecting_program(listener.getsockname()[1]) + "print(f(0))\n", 5.0 + 5) == "blocked"
        with pytest.raises(socket.timeout):
            listener.accept()
    finally:
        listener.close()
    assert_clean(tool_box)


def test_signalling_the_parent_and_everything_else(tool_box):
    workers_before = {w.name: w.proc.pid for w in tool_box.workers}
    env = pe.make_python_env({})
    run_hostile(env, SIGNAL_EVERYTHING + "print('still here')\n", 5.0 + 5)
    # SIGKILL to itself is ignored (the cell is its pid namespace's init); a fault is not.
    text = run_hostile(env, "import os, signal, ctypes\nos.kill(os.getpid(), signal.SIGKILL)\nctypes.string_at(0)\n",
                       5.0 + 5)
    assert text.startswith("Crashed: the code was killed (killed by SIGSEGV)"), text
    assert env.state["statuses"] == ["ok", "ok", "crashed", "ok"], env.state
    assert {w.name: w.proc.pid for w in tool_box.workers} == workers_before  # no worker was taken down
    assert_clean(tool_box)


@pytest.mark.parametrize("escape", list(ORPHAN_ESCAPES))
def test_orphans_are_killed(tool_box, escape):
    env = pe.make_python_env({})
    run_hostile(env, orphan_program(escape) + "print('left them')\n", 5.0 + 5)
    assert env.state["outputs"][:2] == ["left them", "42"]
    assert_clean(tool_box)  # also those the replay in the second cell left


def test_nothing_persists_between_episodes(tool_box):
    """Files and globals of one episode are not in the next (scratch space is emptied)."""
    first = pe.make_python_env({})
    first.step(cell("open('/tmp/note', 'w').write('mine')\nsecret = 1\n"))
    other = pe.make_python_env({})
    probe = "import os\nprint(os.listdir('/tmp'), 'secret' in globals())\n"
    assert body(other.step(cell(probe))) == "[] False"
    assert body(first.step(cell(probe))) == "['note'] True"  # its own replay recreated them
