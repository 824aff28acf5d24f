"""Calling reward functions safely and combining them with weights.

A reward's failure spoils only the records it could not score: when a call on a batch raises
(or returns the wrong number of values, which cannot be matched to the records), each record
of the batch is scored alone, so only the records whose call fails get ``None``, each with its
reason in ``info["error"]``; a value that is not a finite number is ``None`` for its record.
Every string in a reward's ``info`` and every error is escaped (``escape_controls``): a reason
may quote a program's output, and is shown in logs, terminals and ``samples.jsonl``.
Each failing record is counted (``Unscored``: per reward, how many and the first reason, which a
step, an evaluation or ``rlvr score`` reports in one line), and training goes on.
Rewards run concurrently, one thread each (the slow work inside them - math checking,
sandboxed code - runs in their own worker processes).

Columns are passed record by record: a required column missing from a record is the user's
error (``RlvrError`` naming the record's number in the whole input, ``first_record`` + its
index); an optional column is passed when any record of the batch has it, ``None`` for the
records that lack it, so a batch may mix records of different kinds.

A record a weighted reward could not score counts as that reward's ``when_unscored`` says
(``UNSCORED_MODES``): ``void`` leaves the record's total ``None`` (left out of training's
baselines and updates), ``skip`` sums the rewards that did score, each with its weight, as TRL
does (a record none of them scored stays ``None``), ``zero`` counts the reward as 0.

A reward's own figures (``Score.metrics``: seconds, tokens, requests) are added up per batch into
``RewardBatch.metrics`` (``metric_sums``), as named sums that add up again over sampling rounds
and ranks (``rlvr.models.distributed.add_sums``, ``reduce_sums``) and become the step's
``reward/<reward>/<key>`` (``rlvr.runs.metrics.reward_metrics``). A name that is not a metric's
(``METRIC_KEY``) or a value that is not a finite number is dropped with a warning, once per
reward and reason: the score stands.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import numbers
import re
import threading
import typing
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal, Mapping, Sequence

from rlvr import RlvrError, Score
from rlvr.host.registry import REWARD_POSITIONAL, RewardSpec
from rlvr.kit import escape_controls, one_line

log = logging.getLogger("rlvr.rewards")

# What a record a weighted reward could not score counts as (module docstring): the recipe's
# ``when_unscored``, or a reward entry's own.
UnscoredMode = Literal["void", "skip", "zero"]
UNSCORED_MODES: tuple[str, ...] = typing.get_args(UnscoredMode)
DEFAULT_MAX_ABS = 1e6  # the recipe's max_abs_reward by default: a reward beyond it is a bug or an attack


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
    when_unscored: UnscoredMode = "void"  # what a record this reward could not score counts as
    max_abs: float = DEFAULT_MAX_ABS  # a value beyond ±max_abs is refused as the reward's error

    def __post_init__(self) -> None:
        self.options = self.spec.check_options(self.options)
        if self.when_unscored not in UNSCORED_MODES:
            raise RlvrError(f"reward {self.name!r}: when_unscored must be one of {', '.join(UNSCORED_MODES)}, "
                            f"not {self.when_unscored!r}")

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
    # Records whose episode's environment failed: index -> why (``rlvr.sampling.episodes.unscore_failed``
    # leaves them unscored, whatever the rewards said).
    env_failed: dict[int, str] = field(default_factory=dict)
    # The rewards' own figures (``Score.metrics``), summed over the batch's records (``metric_sums``).
    metrics: dict[str, float] = field(default_factory=dict)

    def unscorable(self) -> int:
        return sum(v is None for v in self.total)

    def unscored(self) -> Unscored:
        """What left records unscored: the environment, for the episodes it failed (and why the
        first failed), then per reward, the other records it could not score and why the first
        could not (its error, else the ``why`` of a ``Score(None, {"why": ...})``)."""
        out = Unscored(records=len(self.total), unscorable=self.unscorable(), env_failed=len(self.env_failed),
                       env_reason=next(iter(self.env_failed.values()), ""))
        for name in self.names:
            for i, (value, info) in enumerate(zip(self.values[name], self.infos[name])):
                if value is None and i not in self.env_failed:
                    out.counts[name] += 1
                    error, why = info.get("error"), info.get("why")  # why: a Score(None, ...)'s own reason
                    out.reasons.setdefault(name, str(error) if error else f"returned None: {why}" if why else
                                           "returned None")
        return out


REASON_CHARS = 120  # a reason in a summary line is cut here: the whole one is in the record's info


@dataclass
class Unscored:
    """What the rewards could not score, summed over the batches of a step, an evaluation or an
    ``rlvr score`` run: one line reports it, not one a batch and reward."""

    records: int = 0  # records scored (or tried)
    unscorable: int = 0  # records whose total is None
    counts: Counter = field(default_factory=Counter)  # reward -> records it could not score
    reasons: dict[str, str] = field(default_factory=dict)  # reward -> why the first could not
    env_failed: int = 0  # records whose episode's environment failed (none of them is scored)
    env_reason: str = ""  # why the first failed

    def add(self, other: Unscored) -> Unscored:
        self.records += other.records
        self.unscorable += other.unscorable
        self.counts.update(other.counts)
        for name, reason in other.reasons.items():
            self.reasons.setdefault(name, reason)
        self.env_failed += other.env_failed
        self.env_reason = self.env_reason or other.env_reason
        return self

    def line(self, rewards: Sequence[str] | None = None, what: str = "samples") -> str:
        """``the environment failed in 8 of 8 samples (env_errors; the first: why)`` when it failed,
        whatever ``rewards``, then ``reward 'x' could not score 8 of 8 samples (why the first could
        not)`` for each reward (of ``rewards`` when given) that failed on other records, most
        failures first."""
        names = [n for n in sorted(self.counts, key=lambda n: -self.counts[n]) if rewards is None or n in rewards]
        env = [f"the environment failed in {self.env_failed} of {self.records} {what} (env_errors; the first: "
               f"{one_line(self.env_reason, REASON_CHARS)})"] if self.env_failed else []
        return "; ".join(env + [f"reward {n!r} could not score {self.counts[n]} of {self.records} {what} "
                                f"({one_line(self.reasons.get(n, ''), REASON_CHARS)})" for n in names])


def _number(value: Any) -> float | None:
    """``value`` as a float when it is one real number: int, float, bool, a ``numbers.Real``
    (Fraction, numpy's scalars), a Decimal, or a 0-d array or tensor; else None."""
    if isinstance(value, (bool, int, float, numbers.Real, Decimal)):
        return float(value)
    item, shape = getattr(value, "item", None), getattr(value, "shape", None)
    if callable(item) and shape is not None and tuple(shape) == ():  # np.bool_, np.array(1.0), torch.tensor(1.0)
        inner = item()
        return None if inner is value else _number(inner)
    return None


def _refusal(value: Any) -> str:
    """Why ``value`` is not a reward, in words that fit it."""
    shape = getattr(value, "shape", None)
    if shape is not None and callable(getattr(value, "item", None)):
        return f"reward returned a {type(value).__name__} of shape {tuple(shape)}, not one number"
    text = repr(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"reward returned {type(value).__name__} {text}, not a number"


def _coerce(item: Any, max_abs: float = math.inf) -> tuple[float | None, dict, str | None]:
    """(value, info, error): error says why a value that is not a finite number within
    ±``max_abs`` was refused."""
    if isinstance(item, Score):
        value, info = item.value, dict(item.info)
    else:
        value, info = item, {}
    if value is None:
        return None, info, None
    number = _number(value)
    if number is None:
        error = _refusal(value)
    elif not math.isfinite(number):
        error = f"reward returned {number}, not a finite number"
    elif abs(number) > max_abs:
        error = f"reward returned {number:g}, beyond ±{max_abs:g} (its max_abs)"
    else:
        return number, info, None
    return None, {**info, "error": error}, error


# A reward's own metric (``Score.metrics``): a name that reads well in ``reward/<reward>/<key>``
# and in a tracker; "/" is the host's, for the names the figures travel under (``metric_sums``).
METRIC_KEY = re.compile(r"[A-Za-z0-9_.-]{1,64}")
METRIC_PREFIX = "reward_metric/"  # what the sums travel under; rlvr.runs.metrics.reward_metrics reads them
_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


def _metrics(reward: str, metrics: Any) -> dict[str, float]:
    """A ``Score``'s metrics as ``{key: float}``; what is not one (a key that is no ``METRIC_KEY``,
    a value that is no finite number, metrics that are no mapping) is left out, with a warning
    once per reward and reason."""
    if not metrics:
        return {}
    if not isinstance(metrics, Mapping):
        _warn_once(reward, f"its Score.metrics is a {type(metrics).__name__}, not a mapping of names to numbers")
        return {}
    out = {}
    for key, value in metrics.items():
        number = _number(value)
        if not isinstance(key, str) or not METRIC_KEY.fullmatch(key):
            _warn_once(reward, f"metric name {one_line(repr(key), 80)} is not 1 to 64 letters, digits or _.-")
        elif number is None or not math.isfinite(number):
            _warn_once(reward, f"metric {key!r} is {one_line(repr(value), 80)}, not a finite number")
        else:
            out[key] = number
    return out


def _warn_once(reward: str, problem: str) -> None:
    with _warned_lock:
        first = (reward, problem) not in _warned
        _warned.add((reward, problem))
    if first:
        log.warning("reward %r: %s: left out of the metrics", reward, escape_controls(problem))


def metric_sums(reward: str, metrics: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """One reward's metrics over a batch's records, as named sums that add up over batches and
    ranks (``rlvr.models.distributed.add_sums``): ``reward_metric/<reward>/<key>`` is the sum of
    ``key`` over the records that reported it (the largest, for a key ending in ``_max``), and a
    key ending in ``_mean`` also counts them, in ``reward_metric/<reward>/<key>/n``."""
    out: dict[str, float] = {}
    for record in metrics:
        for key, value in record.items():
            name = f"{METRIC_PREFIX}{reward}/{key}"
            if key.endswith("_max"):
                out[name] = max(out.get(name, -math.inf), value)
            else:
                out[name] = out.get(name, 0.0) + value
            if key.endswith("_mean"):
                out[name + "/n"] = out.get(name + "/n", 0.0) + 1.0
    return out


@dataclass
class RewardRun:
    """One reward's values and explanations for a batch, and which records it failed on."""

    values: list[float | None]
    infos: list[dict]
    failed: dict[int, str]  # index in the batch -> why that record is None
    batch_error: str | None = None  # why the batch call failed (then each record was scored alone)
    metrics: list[dict[str, float]] = field(default_factory=list)  # per record: its Score.metrics

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
        out = reward.spec.fn([prompt_text(p) for p in prompts], list(completions), list(completion_ids),
                             **{**kwargs, **reward.options})
    if inspect.isawaitable(out):
        out = asyncio.run(_await(out))
    out = list(out)
    if len(out) != n:
        raise ValueError(f"returned {len(out)} values for {n} completions")
    return out


def prompt_text(prompt) -> str:
    """A prompt as rlvr's convention gives it: its text. A prompt is a string or has ``text`` and
    ``messages`` (``rlvr.sampling.prompts.Prompt``: what the model was shown, and the conversation
    rendered through the chat template, None for plain text)."""
    return prompt if isinstance(prompt, str) else prompt.text


def trl_arguments(reward: BoundReward, prompts, completions, completion_ids) -> dict[str, list]:
    """What TRL passes a reward besides the columns, for the ones this reward takes (all with
    ``**kwargs``): ``prompts`` (a prompt's messages when it has them, as TRL gives a conversational
    dataset's, else its text), ``completions`` (conversational when ``reward.conversational`` or the
    prompt is messages, as TRL gives a conversational dataset's: ``rlvr score``'s records) and
    ``completion_ids``."""
    chats = [None if isinstance(p, str) or p.messages is None else [dict(m) for m in p.messages] for p in prompts]
    completions = [[{"role": "assistant", "content": text}] if reward.conversational or chat is not None else text
                   for chat, text in zip(chats, completions)]
    prompts = [prompt_text(p) if chat is None else chat for p, chat in zip(prompts, chats)]
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
            return RewardRun([None], [{"error": error}], {0: error}, metrics=[{}])
        run = RewardRun([], [], {}, batch_error=error)
        for i in range(len(completions)):
            alone = run_reward(reward, prompts[i : i + 1], completions[i : i + 1], completion_ids[i : i + 1],
                               rows[i : i + 1], first_record + i)
            run.values += alone.values
            run.infos += alone.infos
            run.metrics += alone.metrics
            if alone.failed:
                run.failed[i] = alone.failed[0]
        return run
    run = RewardRun([], [], {})
    for i, item in enumerate(out):
        try:
            value, info, error = _coerce(item, reward.max_abs)
        except Exception as exc:  # noqa: BLE001 - e.g. a Score whose info is not a mapping
            error = f"reward returned {type(item).__name__} that cannot be read: {one_line(exc)}"
            value, info = None, {"error": error}
        run.values.append(value)
        run.infos.append(_escaped(info))
        try:
            run.metrics.append(_metrics(reward.name, item.metrics) if isinstance(item, Score) else {})
        except Exception as exc:  # noqa: BLE001 - a mapping whose items() raises: the score stands
            _warn_once(reward.name, f"its Score.metrics cannot be read: {one_line(exc)}")
            run.metrics.append({})
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
    """All rewards on one batch, concurrently, and each record's weighted total (None: unscorable,
    as each reward's ``when_unscored`` decides). ``first_record``: the number of ``rows[0]`` in the
    whole input, for messages about records. ``errors`` counts, per reward, the records it failed
    on; each batch's failures are logged at debug level (callers report them once: ``unscored``).
    ``prompts``: strings, or ``Prompt``s whose messages TRL-convention rewards get (``prompt_text``)."""
    for reward in rewards:  # surface missing columns before any work starts
        reward.column_kwargs(rows, first_record)
    with ThreadPoolExecutor(max_workers=max(1, len(rewards)), thread_name_prefix="rlvr-reward") as ex:
        futures = [ex.submit(run_reward, r, prompts, completions, completion_ids, rows, first_record) for r in rewards]
        runs = [f.result() for f in futures]
    values, infos, errors, metrics = {}, {}, Counter(), {}
    for reward, run in zip(rewards, runs):
        values[reward.name], infos[reward.name] = run.values, run.infos
        metrics.update(metric_sums(reward.name, run.metrics))
        if run.failed:
            errors[reward.name] += len(run.failed)
            log.debug("%s", run.message(reward.name, first_record))
    weighted = [r for r in rewards if r.weight != 0]
    total = [weighted_total([(r.weight, values[r.name][i], r.when_unscored) for r in weighted])
             for i in range(len(completions))]
    return RewardBatch([r.name for r in rewards], values, infos, total, errors, metrics=metrics)


def weighted_total(parts: Sequence[tuple[float, float | None, str]]) -> float | None:
    """A record's total from (weight, value, when_unscored) of each weighted reward: None when a
    ``void`` reward could not score it, or when no reward scored it and none counts as ``zero``."""
    if any(v is None and mode == "void" for _, v, mode in parts):
        return None
    counted = [w * (0.0 if v is None else v) for w, v, mode in parts if v is not None or mode == "zero"]
    total = sum(counted) if counted else None
    return total if total is None or math.isfinite(total) else None  # huge weights times values: no total


def bind_rewards(recipe_rewards: Mapping[str, Any], registry, conversational: bool = False,
                 when_unscored: str = "void", max_abs: float = DEFAULT_MAX_ABS) -> list[BoundReward]:
    """The recipe's ``rewards:`` section as callable rewards (names already resolved; the options
    are checked again, and converted, by ``BoundReward``). ``conversational``: the recipe's
    prompts are chat messages (``prompt.chat_template``), so TRL-convention rewards get
    conversational completions, as TRL gives them. ``when_unscored``: the recipe's, for the
    entries that do not set their own; ``max_abs``: the recipe's ``max_abs_reward``, likewise."""
    return [
        BoundReward(registry.reward(name), entry.weight, dict(entry.options), dict(entry.columns), conversational,
                    entry.when_unscored or when_unscored, entry.max_abs or max_abs)
        for name, entry in recipe_rewards.items()
    ]
