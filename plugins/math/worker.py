"""One sample in a worker process: ``score_item`` (extract, normalise, judge under a soft time
limit) and ``check_answer``, the same judgement in the calling process without a limit.

The reward hands ``score_item`` to the shared pool (``rlvr.kit.shared_pools.shared_pool``) with
``parse.init_worker`` as the pool's initializer. The soft limit (``rlvr.kit.deadline.soft_limit``)
usually stops the work before the pool's hard limit kills the worker, so the worker and its
warm caches (the parsed gold answers here, math-verify's parser) survive a slow answer.
"""

from __future__ import annotations

from typing import Any

from rlvr.kit.deadline import SoftTimeout, soft_limit

from .extract import extract_answer, extract_gold
from .normalise import normalize_answer
from .compare import irrational_approximations
from .parse import MV, Parsed, init_worker, show
from .verdict import judge

__all__ = ["check_answer"]

_GOLD_CACHE: dict[tuple[str, str], tuple[str | None, Parsed | None]] = {}
_GOLD_CACHE_SIZE = 4096


def _gold_parsed(gold_text: str, mode: str) -> tuple[str | None, Parsed | None]:
    key = (mode, gold_text)
    hit = _GOLD_CACHE.get(key)
    if hit is None:
        answer = extract_gold(gold_text, mode)
        hit = (answer, None if answer is None else Parsed(normalize_answer(answer)))
        if len(_GOLD_CACHE) >= _GOLD_CACHE_SIZE:
            _GOLD_CACHE.clear()
        _GOLD_CACHE[key] = hit
    return hit


def check_answer(gold: str, pred: str, approximate_irrational: bool = False) -> tuple[bool | None, dict[str, Any]]:
    """Compare a gold final answer with a predicted one (both LaTeX/plain strings).

    Returns (verdict, info); verdict None when the gold cannot be parsed. Runs in the
    calling process without a time limit: for scripts and debugging. The reward runs it
    in worker processes. ``approximate_irrational``: the reward's option of that name.
    """
    if not MV:
        init_worker()
    _, g = _gold_parsed(gold, "raw")
    p = Parsed(normalize_answer(pred))
    with irrational_approximations(approximate_irrational) as approximations:
        return _noted(*judge(g, p), approximations)


def _noted(verdict: bool | None, info: dict[str, Any], approximations) -> tuple[bool | None, dict[str, Any]]:
    """The verdict, its ``why`` saying so when a rounded decimal was refused for an irrational gold."""
    if verdict is False and approximations.refused:
        info = {**info, "why": f"{info.get('why', 'not equal')}: a rounded decimal for an irrational gold, "
                               "whose exact form is wanted (approximate_irrational: false)"}
    return verdict, info


def score_item(item: tuple) -> dict[str, Any]:
    """Worker entry point: (completion, gold, extract, gold_mode, max_chars, soft_seconds,
    approximate_irrational) -> dict."""
    completion, gold_text, extract, gold_mode, max_chars, soft_seconds, approximate = item
    if not MV:
        init_worker()
    info: dict[str, Any] = {}
    try:
        with soft_limit(soft_seconds):
            pred = extract_answer(completion, extract)
            info["pred"] = None if pred is None else show(pred, 300)
            gold, g = _gold_parsed(gold_text, gold_mode)
            info["gold"] = None if gold is None else show(gold, 300)
            if gold is None:
                return {"value": None, "info": {**info, "why": f"no gold answer found (gold={gold_mode!r})"}}
            if pred is None:
                return {"value": 0.0, "info": {**info, "why": f"no answer found (extract={extract!r})"}}
            if len(pred) > max_chars:
                return {"value": 0.0, "info": {**info, "why": f"answer longer than {max_chars} characters"}}
            p = Parsed(normalize_answer(pred))
            with irrational_approximations(approximate) as approximations:
                verdict, more = _noted(*judge(g, p), approximations)
            return {"value": None if verdict is None else float(verdict), "info": {**info, **more}}
    except SoftTimeout:
        return {"value": 0.0, "info": {**info, "why": f"checking took longer than {soft_seconds:.2f} s"}}
