"""rlvr.api.train and rlvr.api.evaluate again and again in one Python process (a notebook, a sweep):
the checks that need no process, socket or model (the unit ring; the others:
tests/e2e/test_api_reentrant.py)."""

from __future__ import annotations

import threading
from helpers.api_reentrant import idle_library_worker


def test_an_idle_library_pool_worker_is_told_from_a_busy_one_and_from_rlvrs():
    import time
    from concurrent.futures import ThreadPoolExecutor

    release = threading.Event()
    idle, busy, ours = (ThreadPoolExecutor(1), ThreadPoolExecutor(1),
                        ThreadPoolExecutor(1, thread_name_prefix="rlvr-test"))
    try:
        idle.submit(int).result()
        busy.submit(release.wait)
        ours.submit(int).result()
        time.sleep(0.2)
        workers = {name: next(iter(pool._threads)) for name, pool in (("idle", idle), ("busy", busy), ("ours", ours))}
        assert [idle_library_worker(workers[name]) for name in ("idle", "busy", "ours")] == [True, False, False]
        assert not idle_library_worker(threading.current_thread())
    finally:
        release.set()
        for pool in (idle, busy, ours):
            pool.shutdown()
