"""Calling reward functions safely and combining them with weights.

A reward that raises, returns the wrong number of values, or returns a non-number gives
``None`` for the samples it could not score; the failure is logged with the reward's name
and counted, and training goes on. Rewards run concurrently, one thread each (the slow
work inside them - math checking, sandboxed code - runs in their own worker processes).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from . import RlvrError, Score
from .plugins import RewardSpec

log = logging.getLogger("rlvr.rewards")


@dataclass
class BoundReward:
    """A registered reward plus the recipe's weight, options and column mapping."""

    spec: RewardSpec
    weight: float = 1.0
    options: dict[str, Any] = field(default_factory=dict)
    columns: dict[str, str] = field(default_factory=dict)  # parameter -> dataset column

    @property
    def name(self) -> str:
        return self.spec.name

    def column_kwargs(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, list]:
        kwargs: dict[str, list] = {}
        wanted = list(self.spec.columns) + list(self.spec.optional_columns)
        if self.spec.accepts_any and rows:
            wanted += [c for c in rows[0] if c not in wanted and c not in self.spec.options]
        for param in wanted:
            column = self.columns.get(param, param)
            present = [column in row for row in rows]
            if all(present):
                kwargs[param] = [row[column] for row in rows]
            elif param in self.spec.columns:
                index = present.index(False)
                raise RlvrError(f"record {index + 1}: reward {self.name!r} needs column {column!r}")
        return kwargs


@dataclass
class RewardBatch:
    """Per-reward values and explanations for one batch, and their weighted sum."""

    names: list[str]
    values: dict[str, list[float | None]]
    infos: dict[str, list[dict]]
    total: list[float | None]
    errors: Counter

    def unscorable(self) -> int:
        return sum(v is None for v in self.total)


def completion_text(completion: Any) -> str:
    """Plain text of a completion: a string, or chat messages (the last assistant turn counts;
    without roles, the last message). Content may itself be a list of text parts."""
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        if "content" in completion:
            return completion_text(completion["content"])
        return str(completion.get("text", ""))
    if isinstance(completion, (list, tuple)):
        messages = [m for m in completion if isinstance(m, dict) and "content" in m]
        if messages:
            assistant = [m for m in messages if m.get("role", "assistant") == "assistant"]
            return completion_text((assistant or messages)[-1])
        return "".join(completion_text(part) for part in completion)
    return str(completion)


def _coerce(item: Any) -> tuple[float | None, dict]:
    if isinstance(item, Score):
        value, info = item.value, dict(item.info)
    else:
        value, info = item, {}
    if value is None:
        return None, info
    if isinstance(value, bool):
        value = float(value)
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return None, {**info, "error": f"reward returned {value!r}, not a finite number"}
    return float(value), info


def call_reward(
    reward: BoundReward,
    prompts: Sequence[str],
    completions: Sequence[str],
    completion_ids: Sequence[Sequence[int] | None],
    rows: Sequence[Mapping[str, Any]],
) -> tuple[list[float | None], list[dict], str | None]:
    """Run one reward on a batch. Never raises for the reward's own failures."""
    n = len(completions)
    kwargs = reward.column_kwargs(rows)  # a missing column is the user's error: raise it
    kwargs.update(reward.options)
    try:
        out = reward.spec.fn(list(prompts), list(completions), list(completion_ids), **kwargs)
        if inspect.isawaitable(out):
            out = asyncio.run(_await(out))
        out = list(out)
        if len(out) != n:
            raise ValueError(f"returned {len(out)} values for {n} completions")
    except Exception as exc:  # noqa: BLE001 - a reward's bug must not stop training
        message = f"{type(exc).__name__}: {exc}"
        log.warning("reward %r failed on a batch of %d: %s", reward.name, n, message)
        return [None] * n, [{"error": message}] * n, message
    values, infos = zip(*(_coerce(item) for item in out)) if out else ((), ())
    return list(values), list(infos), None


async def _await(awaitable):
    return await awaitable


def score_batch(
    rewards: Sequence[BoundReward],
    prompts: Sequence[str],
    completions: Sequence[str],
    completion_ids: Sequence[Sequence[int] | None],
    rows: Sequence[Mapping[str, Any]],
) -> RewardBatch:
    """All rewards on one batch, concurrently; total is None where any weighted reward is None."""
    for reward in rewards:  # surface missing columns before any work starts
        reward.column_kwargs(rows)
    with ThreadPoolExecutor(max_workers=max(1, len(rewards)), thread_name_prefix="rlvr-reward") as ex:
        futures = [ex.submit(call_reward, r, prompts, completions, completion_ids, rows) for r in rewards]
        results = [f.result() for f in futures]
    values, infos, errors = {}, {}, Counter()
    for reward, (vals, inf, error) in zip(rewards, results):
        values[reward.name], infos[reward.name] = vals, inf
        if error:
            errors[reward.name] += len(vals)
    total: list[float | None] = []
    for i in range(len(completions)):
        parts = [(r.weight, values[r.name][i]) for r in rewards if r.weight != 0]
        total.append(None if any(v is None for _, v in parts) else sum(w * v for w, v in parts))
    return RewardBatch([r.name for r in rewards], values, infos, total, errors)


def bind_rewards(recipe_rewards: Mapping[str, Any], registry) -> list[BoundReward]:
    """The recipe's ``rewards:`` section as callable rewards (names already validated)."""
    return [
        BoundReward(registry.reward(name), entry.weight, dict(entry.options), dict(entry.columns))
        for name, entry in recipe_rewards.items()
    ]
