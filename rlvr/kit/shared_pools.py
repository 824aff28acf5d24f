"""Process-wide worker pools: one :class:`~rlvr.kit.workers.DeadlinePool` per (size, initializer,
memory limit), started on first use and warm from batch to batch; ``close_shared`` stops them all
(and the plugins' own pools registered with ``on_close_shared``) when a run ends."""

from __future__ import annotations

import threading
from typing import Any, Callable

from rlvr.kit.workers import DeadlinePool, default_processes

__all__ = ["shared_pool", "on_close_shared", "close_shared"]

_SHARED: dict[tuple, DeadlinePool] = {}
_SHARED_LOCK = threading.Lock()


def shared_pool(workers: int, initializer: Callable[..., Any] | str | None, *,
                memory_limit_mb: int | None = None) -> DeadlinePool:
    """The process-wide pool for (size, initializer, memory limit), created on first use.

    Rewards call this on every batch: workers start once and stay warm. ``workers <= 0``:
    the CPUs this process may use, clamped to 2..8 -- at least two, so that one sample stuck
    until its time limit never holds up the rest of a batch.
    """
    if workers <= 0:
        workers = max(2, min(8, default_processes()))
    key = (workers, initializer, memory_limit_mb)
    with _SHARED_LOCK:
        pool = _SHARED.get(key)
        if pool is None:
            pool = _SHARED[key] = DeadlinePool(workers, initializer=initializer, memory_limit_mb=memory_limit_mb)
        return pool


_CLOSERS: list[Callable[[], None]] = []


def on_close_shared(closer: Callable[[], None]) -> None:
    """Have ``close_shared`` call ``closer`` too: for a plugin's own process-wide pool (the
    sandbox's), which stays warm from run to run otherwise."""
    with _SHARED_LOCK:
        if closer not in _CLOSERS:
            _CLOSERS.append(closer)


def close_shared() -> None:
    """Stop every process-wide pool: ``shared_pool``'s and those of ``on_close_shared``.
    ``rlvr.api.train`` and ``rlvr.api.evaluate`` call it when they end, so that a run in a notebook or a
    sweep leaves no worker process behind; the next run starts its own."""
    with _SHARED_LOCK:
        pools, closers = list(_SHARED.values()), list(_CLOSERS)
        _SHARED.clear()
    for pool in pools:
        pool.shutdown()
    for closer in closers:
        closer()
