"""Tests of rlvr.kit.workers.DeadlinePool: results, errors, hard time limits, threads, shutdown.

Worker functions are mostly stdlib callables; ``worker_pid`` is imported by the
workers from this module (they inherit the parent's sys.path).
"""

from __future__ import annotations

import itertools
import json
import math
import operator
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rlvr.kit.workers import DeadlinePool, PoolBroken, Result  # noqa: E402

# sum() over a huge iterator runs inside one C call: no Python signal handler can stop it,
# only killing the process can. This is the case the pool exists for.
C_LOOP = itertools.repeat(1, 10**13)


def worker_pid(_item) -> int:
    return os.getpid()


@pytest.fixture(scope="module")
def pool():
    p = DeadlinePool(2)
    yield p
    p.shutdown()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still "exists"; look at its state.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_results_in_order(pool):
    results = pool.map(operator.neg, range(200))
    assert [r.value for r in results] == [-i for i in range(200)]
    assert all(r.ok and r.status == "ok" and r.error is None for r in results)


def test_function_by_name(pool):
    results = pool.map("math:factorial", [0, 5, 10])
    assert [r.value for r in results] == [1, 120, 3628800]


def test_bad_function_name_is_an_error_result(pool):
    (result,) = pool.map("math", [1])
    assert result.status == "error" and "module:function" in result.error


def test_exception_becomes_error_result(pool):
    results = pool.map(math.sqrt, [4.0, -1.0, 9.0])
    assert [r.status for r in results] == ["ok", "error", "ok"]
    assert results[0].value == 2.0 and results[2].value == 3.0
    assert "ValueError" in results[1].error and "math domain error" in results[1].error


def test_unpicklable_item_is_an_error_result(pool):
    results = pool.map(operator.neg, [1, threading.Lock(), 3])
    assert [r.status for r in results] == ["ok", "error", "ok"]
    assert "could not be sent" in results[1].error


def test_unpicklable_result_is_an_error_result(pool):
    # iter(list) returns a list_iterator, which pickles; a generator does not.
    results = pool.map(eval, ["(x for x in ())", "1 + 1"])
    assert results[0].status == "error" and "could not be sent back" in results[0].error
    assert results[1].value == 2


def test_timeout_kills_worker_stuck_in_c_and_others_continue():
    with DeadlinePool(2) as p:
        p.start()
        p.map(operator.neg, [0, 1])  # both workers up
        t0 = time.monotonic()
        futures = [p.submit(sum, C_LOOP, timeout=1.0)]
        futures += [p.submit(time.sleep, 0.05, timeout=1.0) for _ in range(10)]
        results = [f.result() for f in futures]
        elapsed = time.monotonic() - t0
        assert results[0].status == "timeout" and "1 s" in results[0].error
        assert 0.95 <= results[0].seconds < 2.0
        assert all(r.ok for r in results[1:])
        # The ten short items ran on the other worker meanwhile: about 1 s in total.
        assert elapsed < 2.5, elapsed
        # The killed worker was replaced and the pool keeps working.
        assert [r.value for r in p.map(operator.neg, range(20))] == [-i for i in range(20)]
        stats = p.stats()
        assert stats["killed"] == 1 and stats["started"] == 3 and stats["timeout"] == 1


def test_many_timeouts_do_not_block_each_other():
    with DeadlinePool(2) as p:
        p.start()
        t0 = time.monotonic()
        results = p.map(time.sleep, [30, 30, 30, 30], timeout=0.5)
        elapsed = time.monotonic() - t0
        assert [r.status for r in results] == ["timeout"] * 4
        # Two workers, four items of 0.5 s each: two rounds, plus worker restarts.
        assert elapsed < 0.5 * 2 + 4.0, elapsed


def test_timeout_counts_from_dispatch_not_from_call():
    with DeadlinePool(1) as p:
        results = p.map(time.sleep, [0.4, 0.4, 0.4], timeout=0.8)
        assert [r.status for r in results] == ["ok", "ok", "ok"]


def test_worker_death_is_an_error_result(pool):
    results = pool.map(os._exit, [3])
    assert results[0].status == "error" and "died" in results[0].error and "3" in results[0].error
    assert pool.map(operator.neg, [5])[0].value == -5


def test_thread_safe_concurrent_maps(pool):
    outputs: dict[int, list[Result]] = {}

    def run(k: int) -> None:
        outputs[k] = pool.map(abs, [-(k * 1000 + i) for i in range(50)])

    threads = [threading.Thread(target=run, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for k in range(6):
        assert [r.value for r in outputs[k]] == [k * 1000 + i for i in range(50)]


def test_concurrent_first_use_starts_one_set_of_workers():
    p = DeadlinePool(2)
    barrier = threading.Barrier(5)
    outputs: dict[int, list[Result]] = {}

    def run(k: int) -> None:
        barrier.wait()
        outputs[k] = p.map(abs, [-k] * 10)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert all([r.value for r in outputs[k]] == [k] * 10 for k in range(5))
        assert p.stats()["started"] == 2
    finally:
        p.shutdown()


def test_initializer_failure_breaks_pool():
    p = DeadlinePool(1, initializer="no_such_module_xyz:init")
    with pytest.raises(PoolBroken, match="initializer failed"):
        p.map(operator.neg, [1])
    with pytest.raises(PoolBroken):
        p.map(operator.neg, [1])
    p.shutdown()


def test_initializer_runs_before_work():
    with DeadlinePool(1, initializer="os:umask", initargs=(0o27,)) as p:
        # umask returns the previous mask; the initializer set 0o27 in the worker.
        assert p.map(os.umask, [0o27])[0].value == 0o27


def test_memory_limit_turns_huge_allocation_into_error():
    with DeadlinePool(1, memory_limit_mb=256) as p:
        (big,) = p.map(bytearray, [2 * 1024**3])
        assert big.status == "error" and "MemoryError" in big.error
        assert p.map(bytearray, [10])[0].value == bytearray(10)


def test_lazy_start_and_shutdown():
    before = threading.active_count()
    p = DeadlinePool(2)
    assert threading.active_count() == before  # nothing started yet
    pids = {r.value for r in p.map(worker_pid, range(8))}
    assert pids and os.getpid() not in pids and all(_alive(pid) for pid in pids)
    p.shutdown()
    time.sleep(0.2)
    assert not any(_alive(pid) for pid in pids)
    with pytest.raises(PoolBroken, match="shut down"):
        p.map(operator.neg, [1])
    assert threading.active_count() == before


def test_close_shared_stops_every_process_wide_pool_and_the_sandboxes():
    """What rlvr.api.train and rlvr.api.evaluate do when they end: the rewards' warm pools and the
    sandbox's stop, and the next use starts new ones."""
    from plugins.sandbox import get_sandbox
    from rlvr.kit import close_shared, shared_pool

    pool = shared_pool(2, None)
    pids = {r.value for r in pool.map(worker_pid, range(4))}
    box = get_sandbox("process")  # registered itself with on_close_shared
    close_shared()
    wait_until(lambda: not any(_alive(pid) for pid in pids))
    assert not any(_alive(pid) for pid in pids) and box._closed
    with pytest.raises(PoolBroken, match="shut down"):
        pool.map(operator.neg, [1])
    fresh = shared_pool(2, None)
    assert fresh is not pool and fresh.map(operator.neg, [1])[0].value == -1
    assert get_sandbox("process") is not box
    close_shared()


def test_import_has_no_side_effects():
    code = textwrap.dedent(
        f"""
        import sys, threading
        sys.path.insert(0, {str(ROOT)!r})
        before = set(sys.modules)
        import rlvr.kit.workers
        new = set(sys.modules) - before
        assert threading.active_count() == 1
        assert "multiprocessing" not in new, sorted(new)
        assert not any(m.startswith(("sympy", "math_verify", "torch")) for m in new)
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr


def test_workers_cleaned_up_at_exit_without_shutdown(tmp_path):
    script = tmp_path / "exit_script.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import itertools, os, sys
            sys.path.insert(0, {str(ROOT)!r})
            from rlvr.kit.workers import DeadlinePool

            def pid(_):
                return os.getpid()

            if __name__ == "__main__":
                p = DeadlinePool(2)
                pids = {{r.value for r in p.map(pid, range(8))}}
                # one worker busy inside C when the interpreter exits
                p.submit(sum, itertools.repeat(1, 10**13), timeout=100)
                print(" ".join(map(str, pids)), flush=True)
            """
        )
    )
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert time.monotonic() - t0 < 20
    pids = [int(x) for x in out.stdout.split()]
    assert pids
    time.sleep(0.3)
    assert not any(_alive(pid) for pid in pids)


# A user's top-level code, with no `if __name__ == "__main__":`: the math reward's workers and a
# tool of the script's own in a worker process. Workers that imported __main__ ran it again and died.
TOP_LEVEL = """
import json, math
import rlvr.api
from rlvr.kit.tools import tool_from_function
from rlvr_plugins.tools_env import make_tools_env

scores = rlvr.api.RewardScorer("math").score([{"completion": "so \\\\boxed{4}", "answer": "4"},
                                             {"completion": "\\\\boxed{5}", "answer": "4"}])

def hypotenuse(a: float, b: float) -> float:
    return math.hypot(a, b)

env = make_tools_env({}, tools=[tool_from_function(hypotenuse)], run="process")
reply = env.step('<tool_call>{"name": "hypotenuse", "arguments": {"a": 3, "b": 4}}</tool_call>')
print(json.dumps({"values": [value for value, _ in scores], "tool": reply.text}))
"""


@pytest.mark.parametrize("form", ["script", "python -c", "stdin"])
def test_top_level_code_gets_rewards_and_tools_from_workers(tmp_path, form):
    """A script, ``python -c`` and code fed on stdin (as a notebook's kernel runs cells: no file to
    re-import) score with the math reward's worker pool and call their own tool in a worker process."""
    script = tmp_path / "top.py"
    script.write_text(TOP_LEVEL)
    command = {"script": [sys.executable, str(script)], "python -c": [sys.executable, "-c", TOP_LEVEL],
               "stdin": [sys.executable, "-"]}[form]
    done = subprocess.run(command, input=TOP_LEVEL if form == "stdin" else None, capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.splitlines()[-1])
    assert got["values"] == [1.0, 0.0] and "5.0" in got["tool"], (got, done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr[-3000:]


def test_a_worker_that_dies_starting_fails_the_pool_fast_instead_of_hanging():
    """A worker whose initializer kills its process: the caller gets PoolBroken naming the exit
    within seconds (it used to wait forever: shutting the pool down touched the already closed
    process of the dead worker)."""
    start = time.monotonic()
    pool = DeadlinePool(1, initializer=os._exit, initargs=(3,))
    with pytest.raises(PoolBroken, match=r"a worker exited during start-up \(exit code 3\)"):
        pool.map(abs, [-1], timeout=5)
    pool.shutdown()
    assert time.monotonic() - start < 60


def test_invalid_arguments():
    with pytest.raises(ValueError):
        DeadlinePool(0)
    p = DeadlinePool(1)
    with pytest.raises(ValueError):
        p.submit(operator.neg, 1, timeout=0)
    p.shutdown()
