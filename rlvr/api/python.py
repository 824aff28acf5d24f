"""``rlvr.train`` and ``rlvr.evaluate``: what ``rlvr train`` and ``rlvr eval`` do, from Python.

The recipe is a path or a mapping (the YAML as data); ``overrides`` are ``--set``'s, as a
mapping of dotted keys (``{"trainer.steps": 4}``) or ``KEY=VALUE`` strings. ``rewards`` maps
names to callables, either convention (``fn(prompts, completions, completion_ids, *, answer)``
or TRL's ``fn(completions, answer, **kwargs)``); a name the recipe does not list is added with
weight 1.0. ``tasks`` maps names to rows: a list of dicts (one in five held out for ``test``, by
a hash of the row), a mapping ``{split: rows}``, or a function ``fn(split) -> rows``. Everything
is checked before a model loads; bad input raises ``RlvrError`` with the CLI's one-line message.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from rlvr import RlvrError
from rlvr.host.registry import Registry, TaskSpec, load_registry, make_reward_spec
from rlvr.kit import in_test_split, read_jsonl
from rlvr.models.hub import check_model_name
from rlvr.recipe.load import load_recipe
from rlvr.recipe.rows import check_rows, training_parts
from rlvr.recipe.resolve import resolve
from rlvr.recipe.spec import Recipe
from rlvr.runs.metrics import step_rows
from rlvr.runs.outputs import check_folder_target
from rlvr.runs.tracking import check_trackers

Rows = Iterable[Mapping[str, Any]]


@dataclass(frozen=True)
class TrainResult:
    """What ``rlvr.train`` leaves: the run's folder, its final model (a transformers folder), the
    summary (held-out accuracy before and after, when the recipe evaluates) and its metrics."""

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
        """The records of ``samples.jsonl`` (of ``step`` only, when given)."""
        from rlvr.runs.samples import read_samples

        path = self.output_dir / "samples.jsonl"
        records = read_samples(path) if path.exists() else []
        return [r for r in records if step is None or r["step"] == step]


@dataclass(frozen=True)
class EvalResult:
    """What ``rlvr.evaluate`` leaves: the report (accuracy, pass@k, ...) and its folder."""

    output_dir: Path
    report: dict[str, Any]

    @property
    def accuracy(self) -> float:
        return self.report["accuracy"]

    def samples(self) -> list[dict]:
        """Each prompt's samples with their rewards (``samples.jsonl``)."""
        return list(read_jsonl(self.output_dir / "samples.jsonl"))


def train(recipe: str | Path | Mapping[str, Any], *, overrides: Mapping[str, Any] | Iterable[str] | None = None,
          rewards: Mapping[str, Callable] | None = None, tasks: Mapping[str, Any] | None = None,
          output_dir: str | Path | None = None, profile: str | None = None, resume: bool = False,
          verbose: bool = False) -> TrainResult:
    """Train as ``rlvr train`` does (one process; for several ranks use the CLI's launchers)."""
    from rlvr.training.engine import train as run_training

    rec, registry = prepare(recipe, overrides, rewards, tasks, profile)
    out = Path(output_dir) if output_dir is not None else Path("runs") / rec.name
    check_folder_target(out, "output_dir", private=True)
    with _process_env():
        summary = run_training(rec, registry, out, resume=resume, verbose=verbose)
    return TrainResult(out, summary)


DISTRIBUTED_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")

    check_rows(rec, registry, training_parts(rec))  # every row it will read, before any model loads

@contextmanager
def _process_env():
    """A run in this process sets up a world of one (``RANK``, ``MASTER_PORT``, ... in
    ``os.environ``): put them back as they were, so that a second run, or a child process, does
    not find the first one's port."""
    saved = {key: os.environ.get(key) for key in DISTRIBUTED_ENV}
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


    check_rows(rec, registry, ("eval",))
def evaluate(recipe: str | Path | Mapping[str, Any], model: str | Path | None = None, *,
             overrides: Mapping[str, Any] | Iterable[str] | None = None, rewards: Mapping[str, Callable] | None = None,
             tasks: Mapping[str, Any] | None = None, output_dir: str | Path | None = None,
             profile: str | None = None, verbose: bool = False) -> EvalResult:
    """Evaluate as ``rlvr eval`` does: ``model`` (a folder, hub id or alias; default the
    recipe's) on the recipe's eval split; library output goes to ``OUTPUT_DIR/eval.log``."""
    from rlvr.evaluation.evaluate import evaluate as run_evaluation
    from rlvr.runs.logs import RunOutput

    extra = {"model.name": str(model)} if model is not None else {}
    rec, registry = prepare(recipe, overrides, rewards, tasks, profile, extra)
    out = Path(output_dir) if output_dir is not None else Path("runs") / f"eval-{rec.name}"
    check_folder_target(out, "output_dir", private=True)
    with RunOutput(out, rank=0, verbose=verbose, total_steps=0, name="eval", announce=False):
        report = run_evaluation(rec, registry, out)
    return EvalResult(out, report)


def prepare(recipe, overrides, rewards, tasks, profile, extra: Mapping[str, Any] | None = None
            ) -> tuple[Recipe, Registry]:
    """The recipe, loaded and resolved against the installed plugins plus ``rewards`` and
    ``tasks``, its model name checked: everything but loading the model."""
    registry = load_registry()
    for name, fn in (rewards or {}).items():
        _new_name(registry.rewards, name, "reward")
        registry.rewards[name] = make_reward_spec(name, fn, plugin="python", version="")
    for name, rows in (tasks or {}).items():
        _new_name(registry.tasks, name, "task")
        registry.tasks[name] = task_from_rows(name, rows)
    strings, settings = _overrides(overrides)
    settings += list((extra or {}).items())
    # callables the recipe does not list count with weight 1.0
    rec = load_recipe(recipe, strings, profile, settings, defaults=[(f"rewards.{n}", 1.0) for n in rewards or {}])
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
    return TaskSpec(name, load, f"rows given to rlvr.train/evaluate as {name!r}", "python", "", tuple(sample), splits)


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
