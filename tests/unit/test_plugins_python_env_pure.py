"""The ``python`` environment: the checks that need no process, socket or model (the unit ring; the
others: tests/integration/test_plugins_python_env.py)."""

from __future__ import annotations

import inspect

import pytest
from rlvr_plugins import python_env as pe
from rlvr_plugins import sandbox as sb

from rlvr import Reply, RlvrError
from rlvr.host.options import option_checker
from rlvr.host.registry import load_registry
from helpers.python_env import body, cell


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
