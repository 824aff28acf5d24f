"""Prompt templates: ``{{column}}`` fields over a dataset row; every other character is literal.

Why not ``str.format``: prompts for reasoning tasks are full of LaTeX (``\\boxed{}``,
``\\frac{a}{b}``) and single braces are ``str.format``'s syntax, so a recipe had to double
every brace and a forgotten one broke validation with a misleading hint. Double-brace fields
are what lm-evaluation-harness YAML tasks and Jinja chat templates use, they leave LaTeX alone,
and they are substituted in one pass (a value that itself holds ``{{x}}`` is not re-expanded;
no attribute or index access as ``{question.__class__}`` allows).

The rules, enforced by :func:`fields` so a mistake fails at ``rlvr validate``:

- ``{{ name }}`` (spaces optional) is a field; ``name`` is a column: letters, digits, ``_``,
  ``-``, not starting with a digit;
- any other ``{{...}}`` is an error (``{{}}`` is how ``str.format`` spelt ``{}``; write ``{}``);
- a single-brace ``{name}`` whose name is a column is an error too when the text has no
  ``{{...}}`` field: it is the old ``str.format`` syntax, and would reach the model as literal
  text.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

from rlvr import RlvrError

__all__ = ["fields", "render", "FIELD_HELP"]

FIELD_HELP = "fields are written {{column}}, other braces are literal, e.g. \\boxed{}"

_DOUBLE = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
_NAME = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_-]*)\s*")
_SINGLE = re.compile(r"(?<!\{)\{([A-Za-z_][A-Za-z0-9_-]*)\}(?!\})")


def fields(text: str, columns: Iterable[str] | None = None) -> list[str]:
    """Column names a template refers to, in order of appearance; malformed fields raise.

    ``columns`` (when given) enables the check for old single-brace fields that name a column.
    """
    names = []
    for m in _DOUBLE.finditer(text):
        name = _NAME.fullmatch(m.group(1))
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


def render(text: str, row: Mapping[str, Any]) -> str:
    """``text`` with each ``{{column}}`` replaced by ``str(row[column])``, in one pass."""

    def value(m: re.Match) -> str:
        name = _NAME.fullmatch(m.group(1))
        if name is None:
            raise RlvrError(f"{m.group(0)!r} is not a field: {FIELD_HELP}")
        try:
            return str(row[name.group(1)])
        except KeyError:
            raise RlvrError(f"prompt field {{{{{name.group(1)}}}}}: the row has no column "
                            f"{name.group(1)!r}") from None

    return _DOUBLE.sub(value, text)
