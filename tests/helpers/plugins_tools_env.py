"""What tests/e2e/test_plugins_tools_env_runs.py, tests/integration/test_plugins_tools_env_live.py, tests/unit/test_plugins_tools_env.py share."""

from __future__ import annotations

import json
from contextlib import contextmanager


TOOLS_SOURCE = '''
import os
import time

TABLE = {"alpha": 17, "beta": 42}


def lookup(key: str) -> int:
    """The value stored under a key.

    Args:
        key: the key
    """
    return TABLE[key]


def nap(seconds: float) -> str:
    """Sleeps."""
    time.sleep(seconds)
    return "awake"


def spin() -> int:
    """Never returns."""
    while True:
        pass


def odd() -> object:
    """Returns what JSON cannot hold."""
    return {1, 2}


def nan() -> float:
    """Returns NaN."""
    return float("nan")


def big(n: int) -> str:
    """A long string."""
    return "x" * n


def chatty() -> int:
    """Prints a lot, returns 7."""
    for _ in range(100000):
        print("noise " * 20)
    return 7


def leave() -> int:
    """Ends its process."""
    os._exit(3)


def hog() -> int:
    """Takes all the memory it can."""
    blocks = []
    while True:
        blocks.append(bytearray(64 << 20))


def read(path: str) -> str:
    """Reads a file: a naive tool, trusting its argument.

    Args:
        path: the file
    """
    with open(path) as handle:
        return handle.read()
'''


@contextmanager
def tools_source_as(folder, name: str):
    """TOOLS_SOURCE written to ``folder`` as module ``name``, imported for the block."""
    import importlib
    import sys

    (folder / f"{name}.py").write_text(TOOLS_SOURCE)
    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop(name, None)


def call(name: str, **arguments) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'
