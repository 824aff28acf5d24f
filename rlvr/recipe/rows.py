"""Checking a task's rows against the recipe, before any model loads.

Every row a command will read must render the recipe's prompt (each ``{{column}}`` present and
not null; text, or chat messages for a template that is one column:
``rlvr.recipe.template.check_prompt_row``), hold each column a reward requires, not null (a
reward cannot score against a missing gold answer: training would go on with the sample
unscored), and each column the task lists. A problem is one line that names the row where the
user can open it: a file's path and line ("data/train.jsonl line 21", from the ``dataset``
task's :class:`rlvr.kit.data.SourcedRow`), else the task, split and row ("task 'mine' split
'train' row 17": a hub dataset, rows given from Python).

``check_rows`` runs in ``rlvr train``, ``eval`` and ``pool`` and in ``rlvr.api.train`` and
``rlvr.api.evaluate``, on the rows each reads (the first ``data.train_limit`` / ``eval.limit``), and
in ``rlvr validate --data`` on every row; checking is one pass over the rows (GSM8K's 8,792 rows,
train and test: well under a second). ``check_data_files`` is plain ``rlvr validate``'s: the
task's local files exist, no row read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from rlvr import RlvrError
from rlvr.host.registry import Registry
from rlvr.kit.data import data_dir
from rlvr.recipe.resolve import reward_specs, shown, task_columns, task_paths, task_rows
from rlvr.recipe.spec import PromptConfig, Recipe, TaskRef, template_fields
from rlvr.recipe.template import check_prompt_row

PARTS = ("train", "eval")


def training_parts(recipe: Recipe) -> tuple[str, ...]:
    """The rows ``rlvr train`` reads: the train split, and the eval split when it evaluates."""
    t = recipe.trainer
    return PARTS if t.eval_at_start or t.eval_at_end or t.eval_every else ("train",)


def _part(recipe: Recipe, part: str) -> tuple[TaskRef, str, PromptConfig, int | None, str]:
    """(task, split, prompt, row limit, the task's place in the recipe) of "train" or "eval"."""
    if part == "train":
        return recipe.task, recipe.data.train_split, recipe.prompt, recipe.data.train_limit, "task"
    where = "eval.task" if recipe.eval.task is not None else "task"
    return recipe.eval_task, recipe.eval_split, recipe.eval_prompt, recipe.eval.limit, where


def check_data_files(recipe: Recipe, registry: Registry, parts: tuple[str, ...] = PARTS) -> None:
    """The local files and folders the recipe's tasks name exist (options annotated ``Path``)."""
    base = "the recipe's folder" if registry.imports.recipe_folder else "the current folder (a recipe given as data)"
    for part in parts:
        ref, *_, where = _part(recipe, part)
        for option, path in task_paths(registry.task(ref.name), ref).items():
            if not Path(path).exists():
                raise RlvrError(f"{where}.options.{option}: no file or folder at {shown(path)} (a relative path is "
                                f"read from {base})")


def check_rows(recipe: Recipe, registry: Registry, parts: tuple[str, ...] = PARTS, every: bool = False,
               imported: bool = True) -> list[str]:
    """Read and check the rows of each part ("train", "eval") the command reads: the first
    ``data.train_limit`` or ``eval.limit`` of them, or all with ``every``. Raises ``RlvrError``
    naming the first bad row; returns a note per part with its row count. ``imported=False``:
    the columns of ``module:function`` rewards left unimported go unchecked (``rlvr validate``)."""
    check_data_files(recipe, registry, parts)
    notes = []
    for part in parts:
        ref, split, prompt, limit, _ = _part(recipe, part)
        task = registry.task(ref.name)
        needs = _needs(recipe, registry, task, ref, prompt, imported)
        count = 0
        for count, row in enumerate(task_rows(task, ref, split, data_dir()), 1):
            problem = _problem(row, needs, prompt)
            if problem:
                raise RlvrError(f"{_where(row, task.name, split, count)}: {problem}")
            if limit and not every and count >= limit:
                break
        if not count:
            raise RlvrError(f"task {task.name!r} split {split!r} has no rows")
        notes.append(f"{split}: {count} rows of task {task.name!r} read")
    return notes


def _needs(recipe: Recipe, registry: Registry, task, ref: TaskRef, prompt: PromptConfig,
           imported: bool) -> dict[str, tuple[str, bool]]:
    """Column -> (why the run needs it, whether a null will do), the first reason for each: the
    rewards' required columns (as the recipe maps them), the prompt's fields, the task's columns."""
    needs: dict[str, tuple[str, bool]] = {}
    for name, entry, spec in reward_specs(recipe, registry, imported):
        for param in spec.columns:
            needs.setdefault(entry.columns.get(param, param), (f"the reward {name!r} needs it", False))
    for column in sorted(template_fields(prompt)):
        needs.setdefault(column, (f"the prompt's {{{{{column}}}}} shows it", False))
    listed = "task.options.columns lists it" if not task.columns else f"task {task.name!r} lists it"
    for column in task_columns(task, ref):
        needs.setdefault(column, (listed, True))
    return needs


def _problem(row: Mapping[str, Any], needs: dict[str, tuple[str, bool]], prompt: PromptConfig) -> str | None:
    """What is wrong with one row, or None."""
    for column, (why, null_ok) in needs.items():
        if column not in row:
            return f"no column {column!r} ({why})"
        if row[column] is None and not null_ok:
            return f"column {column!r} is null ({why})"
    try:
        check_prompt_row(prompt, row)
    except RlvrError as exc:
        return str(exc)
    return None


def _where(row: Mapping[str, Any], task: str, split: str, number: int) -> str:
    """Where a row came from: its file and line (or row) when it knows them, else its task,
    split and place in the split."""
    source = getattr(row, "source", None)
    if source is not None:
        path, place = source
        return f"{shown(path)} {place}"
    return f"task {task!r} split {split!r} row {number}"
