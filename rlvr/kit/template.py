"""``{{name}}`` templates: the field syntax of rlvr's prompts (``rlvr.recipe.template``), for
every text a user writes with fields in it (a judge's rubric too).

Why not ``str.format``: prompts for reasoning tasks are full of LaTeX (``\\boxed{}``,
``\\frac{a}{b}``) and single braces are ``str.format``'s syntax, so a recipe had to double
every brace and a forgotten one broke validation with a misleading hint. Double-brace fields
are what lm-evaluation-harness YAML tasks and Jinja chat templates use, they leave LaTeX alone,
and they are substituted in one pass (a value that itself holds ``{{x}}`` is not re-expanded;
no attribute or index access as ``{question.__class__}`` allows).

The rules, enforced by :func:`fields` so a mistake fails before anything runs:

- ``{{ name }}`` (spaces optional) is a field: letters, digits, ``_``, ``-``, not starting with
  a digit;
- any other ``{{...}}`` is an error (``{{}}`` is how ``str.format`` spelt ``{}``; write ``{}``);
- a single-brace ``{name}`` whose name is a known column is an error too when the text has no
  ``{{...}}`` field: it is the old ``str.format`` syntax, and would reach the model as literal
  text.

>>> fill("Is {{ answer }} in \\\\boxed{}?", {"answer": "42"}.__getitem__)
'Is 42 in \\\\boxed{}?'
"""

from __future__ import annotations

import re
from typing import Callable, Iterable

from rlvr import RlvrError

__all__ = ["FIELD", "FIELD_HELP", "FIELD_NAME", "fields", "fill"]

FIELD_HELP = "fields are written {{column}}, other braces are literal, e.g. \\boxed{}"

FIELD = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)  # a field, well formed or not: group 1 is what it holds
FIELD_NAME = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_-]*)\s*")  # what a well-formed field holds (fullmatch)
_SINGLE = re.compile(r"(?<!\{)\{([A-Za-z_][A-Za-z0-9_-]*)\}(?!\})")


def fields(text: str, columns: Iterable[str] | None = None) -> list[str]:
    """The names a template refers to, in order of appearance; a malformed field raises
    ``RlvrError``. ``columns`` (when given) enables the check for old single-brace fields that
    name one of them."""
    names = []
    for m in FIELD.finditer(text):
        name = FIELD_NAME.fullmatch(m.group(1))
        if name is None:
            raise RlvrError(f"{m.group(0)!r} is not a field: {FIELD_HELP}")
        names.append(name.group(1))
    if columns is not None and not names:
        known = set(columns)
        old = [m.group(1) for m in _SINGLE.finditer(text) if m.group(1) in known]
        if old:
            raise RlvrError(f"{{{old[0]}}} would reach the model as literal text: write {{{{{old[0]}}}}} "
                            f"({FIELD_HELP})")
    return names


def fill(text: str, value: Callable[[str], str]) -> str:
    """``text`` with each ``{{name}}`` replaced by ``value(name)``, in one pass (what ``value``
    returns is not expanded again); a malformed field raises ``RlvrError``, and so may ``value``
    for a name it has no text for."""

    def one(m: re.Match) -> str:
        name = FIELD_NAME.fullmatch(m.group(1))
        if name is None:
            raise RlvrError(f"{m.group(0)!r} is not a field: {FIELD_HELP}")
        return value(name.group(1))

    return FIELD.sub(one, text)
