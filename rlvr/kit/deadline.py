"""Time limits for a reward's checker in worker processes: a soft one inside, a hard one outside.

A checker that may hang (sympy, a third-party scorer) runs in a :class:`~rlvr.kit.workers.DeadlinePool`
(usually :func:`~rlvr.kit.shared_pools.shared_pool`) with a hard limit per item: a worker that
overruns it is killed from outside, the only way to stop C code. A kill costs a worker restart
(its imports, its warm caches), so the item's Python code is first stopped from inside at a
softer limit, :func:`soft_seconds` of the hard one::

    # worker side
    def score_one(item):
        answer, soft = item
        try:
            with soft_limit(soft):
                return {"value": check(answer), "why": "checked"}
        except SoftTimeout:
            return {"value": 0.0, "why": f"checking took longer than {soft:.2f} s"}

    # host side
    items = [(answer, soft_seconds(timeout)) for answer in answers]
    for result in map_with_deadline(pool, score_one, items, timeout=timeout, reward="mine"):
        value, why = (result.value["value"], result.value["why"]) if result.ok else unfinished(result, timeout)
"""

from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator

from rlvr import RlvrError
from rlvr.kit.workers import DeadlinePool, PoolBroken, Result

__all__ = ["SoftTimeout", "soft_limit", "soft_seconds", "map_with_deadline", "unfinished"]


class SoftTimeout(BaseException):
    """The soft limit of :func:`soft_limit` passed.

    A BaseException, like KeyboardInterrupt: checkers and the scorers they call are full of
    ``except Exception`` (sympy and math-verify on odd input, a scorer that scores whatever
    fails 0.0), which would swallow the timeout and either carry on past the limit until the
    hard kill or turn the timeout into a verdict that looks like a real one.
    """


def _raise_soft_timeout(signum, frame):  # pragma: no cover - timing dependent
    raise SoftTimeout()


@contextmanager
def soft_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`SoftTimeout` in the block once ``seconds`` of wall time have passed.

    SIGALRM from ``ITIMER_REAL``: main thread only (a worker runs its items there), and only
    between Python bytecodes (a loop inside C code runs on until the hard limit). The previous
    SIGALRM handler is back, and the timer off, when the block ends.
    """
    previous = signal.signal(signal.SIGALRM, _raise_soft_timeout)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def soft_seconds(timeout: float) -> float:
    """The soft limit for a hard limit of ``timeout`` seconds: 85% of it less 50 ms (at least
    50 ms), so that the worker usually stops itself, and keeps its warm caches, before the kill."""
    return max(0.05, 0.85 * float(timeout) - 0.05)


def map_with_deadline(
    pool: DeadlinePool, fn: Callable[[Any], Any] | str, items: Iterable[Any], *, timeout: float, reward: str
) -> list[Result]:
    """``pool.map(fn, items, timeout=timeout)``, with workers that cannot start reported as an
    :class:`~rlvr.RlvrError` naming the ``reward``."""
    try:
        return pool.map(fn, items, timeout=float(timeout))
    except PoolBroken as exc:
        raise RlvrError(f"{reward} reward: checker processes unavailable: {exc}") from exc


def unfinished(result: Result, timeout: float, doing: str = "checking") -> tuple[float | None, str]:
    """(value, why) of an item that did not finish: 0.0 past the hard limit (an answer too slow
    to check is not a right one), None when its worker failed (no verdict at all)."""
    if result.status == "timeout":
        return 0.0, f"{doing} exceeded the hard limit of {timeout:g} s"
    return None, f"checker error: {result.error}"
