"""The ``code`` reward end to end: the checks that need no process, socket or model (the unit ring;
the others: tests/integration/test_plugins_code_reward.py)."""

from __future__ import annotations

import pytest
from rlvr_plugins import code_reward as cr

from rlvr import RlvrError


def reward(completions, **columns):
    n = len(completions)
    return cr.code_reward(["<prompt>"] * n, completions, [[]] * n, **columns)


def test_registers_the_code_reward():
    registered = {}
    cr.rlvr_register_rewards(
        lambda name, fn, description=None, gold=None: registered.update({name: (fn, description, gold)}))
    assert registered["code"][0] is cr.code_reward and registered["code"][1]
    assert set(registered["code"][2]) == {"test", "test_list", "io_tests"}  # not prompt/entry_point/setup


def test_options_are_checked():
    with pytest.raises(RlvrError):
        reward(["x"], test_list=[["assert True"]], isolation="none")
    with pytest.raises(RlvrError):
        reward(["x"], test_list=[["assert True"]], timeout=0)
    with pytest.raises(RlvrError):
        reward(["x"], test_list=[["assert True"]], memory_mb=1)


def test_extract_code():
    assert cr.extract_code("plain text") == "plain text"
    assert cr.extract_code("```python\nx = 1\n```") == "x = 1\n"
    assert cr.extract_code("```\nx = 1\n```") == "x = 1\n"
    assert cr.extract_code("intro\n```python\ndef f():\n    pass\n") == "def f():\n    pass\n"  # cut off
    two = "```python\nprint(f(1))\n```\nand\n```python\ndef f(x):\n    return x\n```"
    assert cr.extract_code(two, "f") == "def f(x):\n    return x\n"
    assert cr.extract_code("```bash\nls\n```\n```python\nx = 2\n```") == "x = 2\n"
