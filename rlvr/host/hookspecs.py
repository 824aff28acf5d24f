"""The hooks a plugin can implement. Every hook name starts with ``rlvr_``.

A plugin is a module (or object) with functions decorated by ``rlvr.hookimpl``,
made discoverable through an entry point in the ``rlvr`` group::

    [project.entry-points.rlvr]
    countdown = "rlvr_countdown"

Each hook receives ``register``, a callback the host owns; its type below (a ``Protocol``) is
part of the spec. Specs grow only by adding optional arguments, so old plugins keep working.
docs/hooks.md has a runnable example for every hook.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Protocol

import pluggy

hookspec = pluggy.HookspecMarker("rlvr")


class RegisterReward(Protocol):
    """The ``register`` that ``rlvr_register_rewards`` receives."""

    def __call__(
        self,
        name: str,
        fn: Callable[..., Any],
        description: str | None = None,
        gold: Iterable[str] | None = None,
    ) -> None: ...


class RegisterTask(Protocol):
    """The ``register`` that ``rlvr_register_tasks`` receives."""

    def __call__(
        self,
        name: str,
        load: Callable[..., Iterable[dict]],
        columns: Iterable[str],
        description: str | None = None,
        splits: Iterable[str] = ("train", "test"),
    ) -> None: ...


@hookspec
def rlvr_register_rewards(register: RegisterReward) -> None:
    """Register reward functions: call ``register(name, fn, description=None, gold=None)`` once for each.

    Called each time the host loads its registry; a name registered twice fails, naming both plugins.

    :param register: The host's callback, :class:`RegisterReward`.
    :param name: The reward's name in recipes and on the command line (letters, digits, ``_-.``).
    :param fn: The reward, ``fn(prompts, completions, completion_ids, *, columns..., options...)``,
        returning one ``float | None | rlvr.Score`` per completion. Which keyword-only parameters
        are columns and which are options, what ``None`` means, how options are checked and what
        happens when it raises: the reward contract, written once in docs/hooks.md
        ("The reward contract") and tested against ``rlvr.host.registry.reward_signature``.
    :param description: One line for ``rlvr rewards``; default: the first line of ``fn``'s docstring.
    :param gold: The columns ``fn`` checks against as the answer key (``answer``, unit tests).
        ``rlvr validate`` refuses a recipe whose prompt shows one of them unless the recipe lists
        it in ``prompt.gold_in_prompt``. Default ``None``: every required column is gold; ``()``
        for a reward whose columns are all part of the problem statement.
    """


@hookspec
def rlvr_register_tasks(register: RegisterTask) -> None:
    """Register tasks (prompt sources): call ``register(name, load, columns, description=None,
    splits=('train', 'test'))`` once for each.

    Called each time the host loads its registry; a name registered twice fails, naming both plugins.

    :param register: The host's callback, :class:`RegisterTask`.
    :param name: The task's name in recipes (letters, digits, ``_-.``).
    :param load: ``load(split, *, data_dir, **options)`` yields dict rows, each carrying every
        name in ``columns``. ``data_dir`` is where offline copies of datasets live
        (``RLVR_DATA_DIR``). The task's options are ``load``'s keyword-only parameters other
        than ``data_dir``; a recipe sets them under ``task.options``.
    :param columns: The names every row carries; prompt templates and rewards use them.
    :param description: One line for ``rlvr tasks``; default: the first line of ``load``'s docstring.
    :param splits: The splits ``load`` accepts, ``("train", "test")`` by default; ``rlvr validate``
        rejects a recipe that asks for another.
    """


class RegisterEnvironment(Protocol):
    """The ``register`` that ``rlvr_register_environments`` receives."""

    def __call__(self, name: str, make: Callable[..., Any], description: str | None = None) -> None: ...


@hookspec
def rlvr_register_environments(register: RegisterEnvironment) -> None:
    """Register multi-turn environments: call ``register(name, make, description=None)`` once for each.

    Called each time the host loads its registry; a name registered twice fails, naming both plugins.

    :param register: The host's callback, :class:`RegisterEnvironment`.
    :param name: The environment's name in recipes (``environment.name``; letters, digits, ``_-.``).
    :param make: ``make(row, **options)`` builds the environment of one episode from its prompt
        row (a dict of the task's columns). It returns an object with ``stop`` (strings that end
        the policy's turn) and ``step(turn) -> rlvr.Reply``, and optionally ``state`` (a dict
        the rewards get as the ``env_state`` column) and ``close()``
        (:class:`rlvr.host.environments.Environment`). ``make``'s keyword-only parameters with
        defaults are its options, set by a recipe under ``environment.options`` and checked
        from their annotations like a reward's.
    :param description: One line for ``rlvr environments``; default: the first line of ``make``'s docstring.
    """


class RegisterTool(Protocol):
    """The ``register`` that ``rlvr_register_tools`` receives."""

    def __call__(self, name: str, fn: Callable[..., Any], description: str | None = None) -> None: ...


@hookspec
def rlvr_register_tools(register: RegisterTool) -> None:
    """Register tools, functions a model calls with JSON arguments: call ``register(name, fn,
    description=None)`` once for each.

    Called each time the host loads its registry; a name registered twice fails, naming both plugins.

    :param register: The host's callback, :class:`RegisterTool`.
    :param name: The tool's name in recipes (``environment.tools``) and in the model's calls.
    :param fn: The function: every parameter named and type-hinted (the JSON schema the model
        sees is built from the hints and the Google-style docstring, ``rlvr.kit.tools``); it
        returns something JSON can hold (``str``, numbers, lists, dicts).
    :param description: What the model is told the tool does; default: ``fn``'s docstring's
        description.
    """
