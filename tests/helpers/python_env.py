"""Cells of the ``python`` environment (rlvr_plugins.python_env) as the policy writes them, and
its replies read back: shared by tests/integration/test_plugins_python_env.py and test_plugins_sandbox_signals.py."""

import time

from rlvr_plugins import python_env as pe

from rlvr import Reply


def cell(code: str, before: str = "Let me compute.\n") -> str:
    """A policy turn that ends at the closing fence of a python block, as the stop string cuts it."""
    return f"{before}```python\n{code}```\n"


def body(reply: Reply) -> str:
    """The text inside the reply's output block."""
    assert reply.text.startswith("```output\n") and reply.text.endswith("\n```\n"), reply.text
    return reply.text[len("```output\n"):-len("\n```\n")]


def run_hostile(env: pe.PythonEnv, code: str, deadline: float) -> str:
    """Send ``code`` as a cell: the reply comes within ``deadline`` seconds, and the next cell of
    the same episode (which replays it if it ran to its end) still runs."""
    start = time.monotonic()
    reply = env.step(cell(code))
    assert time.monotonic() - start < deadline, reply
    assert body(env.step(cell("print(6 * 7)\n"))) == "42", env.state
    return body(reply)
