"""rlvr: reinforcement learning with verifiable rewards, on a laptop CPU or a GPU cluster.

The hook API for plugin authors (with the helpers in ``rlvr.kit``, all a plugin needs of rlvr):

- ``hookimpl``: decorate your ``rlvr_register_*`` functions with it.
- ``Score``: what a reward may return per sample when it wants to explain itself.
- ``RlvrError``: raise it for bad user input; the CLI prints its message on one line and exits 2.
- ``Reply``: what an environment's ``step`` returns (``rlvr.host.environments``).

Training and evaluating from Python (``rlvr.api``; torch and vLLM load only when called):

- ``train(recipe, overrides=..., rewards={name: fn} or [fn, ...], tasks={name: rows}, output_dir=...)``
  -> ``TrainResult`` (``final_model``, ``summary``, ``metrics()``, ``samples()``);
- ``evaluate(recipe, model, ...)`` -> ``EvalResult`` (``accuracy``, ``report``, ``samples()``).

The parts, each a subpackage whose docstring says what it owns and what it may import:
``kit`` (plugin authors' toolkit), ``host`` (plugin host), ``recipe`` (schema, loading, resolution),
``models``, ``rewards``, ``sampling``, ``evaluation``, ``training`` (the RLOO engine), ``runs``
(what a run writes), ``api`` and ``cli``.
"""

# Imported under private names: ``dir(rlvr)`` and tab completion show rlvr's own names only.
import dataclasses as _dataclasses
import typing as _typing

import pluggy as _pluggy

__version__ = "0.1.0"

hookimpl = _pluggy.HookimplMarker("rlvr")


class RlvrError(Exception):
    """A problem with the user's input: shown as one line, exit status 2."""


@_dataclasses.dataclass(frozen=True, slots=True)
class Score:
    """One sample's reward plus why. ``value=None`` means "cannot score this one"."""

    value: float | None
    info: dict[str, _typing.Any] = _dataclasses.field(default_factory=dict)


from rlvr.host.environments import Reply  # noqa: E402 - after the names it may need


def train(recipe, **options):
    """Train on ``recipe`` (a path or a mapping) as ``rlvr train`` does; see ``rlvr.api.python.train``."""
    from rlvr.api.python import train as run

    return run(recipe, **options)


def evaluate(recipe, model=None, **options):
    """Evaluate ``model`` on ``recipe``'s eval split as ``rlvr eval`` does; see ``rlvr.api.python.evaluate``."""
    from rlvr.api.python import evaluate as run

    return run(recipe, model, **options)


__all__ = ["hookimpl", "Score", "RlvrError", "Reply", "train", "evaluate", "__version__"]
