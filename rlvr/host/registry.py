"""The plugin host: one factory, host-owned registration callbacks, and the registries they fill.

Nothing here runs at import time. ``get_plugin_manager()`` builds a fresh manager each call
(tests use that to stay isolated); ``load_registry()`` asks every plugin to register its
tasks and rewards and returns what they registered, with who registered it.
"""

from __future__ import annotations

import importlib.metadata as md
import inspect
import logging
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterable, Mapping

import pluggy

from rlvr import RlvrError
from rlvr.host import hookspecs
from rlvr.host.hookspecs import RegisterEnvironment, RegisterReward, RegisterTask, RegisterTool
from rlvr.host.imports import CodeSource, ImportPolicy, check_function_name, load_callable
from rlvr.host.options import OptionChecker, did_you_mean, option_checker
from rlvr.kit import one_line
from rlvr.kit.tools import Tool, tool_from_function

log = logging.getLogger("rlvr.host")

PROJECT = "rlvr"
ENTRY_POINT_GROUP = "rlvr"
# Parameters every reward receives positionally; the rest of its signature is columns and options.
REWARD_POSITIONAL = ("prompts", "completions", "completion_ids")
# What TRL's trainers pass a reward besides those and the columns; rlvr passes none of them, so a
# reward written for TRL keeps their defaults (log_extra=None, ...) and none is taken for a column.
TRL_EXTRAS = ("trainer_state", "log_extra", "log_metric")


def _allow_list() -> set[str] | None:
    """``RLVR_LOAD_PLUGINS``: unset = all; empty = none; else comma-separated entry-point names."""
    value = os.environ.get("RLVR_LOAD_PLUGINS")
    if value is None:
        return None
    return {name.strip() for name in value.split(",") if name.strip()}


class PluginManager(pluggy.PluginManager):
    """pluggy's manager, knowing which distribution (and version) each entry-point plugin came from."""

    def __init__(self):
        super().__init__(PROJECT)
        self.sources: dict[int, tuple[str, str]] = {}  # id(plugin) -> (project, version)


def _entry_points() -> dict[str, tuple[md.EntryPoint, md.Distribution]]:
    """Every installed ``rlvr`` entry point by name, with its distribution; the first on sys.path
    wins, as in pluggy's ``load_setuptools_entrypoints``. One pass over the distributions: a pass
    for each plugin took a third of a second per manager with 14 plugins installed."""
    found: dict[str, tuple[md.EntryPoint, md.Distribution]] = {}
    for dist in md.distributions():
        for ep in dist.entry_points:
            if ep.group == ENTRY_POINT_GROUP:
                found.setdefault(ep.name, (ep, dist))
    return found


def get_plugin_manager(load_entry_points: bool = True) -> PluginManager:
    """A new manager with the hook specs added and the ``rlvr`` entry points loaded.

    A plugin that fails to import, or whose hooks do not match the specs (a misspelt hook name,
    a wrong argument), stops every command that loads plugins with one line naming the plugin
    and the fix: a plugin the user installed but silently ignored would look like our bug later
    ("unknown reward"). ``RLVR_LOAD_PLUGINS`` leaves it out.
    """
    pm = PluginManager()
    pm.add_hookspecs(hookspecs)
    if load_entry_points:
        allowed = _allow_list()
        entry_points = _entry_points()
        names = sorted(entry_points)
        for wanted in sorted(allowed or ()):
            if wanted not in names:
                raise RlvrError(
                    f"RLVR_LOAD_PLUGINS names {wanted!r}, which is not an installed plugin"
                    f"{did_you_mean(wanted, names)}; installed: {', '.join(names) or 'none'}"
                )
        for name in names:
            if allowed is not None and name not in allowed:
                continue
            ep, dist = entry_points[name]
            try:
                plugin = ep.load()
                pm.register(plugin, name=name)
            except pluggy.PluginValidationError as exc:
                raise RlvrError(
                    f"plugin {name!r} does not fit rlvr's hooks: {one_line(str(exc))}; "
                    "fix the plugin or leave it out with RLVR_LOAD_PLUGINS"
                ) from exc
            except Exception as exc:  # a broken third-party plugin must not look like our bug
                raise RlvrError(
                    f"plugin {name!r} (entry point group {ENTRY_POINT_GROUP!r}) failed to load: "
                    f"{type(exc).__name__}: {one_line(str(exc))}; disable it with RLVR_LOAD_PLUGINS"
                ) from exc
            pm.sources[id(plugin)] = (dist.metadata["Name"], dist.version)
        check_hook_names(pm)
    pm.check_pending()
    if os.environ.get("RLVR_TRACE_PLUGINS"):
        _trace(pm)
    return pm


def check_hook_names(pm: pluggy.PluginManager) -> None:
    """pluggy's ``check_pending`` as one ``RlvrError`` line: the plugin, the unknown hook, the
    hook it probably meant."""
    specs = sorted(name for name in dir(hookspecs) if name.startswith("rlvr_"))
    for name in list(vars(pm.hook)):
        caller = getattr(pm.hook, name)
        if name.startswith("_") or caller.has_spec():
            continue
        for impl in caller.get_hookimpls():
            if not impl.optionalhook:
                raise RlvrError(
                    f"plugin {pm.get_name(impl.plugin) or impl.plugin_name!r} implements {name!r}, "
                    f"which is not an rlvr hook{did_you_mean(name, specs)}; hooks: {', '.join(specs)}; "
                    "fix the plugin or leave it out with RLVR_LOAD_PLUGINS"
                )


def _trace(pm: pluggy.PluginManager) -> None:
    def before(hook_name, hook_impls, kwargs):
        names = ", ".join(pm.get_name(impl.plugin) or "?" for impl in hook_impls)
        print(f"rlvr: hook {hook_name} -> [{names}]", file=sys.stderr)

    def after(outcome, hook_name, hook_impls, kwargs):
        pass

    pm.add_hookcall_monitoring(before, after)


def plugin_source(pm: pluggy.PluginManager, plugin: object) -> tuple[str, str]:
    """(plugin name, "distribution version") of a registered plugin object."""
    name = pm.get_name(plugin) or repr(plugin)
    source = getattr(pm, "sources", {}).get(id(plugin))  # a plain pluggy manager has none
    return name, " ".join(source) if source else "not from a distribution"


@dataclass(frozen=True)
class Spec:
    """What a plugin registered under a name: its callable, a one-line description, and which
    plugin (and distribution version) it came from. Every kind has this shape; rewards and tasks
    add what they declare besides."""

    name: str
    fn: Callable[..., Any]  # reward: fn(prompts, ...); task: fn(split, *, data_dir, **options); environment: fn(row, **options)
    description: str
    plugin: str
    version: str
    kind: ClassVar[str] = "environment"  # an environment declares nothing more: make(row, **options) -> Environment


@dataclass(frozen=True)
class RewardSpec(Spec):
    """A reward: ``fn(prompts, completions, completion_ids, *, columns..., options...)``, or in
    TRL's convention (``convention == "trl"``) every argument by keyword: ``fn(prompts=...,
    completions=..., completion_ids=..., column=..., ...)``, as TRL's ``GRPOTrainer`` calls it."""

    kind: ClassVar[str] = "reward"
    columns: tuple[str, ...]  # required dataset columns
    optional_columns: tuple[str, ...]  # keyword-only, default None: a record's value, or None where it has none
    options: dict[str, Any]  # keyword-only with a non-None default: settable from a recipe
    accepts_any: bool  # has **kwargs: gets every column
    # Columns it checks against as the answer key (the prompt must not show them); None: the required ones.
    gold: tuple[str, ...] | None = None
    # Built once from fn's annotations (rlvr.host.options); built here when not given. Raises TypeError
    # for an annotation it cannot resolve or check (the registrar names the plugin).
    checker: OptionChecker | None = field(default=None, compare=False, repr=False)
    convention: str = "rlvr"  # or "trl": called by keyword only (see reward_signature)

    def __post_init__(self) -> None:
        if self.checker is None:
            object.__setattr__(self, "checker", option_checker(self.name, self.fn, self.options))

    @property
    def gold_columns(self) -> tuple[str, ...]:
        """The parameters a prompt must not show (before a recipe's column mapping)."""
        return self.columns if self.gold is None else self.gold

    def check_options(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """``values`` checked against the reward's options (converted, only those given); raises
        ``RlvrError`` with one line naming the reward, the option and what it accepts."""
        assert self.checker is not None
        return self.checker.check(values)


@dataclass(frozen=True)
class TaskSpec(Spec):
    """A task: ``fn(split, *, data_dir, **options)`` yields rows with ``columns``."""

    kind: ClassVar[str] = "task"
    columns: tuple[str, ...] = ()
    splits: tuple[str, ...] = ("train", "test")


@dataclass(frozen=True)
class ToolSpec(Spec):
    """A tool: a function the model calls with JSON arguments (``rlvr.kit.tools.Tool``: its schema
    was built when it was registered)."""

    kind: ClassVar[str] = "tool"
    tool: Tool | None = None


@dataclass
class Registry:
    rewards: dict[str, RewardSpec] = field(default_factory=dict)
    tasks: dict[str, TaskSpec] = field(default_factory=dict)
    environments: dict[str, Spec] = field(default_factory=dict)
    tools: dict[str, ToolSpec] = field(default_factory=dict)
    # Names a plugin registered wrongly: using one is an error with the reason; the rest work.
    broken: dict[str, str] = field(default_factory=dict)
    # What a recipe's module:function references may import (rlvr.host.imports), and from where
    # each was found; the top-level packages plugins were loaded from ("rlvr's plugins").
    imports: ImportPolicy = field(default_factory=ImportPolicy)
    sources: dict[str, CodeSource] = field(default_factory=dict)
    plugin_packages: dict[str, str] = field(default_factory=dict)

    def reward(self, name: str) -> RewardSpec:
        """A registered reward, or a ``module:function`` reference (TRL's convention or rlvr's),
        imported on first use once :meth:`reference` allows it."""
        if name not in self.rewards and ":" in name and name not in self.broken:
            self.rewards[name] = reward_from_reference(name, self.reference(name))
        if name in self.broken:
            raise RlvrError(self.broken[name])
        return _lookup(self.rewards, name, "reward")

    def reference(self, name: str, kind: str = "reward") -> CodeSource | None:
        """Where the module a ``module:function`` reward (or tool) names would be imported from,
        and why that is allowed, found without importing it; None for a registered name. One-line
        ``RlvrError`` when the reference may not be imported."""
        if ":" not in name:
            return None
        if name not in self.sources:
            module, _, attr = name.partition(":")
            if not module or not attr:
                raise RlvrError(f"{kind} {name!r}: a reference is module:function")
            try:
                check_function_name(attr)
                self.sources[name] = self.imports.locate(module, self.plugin_packages)
            except RlvrError as exc:
                raise RlvrError(f"{kind} {name!r}: {exc}") from None
        return self.sources[name]

    def use_recipe(self, path: str | os.PathLike) -> None:
        """References resolve against the folder of the recipe at ``path`` from now on; those
        found for another recipe are forgotten."""
        self.imports = self.imports.for_recipe(path)
        for name in self.sources:
            self.rewards.pop(name, None)
            self.tools.pop(name, None)
        self.sources.clear()

    def task(self, name: str) -> TaskSpec:
        return _lookup(self.tasks, name, "task")

    def environment(self, name: str) -> Spec:
        return _lookup(self.environments, name, "environment")

    def tool(self, name: str) -> Tool:
        """A registered tool, or a ``module:function`` reference (allowed as a reward's reference
        is, by :meth:`reference`), imported and its schema built on first use."""
        if name not in self.tools and ":" in name and name not in self.broken:
            source = self.reference(name, kind="tool")
            try:
                fn = load_callable(source, name.partition(":")[2])
            except RlvrError as exc:
                raise RlvrError(f"tool {name!r}: {exc}") from None
            self.tools[name] = make_tool_spec(name, fn, plugin=f"module {source.module}", version="",
                                              call_name=fn.__name__)
        if name in self.broken:
            raise RlvrError(self.broken[name])
        spec = _lookup(self.tools, name, "tool")
        assert spec.tool is not None
        return spec.tool


def _lookup(table: dict, name: str, kind: str):
    if name in table:
        return table[name]
    known = ", ".join(sorted(table)) or "none"
    raise RlvrError(f"unknown {kind} {name!r}{did_you_mean(name, table)}; registered: {known}")


def _describe(fn: Callable, description: str | None) -> str:
    if description:
        return description
    return first_sentence(" ".join((inspect.getdoc(fn) or "").strip().split("\n\n", 1)[0].split()))


def first_sentence(text: str) -> str:
    """``text`` up to the end of its first sentence: a ``.``, ``!`` or ``?`` outside brackets and
    quotes, followed by the end or by a space and a capital or a backquote (a docstring's first line often ends
    mid-sentence: lists of tasks and rewards cut there)."""

    def _starts(ch: str) -> bool:  # a sentence's first character: a capital, or a name in ``code``
        return ch.isupper() or ch == "`"

    depth, quote = 0, ""
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"" and (i == 0 or not text[i - 1].isalnum()):
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        elif ch in ".!?" and depth == 0 and (i + 1 == len(text) or text[i + 1] == " " and _starts(text[i + 2:i + 3])):
            return text[:i + 1]
    return text


def reward_signature(fn: Callable) -> tuple[tuple[str, ...], tuple[str, ...], dict[str, Any], bool, str]:
    """Split a reward's parameters into required columns, optional columns (default None) and
    options (another default), whether it takes ``**kwargs`` (then it gets every column), and its
    calling convention:

    - ``"rlvr"``: it takes three positional parameters, the first two named ``prompts,
      completions`` (or none named as TRL's keywords), or ``*args``; columns and options are
      keyword-only;
    - ``"trl"``: TRL's, every argument by keyword (``def reward(completions, solution,
      **kwargs)``): it names some of ``prompts``, ``completions``, ``completion_ids`` other than as
      that leading triple, or takes ``**kwargs``. Its other named parameters are columns and
      options; TRL's trainer extras (``log_extra``, ...) are left to their defaults.
    """
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    names = {p.name for p in params}
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    var_positional = any(p.kind is p.VAR_POSITIONAL for p in params)
    accepts_any = any(p.kind is p.VAR_KEYWORD for p in params)
    leading = tuple(p.name for p in positional[:3])
    rlvr_names = leading[:2] == REWARD_POSITIONAL[:2] or not names & set(REWARD_POSITIONAL)
    if var_positional or (len(positional) >= 3 and rlvr_names):
        convention, rest = "rlvr", [p for p in params if p.kind is p.KEYWORD_ONLY]
    elif names & set(REWARD_POSITIONAL) or accepts_any:
        if any(p.kind is p.POSITIONAL_ONLY for p in params):
            raise TypeError("a reward in TRL's convention is called by keyword: it cannot have positional-only "
                            "parameters")
        convention = "trl"
        rest = [p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
                and p.name not in REWARD_POSITIONAL and p.name not in TRL_EXTRAS]
    else:
        raise TypeError("a reward takes (prompts, completions, completion_ids, *, columns..., options...), or in "
                        "TRL's convention keywords such as (completions, **kwargs)")
    columns, optional, options = [], [], {}
    for param in rest:
        if param.default is param.empty:
            columns.append(param.name)
        elif param.default is None:
            optional.append(param.name)
        else:
            options[param.name] = param.default
    return tuple(columns), tuple(optional), options, accepts_any, convention


def reward_from_reference(reference: str, source: CodeSource) -> RewardSpec:
    """The reward a ``module:function`` reference names (a recipe's ``rewards:`` key), e.g.
    ``my_rewards:reward_len`` or ``trl.rewards:think_format_reward``, imported from ``source``
    (``Registry.reference``). One-line ``RlvrError`` when it cannot be had."""
    try:
        fn = load_callable(source, reference.partition(":")[2])
    except RlvrError as exc:
        raise RlvrError(f"reward {reference!r}: {exc}") from None
    return make_reward_spec(reference, fn, plugin=f"module {source.module}", version="")


def make_reward_spec(name: str, fn: Callable[..., Any], *, plugin: str, version: str, description: str | None = None,
                     gold: Iterable[str] | None = None) -> RewardSpec:
    """A reward's spec from its function; ``RlvrError`` naming the plugin and the reward when
    its signature or gold columns are wrong."""
    try:
        if not callable(fn):
            raise TypeError(f"{fn!r} is not callable")
        columns, optional, options, accepts_any, convention = reward_signature(fn)
        if gold is not None:
            gold = (gold,) if isinstance(gold, str) else tuple(gold)
            unknown = [c for c in gold if c not in columns + optional and not accepts_any]
            if unknown:
                raise ValueError(f"gold column {unknown[0]!r} is not one of its columns")
        return RewardSpec(name, fn, _describe(fn, description), plugin, version, columns, optional, options,
                          accepts_any, gold, convention=convention)
    except (TypeError, ValueError) as exc:
        raise RlvrError(f"plugin {plugin!r}: reward {name!r}: {exc}") from None


def make_tool_spec(name: str, fn: Callable[..., Any], *, plugin: str, version: str, description: str | None = None,
                   call_name: str | None = None) -> ToolSpec:
    """A tool's spec from its function, its schema built now (one-line ``RlvrError`` when it
    cannot be). ``call_name``: the name the model calls it by, when not ``name`` (a
    ``module:function`` reference is called by the function's name); ``description`` replaces
    the docstring's in what the model is told."""
    tool = tool_from_function(fn, call_name or name, origin=plugin)
    if description:
        tool.schema["function"]["description"] = description
    return ToolSpec(name, fn, _describe(fn, description), plugin, version, tool=tool)


def load_registry(pm: pluggy.PluginManager | None = None) -> Registry:
    """Call the registration hooks once; duplicates fail loudly naming both plugins."""
    pm = pm or get_plugin_manager()
    registry = Registry()
    for _, plugin in pm.list_name_plugin():  # in the order they were registered
        source = getattr(pm, "sources", {}).get(id(plugin))
        if source and inspect.ismodule(plugin):
            registry.plugin_packages.setdefault(plugin.__name__.split(".")[0], f"{source[0]}'s plugins")

    plugins = pm.get_plugins()

    def call_each(hook_name: str, make_register: Callable[[str, str], Any]) -> None:
        # One plugin at a time (through pluggy, so tracing sees it) to know who registered what.
        for plugin in plugins:
            if not any(impl.plugin is plugin for impl in getattr(pm.hook, hook_name).get_hookimpls()):
                continue
            caller = pm.subset_hook_caller(hook_name, remove_plugins=[p for p in plugins if p is not plugin])
            caller(register=make_register(*plugin_source(pm, plugin)))

    # The callbacks plugins receive: their signatures are the hookspecs' Protocols (tested).
    def reward_registrar(plugin: str, version: str) -> RegisterReward:
        def register(
            name: str, fn: Callable[..., Any], description: str | None = None, gold: Iterable[str] | None = None
        ) -> None:
            _check_name(name, "reward", registry.rewards, plugin)
            try:
                registry.rewards[name] = make_reward_spec(name, fn, plugin=plugin, version=version,
                                                          description=description, gold=gold)
            except RlvrError as exc:  # only this name fails, when used; every other command works
                registry.broken[name] = str(exc)
                log.warning(f"rlvr: {exc} (the reward is left out)")

        return register

    def task_registrar(plugin: str, version: str) -> RegisterTask:
        def register(
            name: str,
            load: Callable[..., Iterable[dict]],
            columns: Iterable[str],
            description: str | None = None,
            splits: Iterable[str] = ("train", "test"),
        ) -> None:
            _check_name(name, "task", registry.tasks, plugin)
            registry.tasks[name] = TaskSpec(
                name, load, _describe(load, description), plugin, version, tuple(columns), tuple(splits)
            )

        return register

    def environment_registrar(plugin: str, version: str) -> RegisterEnvironment:
        def register(name: str, make: Callable[..., Any], description: str | None = None) -> None:
            _check_name(name, "environment", registry.environments, plugin)
            if not callable(make):
                raise RlvrError(f"plugin {plugin!r}: environment {name!r}: make must be callable, not {make!r}")
            registry.environments[name] = Spec(name, make, _describe(make, description), plugin, version)

        return register

    def tool_registrar(plugin: str, version: str) -> RegisterTool:
        def register(name: str, fn: Callable[..., Any], description: str | None = None) -> None:
            _check_name(name, "tool", registry.tools, plugin)
            try:
                registry.tools[name] = make_tool_spec(name, fn, plugin=plugin, version=version, description=description)
            except RlvrError as exc:  # only this name fails, when used
                registry.broken[name] = f"plugin {plugin!r}: {exc}"
                log.warning(f"rlvr: plugin {plugin!r}: {exc} (the tool is left out)")

        return register

    call_each("rlvr_register_rewards", reward_registrar)
    call_each("rlvr_register_tasks", task_registrar)
    call_each("rlvr_register_environments", environment_registrar)
    call_each("rlvr_register_tools", tool_registrar)
    return registry


def _check_name(name: str, kind: str, table: dict, plugin: str) -> None:
    if not isinstance(name, str) or not name.replace("_", "").replace("-", "").replace(".", "").isalnum():
        raise RlvrError(f"plugin {plugin!r} registered a {kind} with an invalid name {name!r}")
    clash = next((n for n in table if n.lower() == name.lower()), None)
    if clash is not None:
        raise RlvrError(
            f"{kind} {name!r} is registered twice: by plugin {table[clash].plugin!r} "
            f"({table[clash].version}) and by plugin {plugin!r}; rename one "
            f"(did you mean {plugin + '_' + name!r}?) or disable one with RLVR_LOAD_PLUGINS"
        )
