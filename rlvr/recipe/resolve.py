"""Checking a recipe against the plugin host, and reading its task's rows.

``resolve`` checks every name the recipe gives (task, rewards, environment) against what the
plugins registered, and their options, columns and template fields, before any model loads;
an option annotated ``Path`` (the ``dataset`` task's ``path``) is a local file or folder, and a
relative one, like ``data.pool_file``, is made to name it from the recipe's folder
(``Registry.use_recipe``; the current folder for a recipe given as data), wherever the command
runs. ``load_rows`` reads a task's rows; ``rlvr.recipe.rows`` checks each of them against the
recipe.
"""

from __future__ import annotations

import inspect
import typing
from pathlib import Path, PurePath
from typing import Iterator, Mapping

from rlvr import RlvrError
from rlvr.host.options import OptionChecker, option_checker
from rlvr.host.registry import Registry, RewardSpec, did_you_mean
from rlvr.kit.data import data_dir
from rlvr.kit.trust import unsandboxed_values
from rlvr.recipe.pool_file import check_pool_file
from rlvr.recipe.spec import PromptConfig, Recipe, RewardEntry, TaskRef, template_fields
from rlvr.recipe.template import fields


def resolve(recipe: Recipe, registry: Registry, import_code: bool = True) -> None:
    """Check every name in the recipe against what the plugins registered. A ``module:function``
    reward is located first (``Registry.reference``: refused unless the user chose its code);
    with ``import_code=False`` it is not imported, and its columns and options go unchecked."""
    base = recipe_folder(registry)
    _check_task(registry, recipe.task, recipe.prompt, [recipe.data.train_split], recipe, "", import_code, base)
    _check_task(registry, recipe.eval_task, recipe.eval_prompt, [recipe.eval_split], recipe, "eval.", import_code,
                base)
    _check_correctness(recipe)
    if recipe.data.pool_file is not None:
        recipe.data.pool_file = _from_folder(recipe.data.pool_file, base, "data.pool_file", recipe)
        check_pool_file(recipe)  # the file and its selection; its rows are matched when they load
    if recipe.environment is None and "environment" in recipe.rewards:
        raise RlvrError("reward 'environment' is the score of an episode's environment, but the recipe names no "
                        "environment (add environment: {name: ...}; `rlvr environments` lists them)")
    if recipe.environment is not None:
        env = recipe.environment
        spec = registry.environment(env.name)
        env.options = {**env.options, **_check_options(spec.fn, spec.name, "environment", spec.plugin, env.options,
                                                       "environment.options", base, registry, recipe)}
        recipe_tools(recipe, registry)


def recipe_tools(recipe: Recipe, registry: Registry) -> list:
    """The tools of the recipe's environment (``environment.tools``), each imported and its schema
    built (``rlvr.kit.tools.Tool``); one-line ``RlvrError`` for a name that cannot be had, two tools
    of one name, or an environment whose ``make`` takes no ``tools``."""
    env = recipe.environment
    if env is None or not env.tools:
        return []
    make = registry.environment(env.name).fn
    param = inspect.signature(make).parameters.get("tools")
    if param is None or param.kind is not param.KEYWORD_ONLY:
        takes = [s.name for s in registry.environments.values()
                 if "tools" in inspect.signature(s.fn).parameters]
        raise RlvrError(f"environment.tools: environment {env.name!r} does not run tools (its make takes no `tools`); "
                        f"environments that do: {', '.join(sorted(takes)) or 'none'}")
    tools, seen = [], {}
    for name in env.tools:
        tool = registry.tool(name)
        if tool.name in seen:
            raise RlvrError(f"environment.tools: {seen[tool.name]!r} and {name!r} are both called {tool.name!r}; "
                            "the model could not tell them apart")
        seen[tool.name] = name
        tools.append(tool)
    return tools


def recipe_folder(registry: Registry) -> Path:
    """Where a recipe's relative paths start: its folder, or the current one for a recipe given
    as data (a mapping, from Python)."""
    return registry.imports.recipe_folder or Path.cwd()


def task_columns(task, ref: TaskRef) -> tuple[str, ...]:
    """The columns a task's rows have: those it registered, or, for a task that registered none
    (a generic loader such as ``dataset``), the ones its ``columns`` option lists."""
    return tuple(task.columns) or tuple(ref.options.get("columns") or ())


def _first_row_columns(task, ref: TaskRef, split: str, where: str) -> set[str]:
    """The columns of a generic task's first row, for a recipe that does not list them (a TRL
    user's own file: its columns are what it holds); every row is checked before a model loads."""
    first = next(task_rows(task, ref, split, data_dir()), None)  # a missing file: the loader's one line
    if first is None:
        raise RlvrError(f"{where}task {task.name!r} split {split!r} has no rows to read its columns from")
    return set(first)


def reward_specs(recipe: Recipe, registry: Registry, imported: bool) -> Iterator[tuple[str, RewardEntry, RewardSpec]]:
    """(name, recipe entry, spec) of the recipe's rewards, but for the references left unimported."""
    for name, entry in recipe.rewards.items():
        if registry.reference(name) is None or imported:
            yield name, entry, registry.reward(name)


def _check_task(registry: Registry, ref: TaskRef, prompt: PromptConfig, splits: list[str], recipe: Recipe, where: str,
                imported: bool, base: Path) -> None:
    task = registry.task(ref.name)
    ref.options = {**ref.options, **_check_task_options(task, ref.options, where, base, registry, recipe)}  # 1e3 -> 1000
    columns = set(task_columns(task, ref)) or _first_row_columns(task, ref, splits[0], where)
    for split in splits:
        if task.splits and split not in task.splits:
            raise RlvrError(
                f"task {task.name!r} has no split {split!r}{did_you_mean(split, task.splits)}; "
                f"it has: {', '.join(task.splits)}"
            )
    _check_prompt(registry, columns, task.name, prompt, recipe, where, imported)
    for name, entry, spec in reward_specs(recipe, registry, imported):
        # names, types, choices and ranges, from the reward's signature; the defaults too, so that
        # an option a recipe must set (reward_model's model) is refused here when it is not
        spec.check_options({**spec.options, **entry.options})
        check_unsandboxed(spec.checker, entry.options, f"rewards.{name}.options", registry)
        for param, column in entry.columns.items():
            if param not in spec.columns + spec.optional_columns:
                raise RlvrError(f"rewards.{name}.columns: reward {name!r} takes no column {param!r}")
        for param in spec.columns:
            column = entry.columns.get(param, param)
            if column not in columns:
                raise RlvrError(
                    f"reward {name!r} needs column {column!r} but task {task.name!r} has only: "
                    f"{', '.join(sorted(columns))} (map one with rewards.{name}.columns.{param})"
                )


def _check_prompt(registry: Registry, columns: set[str], task_name: str, prompt: PromptConfig, recipe: Recipe,
                  where: str, imported: bool) -> None:
    """Fields name the task's columns, the template has one, and no reward's gold is shown."""
    used = template_fields(prompt, columns)
    missing = sorted(used - columns)
    if missing and "template" not in prompt.model_fields_set:
        raise RlvrError(f"{where}prompt.template is not given, so the prompt is the task's 'prompt' column (as in "
                        f"TRL's datasets), which task {task_name!r} lacks: give {where}prompt.template, e.g. "
                        f"\"{{{{{sorted(columns)[0]}}}}}\" (columns: {', '.join(sorted(columns))})")
    if missing:
        raise RlvrError(
            f"{where}prompt uses {{{{{missing[0]}}}}} but task {task_name!r} has no such column"
            f"{did_you_mean(missing[0], columns)}; columns: {', '.join(sorted(columns))}"
        )
    if not fields(prompt.template):
        raise RlvrError(f"{where}prompt.template has no {{{{column}}}} field: every prompt would be the same "
                        f"(columns: {', '.join(sorted(columns))})")
    gold = {}
    for name, entry, spec in reward_specs(recipe, registry, imported):
        for param in spec.gold_columns:
            gold.setdefault(entry.columns.get(param, param), name)
    allowed = set(prompt.gold_in_prompt)
    for column in sorted(allowed - set(gold)):
        raise RlvrError(f"{where}prompt.gold_in_prompt: {column!r} is not a gold column of the recipe's rewards"
                        f" (gold: {', '.join(sorted(gold)) or 'none'})")
    for column in sorted(used & set(gold) - allowed):
        raise RlvrError(
            f"{where}prompt shows {{{{{column}}}}}, the gold answer reward {gold[column]!r} checks against: "
            f"the model would be trained with the answer in its prompt; if that is intended, "
            f"add it to {where}prompt.gold_in_prompt"
        )


def _check_task_options(task, options: dict, where: str, base: Path, registry: Registry,
                        recipe: Recipe | None = None) -> dict:
    """A task's options are its loader's keyword-only parameters (but ``data_dir``)."""
    return _check_options(task.fn, task.name, "task", task.plugin, options, f"{where}task.options", base, registry,
                          recipe)


HOST_PASSED = {"task": ("data_dir",), "environment": ("tools",)}


def check_unsandboxed(checker: OptionChecker, values: Mapping, where: str, registry: Registry) -> None:
    """A value that runs code outside the sandbox (``rlvr.kit.Unsandboxed``; an option's default
    too) only when the user allowed it (``--allow-unsandboxed``, ``RLVR_ALLOW_UNSANDBOXED=1``):
    a recipe is data, and this one would run model-written code with the user's rights."""
    allowed = None
    for name, spec in checker.options.items():
        value = values.get(name, spec.default)
        marked = unsandboxed_values(spec.annotation)
        if not marked or not isinstance(value, typing.Hashable) or value not in marked:
            continue
        allowed = allowed or registry.imports.allows_unsandboxed()
        if allowed is None:
            raise RlvrError(f"{where}.{name}: {value!r} runs what the model writes outside the sandbox, with your rights; "
                            "a recipe may choose it only when you allow it: --allow-unsandboxed (or "
                            "RLVR_ALLOW_UNSANDBOXED=1)")


def _checker(fn, name: str, kind: str, plugin: str) -> OptionChecker:
    """The checker of the options of a task loader or an environment's ``make``: its keyword-only
    parameters (but ``data_dir``), checked from their annotations as reward options are."""
    params = inspect.signature(fn).parameters
    # Not options: a task's data_dir and an environment's tools are the host's to pass.
    allowed = {n: p.default for n, p in params.items() if p.kind is p.KEYWORD_ONLY and n not in HOST_PASSED.get(kind, ())}
    try:
        return option_checker(name, fn, allowed, kind=kind)
    except TypeError as exc:
        raise RlvrError(f"plugin {plugin!r}: {kind} {name!r}: {exc}") from None


def _check_options(fn, name: str, kind: str, plugin: str, options: dict, where: str, base: Path, registry: Registry,
                   recipe: Recipe | None = None) -> dict:
    """The options, checked (``_checker``; with ``**kwargs`` the loader takes other names too),
    a value outside the sandbox only with the user's consent (``check_unsandboxed``), those
    annotated ``Path`` made to name the file from ``base`` (and kept as strings)."""
    open_ended = any(p.kind is p.VAR_KEYWORD for p in inspect.signature(fn).parameters.values())
    checker = _checker(fn, name, kind, plugin)
    for option in options:
        if option not in checker.options and not open_ended:
            raise RlvrError(
                f"{where}: {kind} {name!r} has no option {option!r}"
                f"{did_you_mean(option, checker.options)}; options: {', '.join(checker.options) or 'none'}"
            )
    try:
        checked = checker.check({k: v for k, v in options.items() if k in checker.options})
    except RlvrError as exc:
        raise RlvrError(f"{where}: {exc}") from None
    check_unsandboxed(checker, {**options, **checked}, where, registry)
    for option in path_options(checker):
        if checked.get(option) is not None:
            checked[option] = _from_folder(options[option], base, f"{where}.{option}", recipe)
    return checked


def path_options(checker: OptionChecker) -> list[str]:
    """The options annotated ``Path`` (``Path | None`` too): local files or folders."""
    def is_path(annotation) -> bool:
        if isinstance(annotation, type) and issubclass(annotation, PurePath):
            return True
        return any(is_path(arg) for arg in typing.get_args(annotation))

    return [name for name, spec in checker.options.items() if is_path(spec.annotation)]


def task_paths(task, ref: TaskRef) -> dict[str, str]:
    """A task's local files or folders as the recipe (resolved) names them: option -> path."""
    names = path_options(_checker(task.fn, task.name, "task", task.plugin))
    return {name: ref.options[name] for name in names if ref.options.get(name) is not None}


def _from_folder(given, base: Path, where: str, recipe: Recipe | None = None) -> str:
    """``given`` (a path a recipe names) as read from ``base``; a relative path that is missing
    there but present in the current folder, where it was read from before, is refused with the
    two places named rather than read from either. A path ``--set`` (or an API override) gave
    (``where`` is its key) is read from the current folder, as any path on a command line."""
    path = Path(str(given)).expanduser()
    if path.is_absolute():
        return str(path)
    if recipe is not None and recipe.given_outside(where):
        return str(Path.cwd() / path)
    found = base / path
    if base.resolve() != Path.cwd().resolve() and not found.exists() and path.exists():
        raise RlvrError(f"{where}: {given} is read from the recipe's folder, where there is no {shown(found)}; "
                        f"the current folder's {given} is not read: name it relative to the recipe's folder "
                        f"({shown(base)}), or give an absolute path")
    return str(found)


def shown(path: str | Path) -> str:
    """A path as a user reads it: from the current folder when it lies under it."""
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _check_correctness(recipe: Recipe) -> None:
    correctness = recipe.eval.correctness_reward
    if correctness is not None and correctness not in recipe.rewards:
        raise RlvrError(
            f"eval.correctness_reward {correctness!r} is not among the recipe's rewards"
            f"{did_you_mean(correctness, recipe.rewards)}"
        )


def task_rows(task, ref: TaskRef, split: str, root: Path) -> Iterator[dict]:
    """A task's rows; a loader that raises (a plugin's bug, a missing file) or yields a
    non-mapping becomes one ``RlvrError`` line naming the task, its plugin and the split."""
    where = f"task {task.name!r} (plugin {task.plugin!r}) split {split!r}"
    rows = None
    try:
        rows = iter(task.fn(split, data_dir=root, **ref.options))
        for number, row in enumerate(rows, 1):
            if not isinstance(row, Mapping):
                raise RlvrError(f"{where}: row {number} is a {type(row).__name__}, not a mapping of columns")
            yield row
    except RlvrError:
        raise
    except Exception as exc:  # noqa: BLE001 - the plugin's failure, reported as the user sees it
        message = " ".join(str(exc).split()) or "(no message)"
        raise RlvrError(f"{where}: loading failed: {type(exc).__name__}: {message[:300]}") from exc
    finally:
        close = getattr(rows, "close", None)
        if close is not None:
            close()


def load_rows(registry: Registry, ref: TaskRef, split: str, limit: int | None = None) -> list[dict]:
    """The first ``limit`` rows (None: all) of a task's split; an empty split is an error."""
    rows = []
    for row in task_rows(registry.task(ref.name), ref, split, data_dir()):
        rows.append(dict(row))  # plain: where a row was read (a SourcedRow's) is for rlvr.recipe.rows
        if limit and len(rows) >= limit:
            break
    if not rows:
        raise RlvrError(f"task {ref.name!r} split {split!r} has no rows")
    return rows
