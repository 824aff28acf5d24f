"""benchmarks/bench_trl.py without training anything: the checks that start worker pools or loopback
services, or build a tiny model in-process (the integration ring; the others:
tests/unit/test_benchmarks_trl.py)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_trl.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_trl", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_only_accepts_the_server_side():
    # --steps 0 stops it after parsing: an unknown side would fail earlier, as an invalid choice
    done = subprocess.run([sys.executable, str(BENCH), "--only", "rlvr-server", "--steps", "0"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "need --steps >= 1" in done.stderr and "invalid choice" not in done.stderr


def test_tree_memory_counts_a_child_in_its_own_session(bench):
    """rlvr's sampler runs setsid (a session of its own) but stays the trainer's child."""
    code = ("import subprocess, sys, time\n"
            "subprocess.Popen([sys.executable, '-c', 'b = bytes([120]) * (200 * 2**20); import time; time.sleep(30)'],"
            " start_new_session=True)\n"
            "time.sleep(30)\n")
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.time() + 20
        while time.time() < deadline and not psutil.Process(parent.pid).children():
            time.sleep(0.05)
        (child,) = psutil.Process(parent.pid).children()
        while time.time() < deadline and child.memory_info().rss < 200 * 2**20:
            time.sleep(0.05)
        assert os.getsid(child.pid) == child.pid != os.getsid(parent.pid)  # the child leads a session of its own
        rss, _ = bench.tree_memory(parent.pid)
        assert rss >= psutil.Process(parent.pid).memory_info().rss + 200 * 2**20
    finally:
        for proc in psutil.Process(parent.pid).children(recursive=True):
            proc.kill()
        parent.kill()
        parent.wait()
