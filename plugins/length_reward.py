"""Response-length regularization as a reward: DAPO's soft overlong punishment.

The group-relative alternative (penalty relative to the group's shortest correct answer)
needs other rewards' verdicts, so the engine applies it (``algorithm.length_penalty``);
both are pure functions in ``rlvr.training.algo``.
"""

from __future__ import annotations

from typing import Annotated

from annotated_types import Ge

from rlvr import Score, hookimpl
from rlvr.kit import soft_overlong_penalty


def overlong(
    prompts,
    completions,
    completion_ids,
    *,
    max_len: Annotated[int, Ge(1)] = 1024,
    cache_len: Annotated[int, Ge(0)] = 256,  # at most max_len (checked when scoring)
    policy_tokens=None,
):
    """DAPO soft overlong punishment on response tokens: 0, then linear to -1 at max_len.

    In an episode (``environment`` in the recipe) it counts the policy's tokens only
    (``policy_tokens``), not the environment's replies."""
    out = []
    for i, ids in enumerate(completion_ids):
        own = policy_tokens[i] if policy_tokens is not None else None
        if ids is None and own is None:
            out.append(Score(None, {"why": "needs completion_ids (token ids of the response)"}))
            continue
        length = own if own is not None else len(ids)
        penalty = soft_overlong_penalty(length, max_len=max_len, cache_len=cache_len)
        out.append(Score(penalty, {"length": length, "max_len": max_len, "cache_len": cache_len}))
    return out


@hookimpl
def rlvr_register_rewards(register):
    register("overlong", overlong)
