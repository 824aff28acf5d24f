"""Reward options, checked against the reward's own signature before any scoring starts.

A reward's options are its keyword-only parameters with a default other than ``None``. What
values each accepts comes from its annotation, checked with pydantic:

- ``Literal["a", "b"]``: one of the choices (an unknown one is named with the close choice);
- ``Annotated[float, annotated_types.Gt(0)]`` (or ``Field(gt=0)`` in the ``Annotated``): a range;
- ``bool``, ``int``, ``str`` are strict wherever they appear: ``2`` or ``"maybe"`` is not a bool,
  ``5.5``, ``"5"`` or ``true`` is not an int (``5.0`` and ``1e3`` are); a ``float`` takes ints too (``5`` -> ``5.0``);
  numbers are finite (no ``.inf``/``.nan``); other types follow pydantic's usual rules.

An unannotated option must have the kind of its default: true or false for a ``bool`` default,
a number (int or float, kept as given) for an ``int`` or ``float`` default, a string for a
``str`` default; any other default checks nothing. A reward that wants more says so in its
annotation. Annotations may be strings (``from __future__ import annotations``); they are
resolved in the reward's module, once, when the plugin registers the reward.
"""

from __future__ import annotations

import collections.abc
import difflib
import enum
import functools
import inspect
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Mapping, Union

import annotated_types as at
from pydantic import BeforeValidator, ConfigDict, Field, Strict, ValidationError, create_model
from pydantic.fields import FieldInfo

from rlvr import RlvrError
from rlvr.kit import one_line

# Scalars are strict wherever they appear in an annotation (see the module docstring).
def _integral(value: Any) -> Any:
    """``1e3`` (YAML reads it as a float) for an integer option: a whole float is that integer."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


_STRICT = {bool: Annotated[bool, Strict()], int: Annotated[int, BeforeValidator(_integral), Strict()],
           str: Annotated[str, Strict()], float: Annotated[float, Strict()]}
# Containers whose item types are made strict too; anything else is left to pydantic as written.
_CONTAINERS = (list, tuple, set, frozenset, dict, collections.abc.Sequence, collections.abc.Mapping,
               collections.abc.Set)
_NUMBER = Union[int, float]  # what an unannotated int or float default stands for
_CONFIG = ConfigDict(arbitrary_types_allowed=True, allow_inf_nan=False, extra="forbid", loc_by_alias=True)
# pydantic error types that mean "not the kind of value the option takes": the message then
# says what it takes; any other error (a custom validator's) is shown as pydantic words it.
_KIND_ERRORS = {"literal_error", "enum", "bool_type", "bool_parsing", "int_type", "int_parsing", "int_from_float",
                "float_type", "float_parsing", "finite_number", "string_type", "greater_than", "greater_than_equal",
                "less_than", "less_than_equal", "multiple_of", "too_short", "too_long", "string_too_short",
                "string_too_long", "list_type", "tuple_type", "set_type", "dict_type", "is_instance_of", "none_required",
                "union_tag_invalid", "model_type", "dataclass_type"}


@dataclass(frozen=True)
class OptionSpec:
    """One option: its default, the annotation it is checked against, and that said in words."""

    name: str
    default: Any
    annotation: Any  # resolved; ``Any`` when nothing is checked
    allowed: str  # e.g. "one of boxed, hash", "a number > 0"; "anything" when nothing is checked
    choices: tuple = ()  # the Literal's values, for "did you mean"


# Options through which a recipe once chose where a reward's secret was read from: each is now
# refused saying where a secret comes from instead (rlvr.kit.http.user_secret).
SECRET_SOURCES = ("secret_file", "secret_env")


class OptionChecker:
    """A reward's (or a task's) options, checked the same way by ``rlvr validate``, ``train``,
    ``eval`` and ``score``."""

    def __init__(self, reward: str, options: Mapping[str, OptionSpec], kind: str = "reward"):
        self.reward = reward
        self.kind = kind
        self.options = dict(options)
        # One model per reward; fields are named o0, o1.. (aliased to the option names) so that an
        # option called ``json`` or ``copy`` cannot clash with BaseModel's own attributes.
        fields = {f"o{i}": (spec.annotation, Field(default=None, alias=name))
                  for i, (name, spec) in enumerate(self.options.items())}
        try:
            self._model = create_model(f"{_identifier(reward)}_options", __config__=_CONFIG, **fields)
        except Exception as exc:  # pydantic cannot check some annotation: the plugin's bug, said at registration
            raise TypeError(f"cannot check its options' annotations: {one_line(exc)}") from None
        self._field = {name: f"o{i}" for i, name in enumerate(self.options)}

    def check(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The options a recipe or ``--option`` set, checked and converted (``5`` -> ``5.0`` for a
        float); only those set, so the reward's own defaults apply to the rest. Raises ``RlvrError``."""
        for name in values:
            if name in SECRET_SOURCES and name not in self.options:
                raise RlvrError(f"{self.kind} {self.reward!r} option {name}: a recipe does not choose where a secret "
                                "is read from (it is data people hand each other); the user gives it for the service's "
                                "host: --secret HOST=FILE, or RLVR_SECRETS")
            if name not in self.options:
                known = ", ".join(self.options) or "none"
                raise RlvrError(f"{self.kind} {self.reward!r} has no option {name!r}{did_you_mean(str(name), self.options)}; "
                                f"options: {known}")
        try:
            model = self._model.model_validate(dict(values))
        except ValidationError as exc:
            raise RlvrError(self._message(exc, values)) from None
        return {name: getattr(model, self._field[name]) for name in values}

    def _message(self, exc: ValidationError, values: Mapping[str, Any]) -> str:
        errors = exc.errors(include_url=False)
        err = errors[0]
        name = str(err["loc"][0])
        spec, value = self.options[name], values[name]
        if err["type"] in _KIND_ERRORS:
            what = f"{_show(value)} is not {spec.allowed}"
            if spec.choices and isinstance(value, str):
                what += did_you_mean(value, [str(c) for c in spec.choices])
            if len(err["loc"]) > 1 and isinstance(err["loc"][1], int):  # which item of a list
                what += f" (item {err['loc'][1]}: {err['msg']})"
        else:
            inner = ".".join(map(str, err["loc"][1:]))
            what = f"{_show(value)}: {inner + ': ' if inner else ''}{err['msg'].removeprefix('Value error, ')}"
        more = len({e["loc"][0] for e in errors}) - 1
        return f"{self.kind} {self.reward!r} option {name}: {what}" + (f" (and {more} more)" if more > 0 else "")


def option_checker(reward: str, fn: Any, defaults: Mapping[str, Any], kind: str = "reward") -> OptionChecker:
    """The checker of ``fn``'s options (name -> default). Raises TypeError for an annotation that
    cannot be resolved or checked, naming the option; the registrar adds the plugin's name."""
    params = inspect.signature(fn).parameters
    specs = {}
    for name, default in defaults.items():
        if isinstance(default, FieldInfo):
            raise TypeError(f"option {name}: a pydantic Field() as the default would be passed to the reward as it is; "
                            f"write `{name}: Annotated[T, Field(...)] = value`")
        raw = params[name].annotation
        if raw is inspect.Parameter.empty:
            annotation = _inferred(default)
        else:
            annotation = _resolve(fn, name, raw)
        specs[name] = OptionSpec(name, default, _strict(annotation), describe(annotation), _choices(annotation))
    return OptionChecker(reward, specs, kind)


def _resolve(fn: Any, name: str, raw: Any) -> Any:
    """One option's annotation, string annotations evaluated in the reward's module (only the
    options': a column's annotation that names a TYPE_CHECKING-only import must not matter)."""
    if not isinstance(raw, str):
        return raw
    holder = types.SimpleNamespace(__annotations__={name: raw}, __globals__=_globals_of(fn))
    try:
        return typing.get_type_hints(holder, include_extras=True)[name]
    except Exception as exc:  # NameError for a missing import, SyntaxError, ...
        raise TypeError(f"option {name}: cannot resolve its annotation {raw!r}: "
                        f"{one_line(exc)}") from None


def _globals_of(fn: Any) -> dict:
    """The module namespace a reward's string annotations refer to (functions, partials, callables)."""
    target = inspect.unwrap(fn)
    while isinstance(target, functools.partial):
        target = inspect.unwrap(target.func)
    target = getattr(target, "__func__", target)  # bound methods
    if not isinstance(target, types.FunctionType):
        target = getattr(type(target).__call__, "__func__", type(target).__call__)
    return getattr(target, "__globals__", {})


def _inferred(default: Any) -> Any:
    """What an unannotated option's default says about it (see the module docstring)."""
    if isinstance(default, bool):
        return bool
    if isinstance(default, (int, float)):
        return _NUMBER
    if isinstance(default, str):
        return str
    return Any


def _strict(annotation: Any) -> Any:
    """``annotation`` with bool, int, float and str made strict wherever they appear."""
    if isinstance(annotation, type) and annotation in _STRICT:
        return _STRICT[annotation]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        return Annotated[(_strict(args[0]), *annotation.__metadata__)]
    if origin in (Union, types.UnionType):
        return Union[tuple(_strict(a) for a in args)]
    if origin in _CONTAINERS and args:
        return types.GenericAlias(origin, tuple(a if a is Ellipsis else _strict(a) for a in args))
    return annotation


def describe(annotation: Any) -> str:
    """An annotation in words, as ``rlvr rewards`` and error messages show it."""
    metadata: list = []
    while typing.get_origin(annotation) is Annotated:
        metadata += list(annotation.__metadata__)
        annotation = typing.get_args(annotation)[0]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is Any:
        return "anything"
    if origin is Literal:
        return "one of " + ", ".join(str(v) if isinstance(v, str) else repr(v) for v in args)
    if origin in (Union, types.UnionType):
        if set(args) == {int, float}:
            text = "a number"
        else:
            text = " or ".join(describe(a) for a in args if a is not type(None))
            return text + (" or null" if type(None) in args else "") + _bounds(metadata)
        return text + _bounds(metadata)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "one of " + ", ".join(str(m.value) for m in annotation)
    words = {bool: "true or false", int: "an integer", float: "a number", str: "a string", type(None): "null"}
    if isinstance(annotation, type) and annotation in words:
        return words[annotation] + _bounds(metadata)
    name = getattr(annotation, "__name__", None) if origin is None else None
    return (name or str(annotation).replace("typing.", "")) + _bounds(metadata)


_BOUND_WORDS = (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="), ("multiple_of", "a multiple of"),
                ("min_length", "of length >="), ("max_length", "of length <="))


def _bounds(metadata: list) -> str:
    """`` > 0 and <= 3600`` from annotated_types constraints, pydantic Field()s included."""
    found: dict[str, Any] = {}
    for item in metadata:
        parts = item.metadata if isinstance(item, FieldInfo) else [item]
        for part in parts:
            if isinstance(part, at.Interval):
                found.update({k: getattr(part, k) for k in ("gt", "ge", "lt", "le") if getattr(part, k) is not None})
            elif isinstance(part, at.Len):
                found.update({"min_length": part.min_length} if part.min_length else {})
                found.update({"max_length": part.max_length} if part.max_length is not None else {})
            else:
                for key, _ in _BOUND_WORDS:
                    value = getattr(part, key, None)
                    if value is not None and type(part).__module__.startswith("annotated_types"):
                        found[key] = value
    said = [f"{word} {found[key]!r}" for key, word in _BOUND_WORDS if key in found]
    return (" " + " and ".join(said)) if said else ""


def _choices(annotation: Any) -> tuple:
    """The values of the Literal in ``annotation`` (through Annotated and Optional), else ()."""
    while typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal:
        return args
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return tuple(m.value for m in annotation)
    if origin in (Union, types.UnionType):
        return tuple(v for a in args for v in _choices(a))
    return ()


def did_you_mean(name: str, choices: Any) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices``, else ``""`` (used for every name rlvr checks)."""
    close = difflib.get_close_matches(name, [str(c) for c in choices], n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _identifier(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name) or "reward"
