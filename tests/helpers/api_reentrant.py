"""What tests/e2e/test_api_reentrant.py, tests/unit/test_api_reentrant_pure.py share."""

from __future__ import annotations

import os
import sys
import threading
import traceback


def idle_library_worker(thread: threading.Thread) -> bool:
    """A library's pool worker waiting for work (vLLM's renderer and transformers' loader start
    pools they shut down, or leave to their finalizers): it runs nothing and holds nothing of a run,
    and Python wakes and joins it at exit. One of rlvr's, or one still running a job, is a leftover."""
    frame = sys._current_frames().get(thread.ident)
    if frame is None or thread.name.startswith("rlvr"):
        return False
    line = traceback.extract_stack(frame)[-1]  # the queue's get is C code: the worker's own frame is on top
    return (line.name == "_worker" and line.filename.endswith(os.path.join("concurrent", "futures", "thread.py"))
            and "work_queue.get" in (line.line or ""))
