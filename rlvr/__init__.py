"""rlvr: reinforcement learning with verifiable rewards, on a laptop CPU or a GPU cluster.

The hook API for plugin authors (with the helpers in ``rlvr.kit``, all a plugin needs of rlvr):

- ``hookimpl``: decorate your ``rlvr_register_*`` functions with it.
- ``Score``: what a reward may return per sample when it wants to explain itself.
- ``RlvrError``: raise it for bad user input; the CLI prints its message on one line and exits 2.
- ``Reply``: what an environment's ``step`` returns (the Protocol: ``rlvr.host.environments``).

Training and evaluating from Python: ``from rlvr.api import train, evaluate`` (torch and vLLM
load only when called):

- ``train(recipe, overrides=..., rewards={name: fn} or [fn, ...], tasks={name: rows}, tools=[fn, ...], output_dir=...)``
  -> ``TrainResult`` (``final_model``, ``summary``, ``metrics()``, ``samples()``);
- ``evaluate(recipe, model, ...)`` -> ``EvalResult`` (``accuracy``, ``report``, ``samples()``).

The parts, each a subpackage whose docstring says what it owns and what it may import:
``kit`` (plugin authors' toolkit), ``host`` (plugin host), ``recipe`` (schema, loading, resolution),
``models``, ``rewards``, ``sampling``, ``evaluation``, ``training`` (the RLOO engine), ``runs``
(what a run writes), ``api`` and ``cli``. This module is the floor they all stand on: it imports
none of them (``tests/unit/test_layout.py`` checks it).
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
    """One sample's reward plus why. ``value=None`` means "cannot score this one".

    ``metrics``: what scoring this sample cost or measured (seconds, tokens, requests), as
    numbers by name, for the step's metrics: each name is summed over the step's samples and
    reported as ``reward/<reward>/<name>``; a name ending in ``_max`` is the largest, one ending
    in ``_mean`` the mean over the samples that reported it (docs/hooks.md, "The reward contract").
    """

    value: float | None
    info: dict[str, _typing.Any] = _dataclasses.field(default_factory=dict)
    metrics: _typing.Mapping[str, float] = _dataclasses.field(default_factory=dict)


@_dataclasses.dataclass
class Reply:
    """The environment's answer to one policy turn (``Environment.step`` returns it).

    ``text`` follows the policy's turn: inline (``role=None``, e.g. a tool's output right after
    the code block that produced it), or as a chat message of ``role`` ("user", "tool", ...)
    that the model's chat template renders, closing the policy's message and opening its next
    one. ``text`` is data, never chat structure: the host escapes its control and invisible
    format characters (``rlvr.kit.escape_controls``) and tokenizes it as text, so that no special
    token (``<|im_start|>``) can come out of it; only the template's wrapping around a ``role``
    message has them. With a ``role``, ``text`` may be a sequence of strings: that many messages
    of the role in a row (one tool result per call of the turn), each rendered as the template
    renders consecutive messages. ``done`` ends the episode after this reply (its text, if any, is still appended).
    ``metrics`` are summed over the episode and reported per episode as ``env/<key>``
    (``tool_calls``, ``tool_errors``, ``tool_timeouts`` are the conventional keys).
    """

    text: str | _typing.Sequence[str] = ""
    done: bool = False
    role: str | None = None
    metrics: _typing.Mapping[str, float] = _dataclasses.field(default_factory=dict)


def __getattr__(name: str):
    # rlvr.train and rlvr.evaluate lived here; they are rlvr.api's now (the root imports no part).
    if name in ("train", "evaluate"):
        raise AttributeError(f"rlvr.{name} is now rlvr.api.{name}: from rlvr.api import {name}")
    raise AttributeError(f"module 'rlvr' has no attribute {name!r}")


__all__ = ["hookimpl", "Score", "RlvrError", "Reply", "__version__"]
