"""The ``python`` environment: its turn handling, its cells in the real sandbox, and the hostile
programs of test_plugins_sandbox.py sent as tool calls (each gets a reply within its deadline, nothing
escapes or stays behind, and the next cell of the same episode still runs)."""

from __future__ import annotations

import inspect
import os
import re
import socket
import time

import pytest
from rlvr_plugins import python_env as pe
from rlvr_plugins import sandbox as sb
from rlvr_plugins.sandbox import pool as sb_pool

from rlvr import Reply, RlvrError
from rlvr.host.options import option_checker
from rlvr.host.registry import load_registry
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


def cut_at_stop(generation: str) -> str:
    """What a sampler returns for ``generation`` with the environment's stop strings (plain
    substrings; the stop string stays in the turn)."""
    hits = [(generation.find(s), s) for s in pe.STOP if s in generation]
    if not hits:
        return generation
    at, stop = min(hits)
    return generation[: at + len(stop)]


# -- registration and options ---------------------------------------------------------


def test_registered_from_its_entry_point():
    spec = load_registry().environment("python")
    assert spec.fn is pe.make_python_env and spec.plugin == "python_env"


def test_options_are_checked_from_their_annotations():
    params = inspect.signature(pe.make_python_env).parameters.values()
    defaults = {p.name: p.default for p in params if p.kind is p.KEYWORD_ONLY}
    checker = option_checker("python", pe.make_python_env, defaults, kind="environment")
    assert checker.check({"timeout_s": 2, "isolation": "process", "max_calls": 3}) == {
        "timeout_s": 2.0, "isolation": "process", "max_calls": 3}
    for bad in ({"isolation": "none"}, {"timeout_s": 0}, {"episode_timeout_s": -1}, {"max_output_chars": 5.5},
                {"memory_mb": 16}, {"max_calls": 0}, {"timeout": 3}):
        with pytest.raises(RlvrError):
            checker.check(bad)
    env = pe.make_python_env({"question": "q"}, timeout_s=2, max_calls=3)
    assert (env.timeout_s, env.max_calls, env.isolation, env.stop) == (2.0, 3, "bwrap", pe.STOP)


# -- stop strings and fences (no sandbox) ---------------------------------------------------


def test_stop_ends_the_turn_at_the_closing_fence_not_the_opening_one():
    generation = "Let me compute.\n```python\nx = 6 * 7\nprint(x)\n```\n```output\n42\n```\nSo 42."
    assert cut_at_stop(generation) == "Let me compute.\n```python\nx = 6 * 7\nprint(x)\n```\n"
    for opening in ("```python\n", "Compute:\n```python\n", "```py\n", "\n```python3 \n", "```Python\nx = 1\n"):
        assert cut_at_stop(opening) == opening  # no stop inside an opening fence
    assert cut_at_stop("```python\n```\nrest") == "```python\n```\n"  # an empty block closes too


def test_fenced_blocks():
    text = "a\n```python\nx = 1\n```\nb\n```bash\nls\n```\n````py\ny = '```'\n```\nz\n````\n```\nopen"
    blocks = pe.fenced_blocks(text)
    assert [(b.lang, b.code, b.closed) for b in blocks] == [
        ("python", "x = 1\n", True), ("bash", "ls\n", True), ("py", "y = '```'\n```\nz\n", True), ("", "open\n", False)]
    assert text[blocks[0].end:].startswith("b\n")
    assert pe.fenced_blocks("no code here") == []
    assert pe.fenced_blocks("```python\nprint(1)\n```")[0].end == len("```python\nprint(1)\n```")


class NoSandbox:
    def run(self, job):
        raise AssertionError(f"nothing should run: {job.program!r}")


@pytest.fixture
def no_sandbox(monkeypatch):
    monkeypatch.setattr(pe, "get_sandbox", lambda isolation: NoSandbox())


def test_a_turn_without_code_ends_the_episode(no_sandbox):
    env = pe.make_python_env({})
    assert env.step("The answer is \\boxed{42}.") == Reply(done=True)
    assert env.state["cells"] == [] and env.state["tool_calls"] == 0


def test_an_unclosed_block_does_not_run(no_sandbox):
    env = pe.make_python_env({})
    assert env.step("```python\nprint(1)\n") == Reply(done=True)  # the policy ended inside its block
    assert env.step("```python\n") == Reply(done=True)
    assert env.state["cells"] == []


def test_blocks_in_other_languages_are_not_run(no_sandbox):
    env = pe.make_python_env({})
    # The stop fired at the end of a bash block: the policy goes on, nothing runs.
    assert env.step("First the shell:\n```bash\nrm -rf /\n```\n") == Reply()
    # A bare opening fence is where the stop fires too: the policy goes on.
    assert env.step("Then:\n```\n") == Reply()
    assert env.step("plain text\n```\n") == Reply()
    assert env.step("Done: 42.") == Reply(done=True)
    assert env.state["cells"] == []


def test_a_python_block_followed_by_text_is_an_answer(no_sandbox):
    env = pe.make_python_env({})  # a sampler that did not stop: the model went on without the output
    assert env.step("```python\nprint(1)\n```\nSo the answer is 1.") == Reply(done=True)


class ScriptedSandbox:
    """Records jobs and answers with the given statuses (the real one is tested below)."""

    def __init__(self, statuses, elapsed=0.5):
        self.statuses, self.elapsed, self.jobs = list(statuses), elapsed, []

    def run(self, job):
        self.jobs.append(job)
        status = self.statuses.pop(0)
        return sb.Result(status, int(status == "ok"), 1, "boom" if status != "ok" else "", self.elapsed, "bwrap",
                         output=f"out{len(self.jobs)}\n", output_bytes=5)


def test_replay_budget_and_limits(monkeypatch):
    scripted = ScriptedSandbox(["ok", "error", "timeout", "crashed", "exited", "output_limit", "ok", "ok"], elapsed=2.0)
    monkeypatch.setattr(pe, "get_sandbox", lambda isolation: scripted)
    env = pe.make_python_env({}, timeout_s=3.0, episode_timeout_s=15.0)
    replies = [env.step(cell(f"c{i}\n")) for i in range(9)]
    setups = [job.setup for job in scripted.jobs]
    # Earlier cells are replayed when they ran to their end or to an exception only.
    assert setups[:7] == [[], ["c0\n"], ["c0\n", "c1\n"], ["c0\n", "c1\n"], ["c0\n", "c1\n"], ["c0\n", "c1\n"],
                          ["c0\n", "c1\n"]]
    assert {job.seed for job in scripted.jobs} == {env.seed} and all(job.mode == "exec" for job in scripted.jobs)
    assert [job.timeout for job in scripted.jobs] == [3.0] * 7 + [1.0]  # 14 s spent of 15: the rest
    assert len(scripted.jobs) == 8
    assert "Time limit for this episode reached" in body(replies[8])
    assert [r.metrics for r in replies[:3]] == [
        {"tool_calls": 1, "tool_errors": 0, "tool_timeouts": 0},
        {"tool_calls": 1, "tool_errors": 1, "tool_timeouts": 0},
        {"tool_calls": 1, "tool_errors": 1, "tool_timeouts": 1}]
    state = env.state
    assert state["statuses"] == ["ok", "error", "timeout", "crashed", "exited", "output_limit", "ok", "ok", "refused"]
    assert (state["tool_calls"], state["tool_errors"], state["tool_timeouts"]) == (9, 6, 1)
    assert state["sandbox_seconds"] == 16.0
    env = pe.make_python_env({}, max_calls=1)
    scripted.statuses = ["ok"]
    env.step(cell("a = 1\n"))
    assert "Tool call limit reached (1 per episode)" in body(env.step(cell("print(a)\n")))


# -- cells in the real sandbox -----------------------------------------------------------


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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_replays_draw_the_same_random_numbers(tool_box):
    env = pe.make_python_env({})
    drawn = body(env.step(cell("import random\nr = random.random()\nprint(r)\n")))
    assert body(env.step(cell("print(r)\nprint(random.random() != r)\n"))) == f"{drawn}\nTrue"


@pytest.mark.slow
def test_long_output_is_truncated_with_a_marker(tool_box):
    env = pe.make_python_env({}, max_output_chars=50)
    reply = env.step(cell("print('é' * 10000)\nprint('done')\n"))
    text = body(reply)
    assert text == "é" * 50 + "\n[... output truncated: the first 50 characters shown]"
    assert reply.metrics["tool_errors"] == 0 and env.state["statuses"] == ["ok"]  # truncation is no failure
    text = body(env.step(cell("print('short')\n")))
    assert text == "short"


@pytest.mark.slow
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


@pytest.mark.slow
def test_process_isolation_level_runs_cells():
    env = pe.make_python_env({}, isolation="process")
    env.step(cell("n = 20\n"))
    assert body(env.step(cell("print(sum(range(n)))\n"))) == "190"


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_parent_environment_is_not_visible(tool_box):
    assert os.environ[SECRET_ENV] == SECRET_VALUE  # set before the pool started
    env = pe.make_python_env({})
    probe = f"import os\nprint(repr(f(0)), os.environ.get({SECRET_ENV!r}, 'missing'))\n"
    text = run_hostile(env, READ_PARENT_ENV + probe, 5.0 + 5)
    assert text == "'' missing"
    assert_clean(tool_box)


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
@pytest.mark.parametrize("escape", list(ORPHAN_ESCAPES))
def test_orphans_are_killed(tool_box, escape):
    env = pe.make_python_env({})
    run_hostile(env, orphan_program(escape) + "print('left them')\n", 5.0 + 5)
    assert env.state["outputs"][:2] == ["left them", "42"]
    assert_clean(tool_box)  # also those the replay in the second cell left


@pytest.mark.slow
def test_nothing_persists_between_episodes(tool_box):
    """Files and globals of one episode are not in the next (scratch space is emptied)."""
    first = pe.make_python_env({})
    first.step(cell("open('/tmp/note', 'w').write('mine')\nsecret = 1\n"))
    other = pe.make_python_env({})
    probe = "import os\nprint(os.listdir('/tmp'), 'secret' in globals())\n"
    assert body(other.step(cell(probe))) == "[] False"
    assert body(first.step(cell(probe))) == "['note'] True"  # its own replay recreated them


def test_tool_call_reward_pays_for_a_cell_that_ran_and_printed():
    from rlvr_plugins.environment_reward import tool_call

    def state(*cells):  # the python environment's state: statuses and outputs per cell
        return {"cells": ["..."] * len(cells), "statuses": [s for s, _ in cells], "outputs": [o for _, o in cells]}

    states = [state(), state(("ok", "42")), state(("error", "ValueError: x")), state(("ok", "")),
              state(("timeout", ""), ("ok", "7")), {"reward": 1.0}, None]
    scores = tool_call([""] * 7, [""] * 7, [[1]] * 7, env_state=states)
    assert [s.value for s in scores] == [0.0, 1.0, 0.0, 0.0, 1.0, None, None]
    assert scores[4].info == {"calls": 2, "ran": 1}
    lenient = tool_call([""], [""], [[1]], env_state=[state(("ok", ""))], require_output=False)
    assert lenient[0].value == 1.0
    assert [s.value for s in tool_call([""], [""], [[1]])] == [None]  # no environment in the recipe
    spec = load_registry().rewards["tool_call"]
    assert spec.fn is tool_call and spec.gold_columns == ()
