"""Calling reward functions safely and combining them with weights.

A reward's failure spoils only the records it could not score: when a call on a batch raises
(or returns the wrong number of values, which cannot be matched to the records), each record
of the batch is scored alone, so only the records whose call fails get ``None``, each with its
reason in ``info["error"]``; a value that is not a finite number is ``None`` for its record.
Every string in a reward's ``info`` and every error is escaped (``escape_controls``): a reason
may quote a program's output, and is shown in logs, terminals and ``samples.jsonl``.
Each failing record is counted and logged with the reward's name, and training goes on.
Rewards run concurrently, one thread each (the slow work inside them - math checking,
sandboxed code - runs in their own worker processes).

Columns are passed record by record: a required column missing from a record is the user's
error (``RlvrError`` naming the record's number in the whole input, ``first_record`` + its
index); an optional column is passed when any record of the batch has it, ``None`` for the
records that lack it, so a batch may mix records of different kinds.
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

from rlvr import RlvrError, Score
from rlvr.host.registry import REWARD_POSITIONAL, RewardSpec
from rlvr.kit import escape_controls, one_line

log = logging.getLogger("rlvr.rewards")


@dataclass
class BoundReward:
    """A registered reward plus the recipe's weight, options and column mapping.

    The options are checked against the reward's signature here (``RlvrError`` when one is
    wrong) and kept as checked, e.g. ``5`` as ``5.0`` for a float option."""

    spec: RewardSpec
    weight: float = 1.0
    options: dict[str, Any] = field(default_factory=dict)
    columns: dict[str, str] = field(default_factory=dict)  # parameter -> dataset column
    # A reward in TRL's convention gets conversational completions (each a list of one assistant
    # message, {"role": "assistant", "content": text}), as TRL gives them when the prompts are
    # chat messages: rlvr's are when the recipe renders them with the chat template.
    conversational: bool = False

    def __post_init__(self) -> None:
        self.options = self.spec.check_options(self.options)

    @property
    def name(self) -> str:
        return self.spec.name

    def column_kwargs(self, rows: Sequence[Mapping[str, Any]], first_record: int = 1) -> dict[str, list]:
        """The columns the reward takes, one value per row (see the module docstring);
        ``first_record`` is the number of ``rows[0]`` in the whole input, for messages."""
        kwargs: dict[str, list] = {}
        for param in self.spec.columns:
            column = self.columns.get(param, param)
            for i, row in enumerate(rows):
                if column not in row:
                    raise RlvrError(f"record {first_record + i}: reward {self.name!r} needs column {column!r}")
            kwargs[param] = [row[column] for row in rows]
        wanted = list(self.spec.optional_columns)
        if self.spec.accepts_any:
            taken = {*self.spec.columns, *wanted, *self.spec.options, *REWARD_POSITIONAL}
            wanted += [c for c in dict.fromkeys(c for row in rows for c in row) if c not in taken]
        for param in wanted:
            column = self.columns.get(param, param)
            if any(column in row for row in rows):
                kwargs[param] = [row.get(column) for row in rows]
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


def _coerce(item: Any) -> tuple[float | None, dict, str | None]:
    """(value, info, error): error says why a value that is not a finite number was refused."""
    if isinstance(item, Score):
        value, info = item.value, dict(item.info)
    else:
        value, info = item, {}
    if value is None:
        return None, info, None
    if isinstance(value, bool):
        value = float(value)
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        error = f"reward returned {value!r}, not a finite number"
        return None, {**info, "error": error}, error
    return float(value), info, None


@dataclass
class RewardRun:
    """One reward's values and explanations for a batch, and which records it failed on."""

    values: list[float | None]
    infos: list[dict]
    failed: dict[int, str]  # index in the batch -> why that record is None
    batch_error: str | None = None  # why the batch call failed (then each record was scored alone)

    def message(self, name: str, first_record: int = 1) -> str | None:
        """One line for the log: which records failed and why; None when none did."""
        if not self.failed:
            return None
        shown = [f"record {first_record + i}: {why}" for i, why in list(self.failed.items())[:3]]
        more = f"; and {len(self.failed) - 3} more" if len(self.failed) > 3 else ""
        retried = f" (the batch failed with {self.batch_error}; each record was scored alone)" if self.batch_error else ""
        return (f"reward {name!r} failed on {len(self.failed)} of {len(self.values)} records{retried}: "
                f"{'; '.join(shown)}{more}")


def _call(reward: BoundReward, prompts, completions, completion_ids, kwargs: dict) -> list:
    """The reward's raw values for a batch; raises for any failure, a wrong count included."""
    n = len(completions)
    if reward.spec.convention == "trl":
        out = reward.spec.fn(**trl_arguments(reward, prompts, completions, completion_ids), **kwargs, **reward.options)
    else:
        out = reward.spec.fn(list(prompts), list(completions), list(completion_ids), **{**kwargs, **reward.options})
    if inspect.isawaitable(out):
        out = asyncio.run(_await(out))
    out = list(out)
    if len(out) != n:
        raise ValueError(f"returned {len(out)} values for {n} completions")
    return out


def trl_arguments(reward: BoundReward, prompts, completions, completion_ids) -> dict[str, list]:
    """What TRL passes a reward besides the columns, for the ones this reward takes (all with
    ``**kwargs``): ``prompts``, ``completions`` (conversational when ``reward.conversational``) and
    ``completion_ids``."""
    if reward.conversational:
        completions = [[{"role": "assistant", "content": text}] for text in completions]
    given = {"prompts": list(prompts), "completions": list(completions), "completion_ids": list(completion_ids)}
    params = inspect.signature(reward.spec.fn).parameters
    return {k: v for k, v in given.items() if reward.spec.accepts_any or k in params}


def run_reward(
    reward: BoundReward,
    prompts: Sequence[str],
    completions: Sequence[str],
    completion_ids: Sequence[Sequence[int] | None],
    rows: Sequence[Mapping[str, Any]],
    first_record: int = 1,
) -> RewardRun:
    """Run one reward on a batch, record by record when the batch call fails. Never raises for
    the reward's own failures; a missing column is the user's error and raises ``RlvrError``."""
    kwargs = reward.column_kwargs(rows, first_record)
    try:
        out = _call(reward, prompts, completions, completion_ids, kwargs)
    except Exception as exc:  # noqa: BLE001 - a reward's bug must not stop training
        error = escape_controls(one_line(exc))
        if len(completions) == 1:
            return RewardRun([None], [{"error": error}], {0: error})
        run = RewardRun([], [], {}, batch_error=error)
        for i in range(len(completions)):
            alone = run_reward(reward, prompts[i : i + 1], completions[i : i + 1], completion_ids[i : i + 1],
                               rows[i : i + 1], first_record + i)
            run.values += alone.values
            run.infos += alone.infos
            if alone.failed:
                run.failed[i] = alone.failed[0]
        return run
    run = RewardRun([], [], {})
    for i, item in enumerate(out):
        try:
            value, info, error = _coerce(item)
        except Exception as exc:  # noqa: BLE001 - e.g. a Score whose info is not a mapping
            error = f"reward returned {type(item).__name__} that cannot be read: {one_line(exc)}"
            value, info = None, {"error": error}
        run.values.append(value)
        run.infos.append(_escaped(info))
        if error:
            run.failed[i] = escape_controls(error)
    return run


def _escaped(value: Any) -> Any:
    """``value`` with every string in it (keys too) escaped by ``escape_controls``."""
    if isinstance(value, str):
        return escape_controls(value)
    if isinstance(value, Mapping):
        return {_escaped(k): _escaped(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_escaped(v) for v in value]
    return value


async def _await(awaitable):
    return await awaitable


def score_batch(
    rewards: Sequence[BoundReward],
    prompts: Sequence[str],
    completions: Sequence[str],
    completion_ids: Sequence[Sequence[int] | None],
    rows: Sequence[Mapping[str, Any]],
    first_record: int = 1,
) -> RewardBatch:
    """All rewards on one batch, concurrently; total is None where any weighted reward is None.
    ``first_record``: the number of ``rows[0]`` in the whole input, for messages about records.
    ``errors`` counts, per reward, the records it failed on."""
    for reward in rewards:  # surface missing columns before any work starts
        reward.column_kwargs(rows, first_record)
    with ThreadPoolExecutor(max_workers=max(1, len(rewards)), thread_name_prefix="rlvr-reward") as ex:
        futures = [ex.submit(run_reward, r, prompts, completions, completion_ids, rows, first_record) for r in rewards]
        runs = [f.result() for f in futures]
    values, infos, errors = {}, {}, Counter()
    for reward, run in zip(rewards, runs):
        values[reward.name], infos[reward.name] = run.values, run.infos
        if run.failed:
            errors[reward.name] += len(run.failed)
            log.warning("%s", run.message(reward.name, first_record))
    total: list[float | None] = []
    for i in range(len(completions)):
        parts = [(r.weight, values[r.name][i]) for r in rewards if r.weight != 0]
        total.append(None if any(v is None for _, v in parts) else sum(w * v for w, v in parts))
    return RewardBatch([r.name for r in rewards], values, infos, total, errors)


def bind_rewards(recipe_rewards: Mapping[str, Any], registry, conversational: bool = False) -> list[BoundReward]:
    """The recipe's ``rewards:`` section as callable rewards (names already resolved; the options
    are checked again, and converted, by ``BoundReward``). ``conversational``: the recipe's
    prompts are chat messages (``prompt.chat_template``), so TRL-convention rewards get
    conversational completions, as TRL gives them."""
    return [
        BoundReward(registry.reward(name), entry.weight, dict(entry.options), dict(entry.columns), conversational)
        for name, entry in recipe_rewards.items()
    ]
