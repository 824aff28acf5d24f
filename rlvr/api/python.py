"""``rlvr.api.train`` and ``rlvr.api.evaluate``: what ``rlvr train`` and ``rlvr eval`` do, from Python.

The recipe is a path or a mapping (the YAML as data); ``overrides`` are ``--set``'s, as a
mapping of dotted keys (``{"trainer.steps": 4}``) or ``KEY=VALUE`` strings. ``rewards`` are
callables, either convention (``fn(prompts, completions, completion_ids, *, answer)`` or TRL's
``fn(completions, answer, **kwargs)``): a mapping of names to callables, or TRL's list of them
(each named by its ``__name__``); a name the recipe does not list is added with weight 1.0.
``reward_weights``, as in TRL's config: one weight per reward, in order (they replace the
recipe's). ``tasks`` maps names to rows: a list of dicts (one in five held out for ``test``, by
a hash of the row), a mapping ``{split: rows}``, or a function ``fn(split) -> rows``. ``tools``:
functions the model may call with JSON arguments, as TRL's ``GRPOTrainer(tools=[...])`` takes
them (a list, each named by its ``__name__``, or a mapping of names to functions): they join the
recipe's ``environment.tools``, and a recipe without an environment gets the ``tools`` one.
Everything is checked before a model loads; bad input raises ``RlvrError`` with the CLI's
one-line message.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from rlvr import RlvrError
from rlvr.host.imports import ImportPolicy
from rlvr.host.registry import Registry, TaskSpec, load_registry, make_reward_spec, make_tool_spec
from rlvr.kit import close_shared, in_test_split, read_jsonl
from rlvr.kit.device import device_policy
from rlvr.models.hub import check_model_at_hand, check_model_name
from rlvr.recipe.load import load_recipe
from rlvr.recipe.resolve import resolve
from rlvr.recipe.rows import check_rows, training_parts
from rlvr.recipe.spec import Recipe
from rlvr.runs.metrics import step_rows
from rlvr.runs.outputs import check_folder_target
from rlvr.runs.tracking import check_trackers

Rows = Iterable[Mapping[str, Any]]
Rewards = Mapping[str, Callable] | Sequence[Callable] | Callable
Tools = Mapping[str, Callable] | Sequence[Callable] | Callable


@dataclass(frozen=True)
class TrainResult:
    """What ``rlvr.api.train`` leaves: the run's folder, its final model (a transformers folder, or
    for a LoRA run its adapter, which ``evaluate`` and every ``--model`` load merged into the
    base), the summary (held-out accuracy before and after, when the recipe evaluates) and its metrics."""

    output_dir: Path
    summary: dict[str, Any]

    @property
    def final_model(self) -> Path:
        return self.output_dir / "final"

    @property
    def metrics_path(self) -> Path:
        return self.output_dir / "metrics.jsonl"

    def metrics(self) -> list[dict]:
        """The rows of ``metrics.jsonl``, one per step (numbered from 1)."""
        return [row for _, row in step_rows(self.metrics_path)]

    def samples(self, step: int | None = None) -> list[dict]:
        """The records of ``samples.jsonl`` (of ``step`` only, when given): those of every
        ``trainer.samples_every``-th step and of the last. ``RlvrError`` when there are none to
        give, saying why, rather than an empty list that reads as "the model wrote nothing"."""
        from rlvr.runs.samples import read_samples

        path = self.output_dir / "samples.jsonl"
        records = read_samples(path) if path.exists() else []
        if not records:
            raise RlvrError(f"{self.output_dir} holds no samples: the run wrote none (trainer.samples_every: 0), "
                            "or it stopped before its first")
        chosen = [r for r in records if step is None or r["step"] == step]
        if not chosen:
            steps = sorted({r["step"] for r in records})
            raise RlvrError(f"no samples of step {step} in {self.output_dir}: it has the samples of steps "
                            f"{', '.join(map(str, steps))} (every trainer.samples_every steps, and the last)")
        return chosen


@dataclass(frozen=True)
class EvalResult:
    """What ``rlvr.api.evaluate`` leaves: the report (accuracy, pass@k, ...) and its folder."""

    output_dir: Path
    report: dict[str, Any]

    @property
    def accuracy(self) -> float:
        return self.report["accuracy"]

    def samples(self) -> list[dict]:
        """Each prompt's samples with their rewards (``samples.jsonl``)."""
        return list(read_jsonl(self.output_dir / "samples.jsonl"))


def train(recipe: str | Path | Mapping[str, Any], *, overrides: Mapping[str, Any] | Iterable[str] | None = None,
          rewards: Rewards | None = None, reward_weights: Sequence[float] | None = None,
          tasks: Mapping[str, Any] | None = None, tools: Tools | None = None, output_dir: str | Path | None = None,
          profile: str | None = None, resume: bool = False, verbose: bool = False,
          allow_unsandboxed: bool = False) -> TrainResult:
    """Train as ``rlvr train`` does (one process; for several ranks use the CLI's launchers).
    ``allow_unsandboxed``: as ``--allow-unsandboxed``."""
    from rlvr.training.engine import train as run_training

    rec, registry = prepare(recipe, overrides, rewards, tasks, profile, weights=reward_weights, tools=tools,
                            allow_unsandboxed=allow_unsandboxed)
    check_rows(rec, registry, training_parts(rec))  # every row it will read, before any model loads
    check_model_at_hand(rec.model.name)
    out = Path(output_dir) if output_dir is not None else Path("runs") / rec.name
    check_folder_target(out, "output_dir", private=True)
    with _run_scope():
        summary = run_training(rec, registry, out, resume=resume, verbose=verbose)
    return TrainResult(out, summary)


def evaluate(recipe: str | Path | Mapping[str, Any], model: str | Path | None = None, *,
             overrides: Mapping[str, Any] | Iterable[str] | None = None, rewards: Rewards | None = None,
             reward_weights: Sequence[float] | None = None, tasks: Mapping[str, Any] | None = None,
             tools: Tools | None = None, output_dir: str | Path | None = None, profile: str | None = None,
             verbose: bool = False, allow_unsandboxed: bool = False) -> EvalResult:
    """Evaluate as ``rlvr eval`` does: ``model`` (a folder, hub id or alias; default the
    recipe's) on the recipe's eval split; library output goes to ``OUTPUT_DIR/eval.log``.
    ``allow_unsandboxed``: as ``--allow-unsandboxed``."""
    from rlvr.evaluation.evaluate import evaluate as run_evaluation
    from rlvr.runs.logs import RunOutput

    extra = {"model.name": str(model)} if model is not None else {}
    rec, registry = prepare(recipe, overrides, rewards, tasks, profile, extra, weights=reward_weights, tools=tools,
                            allow_unsandboxed=allow_unsandboxed)
    check_rows(rec, registry, ("eval",))
    check_model_at_hand(rec.model.name)
    out = Path(output_dir) if output_dir is not None else Path("runs") / f"eval-{rec.name}"
    check_folder_target(out, "output_dir", private=True)
    with _run_scope(), RunOutput(out, rank=0, verbose=verbose, total_steps=0, name="eval", announce=False):
        report = run_evaluation(rec, registry, out)
    return EvalResult(out, report)


@contextmanager
def _run_scope():
    """What a run in the caller's process must give back, however it ends: the global random
    generators (Python's, numpy's, torch's), which the run seeds for its own reproducibility, and
    the process-wide worker pools (the rewards', the sandbox's), which it stops (``close_shared``):
    the next run starts its own."""
    import random

    import numpy as np
    import torch

    policy = device_policy()
    saved = random.getstate(), np.random.get_state(), torch.get_rng_state()
    cuda = policy.rng_state()
    try:
        yield
    finally:
        close_shared()
        random.setstate(saved[0])
        np.random.set_state(saved[1])
        torch.set_rng_state(saved[2])
        policy.set_rng_state(cuda)


def prepare(recipe, overrides, rewards, tasks, profile, extra: Mapping[str, Any] | None = None, *,
            weights: Sequence[float] | None = None, tools: Tools | None = None,
            allow_unsandboxed: bool = False) -> tuple[Recipe, Registry]:
    """The recipe, loaded and resolved against the installed plugins plus ``rewards`` (weighted
    by ``weights``, in order), ``tasks`` and ``tools``, its model name checked: everything but
    loading the model."""
    registry = load_registry()
    registry.imports = ImportPolicy(unsandboxed=allow_unsandboxed)
    rewards = named_rewards(rewards)
    for name, fn in rewards.items():
        _new_name(registry.rewards, name, "reward")
        registry.rewards[name] = make_reward_spec(name, fn, plugin="python", version="")
    for name, rows in (tasks or {}).items():
        _new_name(registry.tasks, name, "task")
        registry.tasks[name] = task_from_rows(name, rows)
    tools = named_tools(tools)
    for name, fn in tools.items():
        _new_name(registry.tools, name, "tool")
        registry.tools[name] = make_tool_spec(name, fn, plugin="python", version="")
    strings, settings = _overrides(overrides)
    settings = [*_weight_settings(list(rewards), weights), *settings, *(extra or {}).items()]
    # callables the recipe does not list count with weight 1.0
    defaults = [(f"rewards.{n}", 1.0) for n in rewards]
    rec = load_recipe(recipe, strings, profile, settings, defaults=defaults)
    if tools:  # they join the recipe's environment.tools (the `tools` environment where it has none)
        env = rec.environment
        listed = [*(env.tools if env else []), *(n for n in tools if not env or n not in env.tools)]
        section = env.model_dump() if env else {"name": "tools"}  # whole: the recipe may write it as a name
        setting = ("environment", {**section, "tools": listed})
        rec = load_recipe(recipe, strings, profile, [*settings, setting], defaults=defaults)
    if not isinstance(recipe, Mapping):  # its module:function rewards may come from its folder
        registry.use_recipe(recipe)
    resolve(rec, registry)
    check_model_name(rec.model.name)
    check_trackers(rec.trainer.report_to)
    return rec, registry


def task_from_rows(name: str, rows: Any) -> TaskSpec:
    """A task over rows held in Python: a list (one row in five held out for ``test``), a mapping
    of split names to lists, or a function of the split name."""
    if callable(rows):
        load, splits = (lambda split, **_: list(rows(split))), ("train", "test")
    elif isinstance(rows, Mapping):
        table = {str(split): [dict(r) for r in part] for split, part in rows.items()}
        load, splits = (lambda split, **_: table[split]), tuple(table)
    else:
        every = [dict(r) for r in rows]
        held = [in_test_split(r) for r in every]
        table = {"train": [r for r, h in zip(every, held) if not h], "test": [r for r, h in zip(every, held) if h]}
        load, splits = (lambda split, **_: table[split]), ("train", "test")
    sample = next((r for split in splits for r in load(split)), None)
    if not isinstance(sample, Mapping):
        raise RlvrError(f"task {name!r}: no rows, or rows that are not mappings of column to value")
    return TaskSpec(name, load, f"rows given to rlvr.api.train/evaluate as {name!r}", "python", "", tuple(sample), splits)


def named_tools(tools: Tools | None) -> dict[str, Callable]:
    """``tools`` as a mapping of names to functions: a mapping as given, a list (or one function)
    by each one's ``__name__``, as TRL names them; the model could not tell a lambda or two
    functions of one name apart: ``RlvrError``, asking for a mapping."""
    return _named(tools, "tools", "the model could call it by", "")


def named_rewards(rewards: Rewards | None) -> dict[str, Callable]:
    """``rewards`` as a mapping of names to callables: a mapping as given; TRL's list of callables
    (or one callable) named by each one's ``__name__``, as TRL names their columns. A lambda or
    two functions of one name cannot be told apart in the logs: ``RlvrError``, asking for a mapping."""
    return _named(rewards, "rewards", "to log its scores under", "; a reward the recipe names goes in its rewards section")


def _named(given: Any, kind: str, why: str, hint: str) -> dict[str, Callable]:
    if given is None:
        return {}
    if isinstance(given, Mapping):
        return dict(given)
    if callable(given):
        given = [given]
    if isinstance(given, (str, bytes)) or not isinstance(given, Iterable):
        raise RlvrError(f"{kind}: a list of {kind[:-1]} functions or a mapping {{name: function}}, not "
                        f"{type(given).__name__}")
    named: dict[str, Callable] = {}
    for i, fn in enumerate(given):
        name = getattr(fn, "__name__", None)
        if not callable(fn):
            raise RlvrError(f"{kind}[{i}]: {fn!r} is not a function{hint}")
        if not isinstance(name, str) or name == "<lambda>":
            raise RlvrError(f"{kind}[{i}]: {'a lambda' if name else repr(fn)} has no name {why}: "
                            f"pass {kind}={{'a_name': fn, ...}}")
        if name in named:
            raise RlvrError(f"{kind}: two functions named {name!r}: pass {kind}={{'a_name': fn, ...}} to name them apart")
        named[name] = fn
    return named


def _weight_settings(names: list[str], weights: Sequence[float] | None) -> list[tuple[str, Any]]:
    """``reward_weights`` as settings of each reward's weight, in the order the rewards were given."""
    if weights is None:
        return []
    if isinstance(weights, (str, bytes, Mapping)) or not isinstance(weights, Iterable):
        raise RlvrError("reward_weights: a list of numbers, one for each reward in rewards, in order")
    weights = list(weights)
    if len(weights) != len(names):
        raise RlvrError(f"reward_weights: {len(weights)} weights for {len(names)} rewards "
                        f"({', '.join(names) or 'none given'}); give one weight each, in order")
    return [(f"rewards.{name}.weight", weight) for name, weight in zip(names, weights)]


def _new_name(table: Mapping[str, Any], name: str, kind: str) -> None:
    if not isinstance(name, str) or not name.replace("_", "").replace("-", "").isalnum():
        raise RlvrError(f"{kind} name {name!r}: use letters, digits, _ and - only")
    if name in table:
        raise RlvrError(f"{kind} {name!r} is already registered by plugin {table[name].plugin!r}: pick another name")


def _overrides(overrides) -> tuple[list[str], list[tuple[str, Any]]]:
    """``KEY=VALUE`` strings (read as YAML, as ``--set``) and (key, value) pairs taken as given."""
    if overrides is None:
        return [], []
    if isinstance(overrides, Mapping):  # a path-like value (model.name=Path(...)) is its path
        return [], [(str(k), os.fspath(v) if isinstance(v, os.PathLike) else v) for k, v in overrides.items()]
    if isinstance(overrides, str):
        raise RlvrError("overrides: a mapping {'trainer.steps': 4} or a list of 'KEY=VALUE' strings, not one string")
    return [str(o) for o in overrides], []
