"""The hooks a plugin can implement. Every hook name starts with ``rlvr_``.

A plugin is a module (or object) with functions decorated by ``rlvr.hookimpl``,
made discoverable through an entry point in the ``rlvr`` group::

    [project.entry-points.rlvr]
    countdown = "rlvr_countdown"

Specs grow only by adding optional arguments, so old plugins keep working.
"""

from __future__ import annotations

from typing import Callable

import pluggy

hookspec = pluggy.HookspecMarker("rlvr")


@hookspec
def rlvr_register_rewards(register: Callable[..., None]) -> None:
    """Register reward functions: ``register(name, fn, description=None)``.

    ``fn(prompts, completions, completion_ids, *, <column>..., <option>=default...)``
    returns one ``float | None | rlvr.Score`` per completion; it may be ``async``.
    Keyword-only parameters without a default are dataset columns the reward needs;
    those with a default are options a recipe may set. Called once per manager.
    """


@hookspec
def rlvr_register_tasks(register: Callable[..., None]) -> None:
    """Register tasks (prompt sources): ``register(name, load, columns, description=None)``.

    ``load(split, *, data_dir, **options)`` yields dict rows that carry every name in
    ``columns``. ``data_dir`` is where offline copies of datasets live (``RLVR_DATA_DIR``).
    Called once per manager.
    """
