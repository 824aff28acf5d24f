"""What the tests share besides fixtures (those are in tests/conftest.py). A test module imports
from here, never from another test module or from conftest.py (tests/unit/test_suite_rules.py checks).

This module: run the installed ``rlvr`` command, wait for a condition, check a one-line error.
Its submodules serve the tests of one part each:

- ``attacks``: hostile programs for the sandbox, run again as tool calls by the python environment;
- ``python_env``: cells of the ``python`` environment, sent and read back;
- ``runs``: ``rlvr train`` end to end with a tiny model, and the processes a run leaves;
- ``learner``: the learner on the recorded reference batches with a plain-torch optimizer;
- ``recipes``: the smallest valid recipe;
- ``docs``: the fenced blocks of a markdown file, and recipes among them;
- ``loopback``: a JSON service on loopback that answers as a test says (the ``http`` and ``judge`` rewards');
- ``ordinary_user``: a test's function run again as an unused uid, when the suite runs as root;
- ``skips``: the rule ``make test`` runs under (``--no-skips``): a skip is a failure unless this
  machine explains it.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RLVR = str(Path(sys.executable).parent / "rlvr")

# How long a test waits for something that must happen (a process exits, a count settles) before
# it calls it a failure: long, because with both cores busy the kernel and Python are slow to get
# there; a test that passes returns as soon as the condition holds.
SETTLE_S = 60.0


def wait_until(condition, timeout_s: float = SETTLE_S, interval_s: float = 0.05) -> bool:
    """Poll ``condition()`` until it is true (True) or ``timeout_s`` passes (False)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval_s)
    return True


def run_rlvr(*args, env=None, cwd=None, timeout=900):
    """Run the installed `rlvr` command; returns CompletedProcess with text output."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([RLVR, *map(str, args)], capture_output=True, text=True, env=full_env, cwd=cwd, timeout=timeout)


def one_line_error(out, message):
    """``out`` (a finished ``rlvr`` run) failed as bad input must: status 2, one line holding
    ``message``, no traceback."""
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr[-2000:])
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr[-2000:]
    assert message in lines[0], lines[0]
