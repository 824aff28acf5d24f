"""Response-length regularization as a reward: DAPO's soft overlong punishment.

The group-relative alternative (penalty relative to the group's shortest correct answer)
needs other rewards' verdicts, so the engine applies it (``algorithm.length_penalty``);
both are pure functions in ``rlvr.algo``.
"""

from __future__ import annotations

from typing import Annotated

from annotated_types import Ge

from rlvr import Score, hookimpl
from rlvr.algo import soft_overlong_penalty


def overlong(
    prompts,
    completions,
    completion_ids,
    *,
    max_len: Annotated[int, Ge(1)] = 1024,
    cache_len: Annotated[int, Ge(0)] = 256,  # at most max_len (checked when scoring)
):
    """DAPO soft overlong punishment on response tokens: 0, then linear to -1 at max_len."""
    out = []
    for ids in completion_ids:
        if ids is None:
            out.append(Score(None, {"why": "needs completion_ids (token ids of the response)"}))
            continue
        penalty = soft_overlong_penalty(len(ids), max_len=max_len, cache_len=cache_len)
        out.append(Score(penalty, {"length": len(ids), "max_len": max_len, "cache_len": cache_len}))
    return out


@hookimpl
def rlvr_register_rewards(register):
    register("overlong", overlong)
