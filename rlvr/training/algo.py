"""The RLOO maths that needs no tensors: advantages over groups, length shaping.

Pure functions on plain lists, tested against hand-computed numbers. The tensor side
(policy loss, clipping, KL estimators, aggregation) is in ``rlvr.training.losses``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class GroupStats:
    groups: int
    zero_variance: int  # groups whose scorable rewards are all equal: no learning signal
    too_few_scorable: int  # groups with < 2 scorable samples: no baseline, no gradient
    unscorable: int  # samples whose reward is None


def rloo_advantages(
    rewards: Sequence[float | None], group_size: int, normalize: str = "none", eps: float = 1e-6
) -> tuple[list[float], list[bool], GroupStats]:
    """Leave-one-out advantages ``A_i = r_i - mean_{j != i} r_j`` within each group of K.

    Only scorable samples (reward not None) enter a baseline; an unscorable sample gets
    advantage 0 and mask False. A group with fewer than 2 scorable samples contributes no
    gradient (all masks False). ``normalize``: "none", "group_std" (divide by the group's
    reward std) or "batch_std" (divide by the std of all unmasked advantages).

    >>> rloo_advantages([10, 5, 8, 2], 4)[0]  # doctest: +ELLIPSIS
    [5.0, -1.666..., 2.333..., -5.666...]
    """
    if group_size < 2:
        raise ValueError("RLOO needs at least 2 samples per prompt")
    if len(rewards) % group_size:
        raise ValueError(f"{len(rewards)} rewards do not split into groups of {group_size}")
    advantages = [0.0] * len(rewards)
    mask = [False] * len(rewards)
    zero_var = too_few = 0
    for start in range(0, len(rewards), group_size):
        idx = [i for i in range(start, start + group_size) if rewards[i] is not None]
        if len(idx) < 2:
            too_few += 1
            continue
        values = [float(rewards[i]) for i in idx]
        if not all(math.isfinite(v) for v in values):  # the runner never gives one (weighted_total)
            raise ValueError(f"a reward total in the group at {start} is not finite: {values}")
        total, m = sum(values), len(values)
        if max(values) - min(values) <= 0:
            zero_var += 1
        std = math.sqrt(sum((v - total / m) ** 2 for v in values) / m)
        for i, v in zip(idx, values):
            a = v - (total - v) / (m - 1)
            if normalize == "group_std":
                a /= std + eps
            advantages[i], mask[i] = a, True
    if normalize == "batch_std":
        kept = [a for a, k in zip(advantages, mask) if k]
        if len(kept) > 1:
            mean = sum(kept) / len(kept)
            std = math.sqrt(sum((a - mean) ** 2 for a in kept) / len(kept))
            advantages = [a / (std + eps) if k else 0.0 for a, k in zip(advantages, mask)]
    elif normalize not in ("none", "group_std"):
        raise ValueError(f"unknown advantage normalization {normalize!r}")
    stats = GroupStats(len(rewards) // group_size, zero_var, too_few, sum(r is None for r in rewards))
    return advantages, mask, stats


def shortest_correct_penalty(
    lengths: Sequence[int], correct: Sequence[bool], group_size: int, weight: float = 1.0
) -> list[float]:
    """Penalty for correct answers longer than the shortest correct answer in their group.

    For a correct sample: ``-weight * (len - L_min) / (L_max - L_min)`` where L_min and L_max
    are the shortest and longest correct lengths in its group (0 when they are equal).
    Incorrect samples get 0: their correctness reward already ranks them below. A group
    with no correct answer gets 0 everywhere, so it cannot push the model to be short and wrong.
    """
    if len(lengths) != len(correct) or len(lengths) % group_size:
        raise ValueError("lengths and correct must be equal-length and split into groups")
    out = [0.0] * len(lengths)
    for start in range(0, len(lengths), group_size):
        ok = [i for i in range(start, start + group_size) if correct[i]]
        if not ok:
            continue
        lo, hi = min(lengths[i] for i in ok), max(lengths[i] for i in ok)
        if hi == lo:
            continue
        for i in ok:
            out[i] = -weight * (lengths[i] - lo) / (hi - lo)
    return out
