"""What a recipe may ask for only when its user allows it.

A recipe is data people hand each other. Some option values run model-written code or model-chosen
tool calls outside rlvr's sandbox (a code reward's ``isolation: process``, a tools environment's
``run: process``): with the user's rights, their files and their network. A plugin marks such values
in the option's annotation::

    Isolation = Annotated[Literal["bwrap", "process"], Unsandboxed("process")]

and the host refuses a recipe that chooses one (its default included) unless the user passed
``--allow-unsandboxed`` or set ``RLVR_ALLOW_UNSANDBOXED=1`` (``rlvr.host.imports``). What the
user types on ``rlvr score --option`` is the user's own choice and needs no flag.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any, Iterator

__all__ = ["Unsandboxed", "unsandboxed_values"]


@dataclass(frozen=True)
class Unsandboxed:
    """``Annotated`` metadata: the values of an option that run code outside the sandbox."""

    values: frozenset

    def __init__(self, *values: Any):
        object.__setattr__(self, "values", frozenset(values))


def _markers(annotation: Any) -> Iterator[Unsandboxed]:
    if typing.get_origin(annotation) is typing.Annotated:
        yield from (m for m in annotation.__metadata__ if isinstance(m, Unsandboxed))
    for arg in typing.get_args(annotation):
        if not isinstance(arg, (str, int, float, bool)) and arg is not None:
            yield from _markers(arg)


def unsandboxed_values(annotation: Any) -> frozenset:
    """The values an option's annotation marks :class:`Unsandboxed` (through ``Annotated``,
    ``Optional`` and unions); empty when none."""
    found: set = set()
    for marker in _markers(annotation):
        found |= marker.values
    return frozenset(found)
