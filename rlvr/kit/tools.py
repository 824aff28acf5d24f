"""Python functions as tools: their JSON schemas, the calls a model writes, and checking a call's
arguments against its schema. Pure functions, no model and no I/O.

- ``function_schema(fn)``: the OpenAI-style schema chat templates render (``apply_chat_template(...,
  tools=[...])``), from ``fn``'s type hints and its Google-style docstring; the same dict
  ``transformers.utils.get_json_schema`` gives for a documented function (tested against it), but
  a parameter the docstring does not describe is allowed (it has no ``description``), and what it
  cannot express is refused with a one-line ``RlvrError``.
- ``parse_tool_calls(text, parser)``: the calls in one policy turn, each valid or invalid with a
  kind and a reason. ``"hermes"``: every ``<tool_call>{...}</tool_call>`` (Qwen2.5, Hermes,
  SmolLM3 and the fallback prompt below); ``"json"``: a turn that is one JSON object or a list of
  them (Llama 3.x's ``{"name": ..., "parameters": ...}``, Mistral's list once its
  ``[TOOL_CALLS]`` token is dropped), bare or in one fenced block; ``"auto"``: ``hermes`` when the
  turn has a ``<tool_call>`` tag, else ``json``. A call object has ``name`` and ``arguments``
  (or ``parameters``), an object or a string that holds one (OpenAI's wire form).
- ``check_arguments(parameters, arguments)``: why ``arguments`` do not fit the schema's
  ``parameters`` (None when they do): a missing required argument, an unexpected one, a value
  of the wrong JSON type (``true`` is not an integer, ``3.0`` is not an integer either, ``NaN``
  is no number), not in the ``enum``; nested arrays and objects are checked the same way.
- ``tools_prompt(schemas)``: the fallback for a chat template that ignores ``tools=``: the
  schemas and the Hermes calling convention, as text for the system message.

Invalid kinds (``ToolCall.invalid``): ``bad_json``, ``not_a_call`` (JSON, but no name or
arguments that are an object), ``too_large`` (over ``max_chars`` characters), ``unclosed`` (a
``<tool_call>`` the turn never closed, and what follows it is not a whole call: a whole one at
the turn's end is read as vLLM's ``hermes`` parser reads it), ``untagged`` (a JSON call without the ``<tool_call>``
tags the ``hermes`` parser asks for), and, from the environment that knows the tools,
``unknown_tool`` and ``bad_arguments``.
"""

from __future__ import annotations

import inspect
import json
import math
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping, Sequence

from rlvr import RlvrError

__all__ = ["Tool", "ToolCall", "function_schema", "parse_tool_calls", "check_arguments", "tools_prompt",
           "tool_from_function", "INVALID_KINDS"]

Parser = Literal["auto", "hermes", "json"]
INVALID_KINDS = ("bad_json", "not_a_call", "too_large", "unclosed", "untagged", "unknown_tool", "bad_arguments")


@dataclass(frozen=True)
class Tool:
    """A function offered to the model: its name in calls, the function, its schema, and where it
    came from (the plugin that registered it, ``module M`` for a reference, ``python`` from the API)."""

    name: str
    fn: Callable[..., Any] = field(repr=False, compare=False)
    schema: dict = field(repr=False, compare=False)
    origin: str = ""

    @property
    def parameters(self) -> dict:
        return self.schema["function"]["parameters"]


def tool_from_function(fn: Callable[..., Any], name: str | None = None, origin: str = "") -> Tool:
    """A ``Tool`` for ``fn`` (its schema built now: ``RlvrError`` when it cannot be)."""
    schema = function_schema(fn, name)
    return Tool(schema["function"]["name"], fn, schema, origin)


# --- schemas ---------------------------------------------------------------------------------------

_SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null",
           list: "array", tuple: "array", set: "array", frozenset: "array", dict: "object"}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")


def function_schema(fn: Callable[..., Any], name: str | None = None) -> dict:
    """The schema of ``fn`` as a tool: ``{"type": "function", "function": {"name", "description",
    "parameters", "return"?}}``. Every parameter needs a type hint; ``*args`` and ``**kwargs``
    cannot be called with JSON arguments and are refused, as are hints JSON cannot express."""
    name = name or getattr(fn, "__name__", "")
    where = f"tool {name!r}"
    if not callable(fn):
        raise RlvrError(f"{where}: {fn!r} is not callable")
    if not _NAME.match(name or ""):
        raise RlvrError(f"tool name {name!r}: use letters, digits and _.- (up to 64), starting with a letter or _")
    try:
        signature = inspect.signature(fn)
        hints = typing.get_type_hints(fn)
    except (TypeError, ValueError, NameError) as exc:
        raise RlvrError(f"{where}: cannot read its signature or type hints: {exc}") from None
    description, args, returns = _docstring(inspect.getdoc(fn) or "")
    properties, required = {}, []
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise RlvrError(f"{where}: *{param.name} cannot be called with JSON arguments; name every parameter")
        if param.kind is param.POSITIONAL_ONLY:
            raise RlvrError(f"{where}: parameter {param.name!r} is positional-only; a call passes arguments by name")
        if param.name not in hints:
            raise RlvrError(f"{where}: parameter {param.name!r} has no type hint (the schema is built from them)")
        try:
            prop = _json_type(hints[param.name])
        except TypeError as exc:
            raise RlvrError(f"{where}: parameter {param.name!r}: {exc}") from None
        if param.name in args:
            prop["description"] = args[param.name]
        properties[param.name] = prop
        if param.default is param.empty:
            required.append(param.name)
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    out: dict[str, Any] = {"name": name, "description": description, "parameters": parameters}
    if "return" in hints:
        try:
            out["return"] = _json_type(hints["return"])
        except TypeError:
            out["return"] = {}
        if returns:
            out["return"]["description"] = returns
    return {"type": "function", "function": out}


def _json_type(hint: Any) -> dict:
    """The JSON schema of a type hint, as transformers writes it (``nullable`` for ``X | None``)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        return _json_type(args[0])
    if hint is Any or hint is inspect.Parameter.empty:
        return {}
    if origin is typing.Union or origin is types.UnionType:
        members = [a for a in args if a is not type(None)]
        if not members:
            return {"type": "null"}
        if len(members) == 1:
            out = _json_type(members[0])
        else:
            subs = [_json_type(m) for m in members]
            if all(set(s) == {"type"} and isinstance(s["type"], str) for s in subs):
                out = {"type": sorted({s["type"] for s in subs}, key=[s["type"] for s in subs].index)}
            else:
                out = {"anyOf": subs}
        if len(members) < len(args):
            out["nullable"] = True
        return out
    if origin is Literal:
        kinds = sorted({_SIMPLE.get(type(a), "") for a in args})
        if "" in kinds:
            raise TypeError(f"Literal values must be str, int, float, bool or None, not {args!r}")
        return {"type": kinds[0] if len(kinds) == 1 else kinds, "enum": list(args)}
    if origin in (list, set, frozenset) or origin in (typing.Sequence, typing.List) or hint in (list, set, frozenset):
        return {"type": "array", **({"items": _json_type(args[0])} if args else {})}
    if origin is tuple or hint is tuple:
        if not args or (len(args) == 2 and args[1] is Ellipsis):
            return {"type": "array", **({"items": _json_type(args[0])} if args else {})}
        return {"type": "array", "prefixItems": [_json_type(a) for a in args]}
    if origin is dict or origin is typing.Mapping or hint is dict:
        if args and args[0] is not str:
            raise TypeError(f"JSON objects have string keys, not {args[0]!r}")
        return {"type": "object", **({"additionalProperties": _json_type(args[1])} if args else {})}
    if hint in _SIMPLE:
        return {"type": _SIMPLE[hint]}
    raise TypeError(f"{hint!r} has no JSON type (use str, int, float, bool, list, dict, Literal, X | None)")


_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Returns|Return|Raises|Yields|Examples?|Notes?)\s*:\s*$")
_ARG = re.compile(r"^\s*(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def _docstring(doc: str) -> tuple[str, dict[str, str], str]:
    """(description, {argument: description}, what it returns) from a Google-style docstring."""
    lines = doc.splitlines()
    description, args, returns = [], {}, []
    section, current, indent = None, None, None
    for line in lines:
        head = _SECTION.match(line)
        if head:
            section, current, indent = head.group(1).lower(), None, None
            continue
        if section is None:
            description.append(line)
        elif section in ("args", "arguments", "parameters"):
            if not line.strip():
                continue
            depth = len(line) - len(line.lstrip())
            match = _ARG.match(line)
            if match and (indent is None or depth <= indent):
                indent, current = depth, match.group(1).lstrip("*")
                args[current] = match.group(2).strip()
            elif current is not None:
                args[current] = f"{args[current]} {line.strip()}".strip()
        elif section in ("returns", "return"):
            returns.append(line.strip())
    return "\n".join(description).strip(), args, " ".join(r for r in returns if r).strip()


# --- the calls in a turn ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ToolCall:
    """One call the model wrote: ``name`` and ``arguments`` when it could be read, ``invalid`` (a
    kind of ``INVALID_KINDS``) and ``reason`` when it cannot be run, and ``text``, what it wrote
    (its first 200 characters)."""

    name: str | None
    arguments: dict | None
    invalid: str | None = None
    reason: str = ""
    text: str = ""

    def refused(self, kind: str, reason: str) -> ToolCall:
        return ToolCall(self.name, self.arguments, kind, reason, self.text)


_TAG = re.compile(r"<tool_call>(.*?)(</tool_call>|$)", re.S)
_FENCE = re.compile(r"^```[a-zA-Z0-9_-]*[ \t]*\n(.*)\n```$", re.S)


def parse_tool_calls(text: str, parser: Parser = "auto", *, max_chars: int = 4000) -> list[ToolCall]:
    """The calls in one policy turn, in order (none: the turn is an answer). ``hermes``: each
    ``<tool_call>...</tool_call>``; a turn without one that is a JSON call nonetheless is one
    ``untagged`` invalid call (the format the prompt taught was not kept), not an answer.
    ``json``: a turn that is a JSON call (bare or fenced); ``auto``: ``hermes`` where the turn
    has a ``<tool_call>`` tag, else ``json``."""
    if parser not in ("auto", "hermes", "json"):
        raise ValueError(f"unknown tool-call parser {parser!r}")
    if "<tool_call>" in text and parser in ("hermes", "auto"):
        return [_read(m.group(1), max_chars) if m.group(2) else _unclosed(m.group(1), max_chars)
                for m in _TAG.finditer(text)]
    calls = _json_calls(text, max_chars)
    if parser == "hermes" and calls:
        return [ToolCall(None, None, "untagged", "a call goes between <tool_call> and </tool_call>, as the "
                         "prompt shows; it was not run", _clip(text))]
    return calls


def _json_calls(text: str, max_chars: int) -> list[ToolCall]:
    """A turn that is one JSON call or a list of them, bare or in one fenced block."""
    body = _unfence(text.strip())
    if not body.startswith(("{", "[")):
        return []
    if len(body) > max_chars:
        return [ToolCall(None, None, "too_large", f"the call is {len(body)} characters, over {max_chars}", _clip(body))]
    try:
        value = _loads(body)
    except ValueError as exc:
        return [ToolCall(None, None, "bad_json", f"not JSON: {exc}", _clip(body))] if '"name"' in body else []
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(i, dict) and "name" in i for i in items):
        return []  # JSON that calls nothing: the turn is an answer
    return [_call(item, json.dumps(item)) for item in items]


def _unfence(body: str) -> str:
    match = _FENCE.match(body)
    return match.group(1).strip() if match else body


def _clip(text: str) -> str:
    text = text.strip()
    return text if len(text) <= 200 else text[:200] + "..."


def _loads(text: str) -> Any:
    def refuse(constant: str):
        raise ValueError(f"{constant} is not a JSON number")

    try:
        return json.loads(text, parse_constant=refuse)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{exc.msg} at character {exc.pos}") from None


def _unclosed(body: str, max_chars: int) -> ToolCall:
    """A ``<tool_call>`` the turn ended in without ``</tool_call>``: a call when what follows the
    tag is one whole call (the turn ended where the tag would close: vLLM's ``hermes`` tool parser
    reads it so too), else ``unclosed``."""
    call = _read(body, max_chars)
    if call.invalid in (None, "too_large"):
        return call
    return ToolCall(None, None, "unclosed", "<tool_call> was not closed by </tool_call>", _clip(body))


def _read(body: str, max_chars: int) -> ToolCall:
    body = _unfence(body.strip())
    if len(body) > max_chars:
        return ToolCall(None, None, "too_large", f"the call is {len(body)} characters, over {max_chars}", _clip(body))
    try:
        value = _loads(body)
    except ValueError as exc:
        return ToolCall(None, None, "bad_json", f"not JSON: {exc}", _clip(body))
    return _call(value, body)


def _call(value: Any, text: str) -> ToolCall:
    if not isinstance(value, dict):
        return ToolCall(None, None, "not_a_call", f"a call is a JSON object, not {type(value).__name__}", _clip(text))
    name = value.get("name")
    if not isinstance(name, str) or not name:
        return ToolCall(None, None, "not_a_call", 'a call needs "name", a string', _clip(text))
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):  # OpenAI's wire form: the arguments object as a JSON string
        try:
            arguments = _loads(arguments) if arguments.strip() else {}
        except ValueError as exc:
            return ToolCall(name, None, "bad_json", f"its arguments string is not JSON: {exc}", _clip(text))
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return ToolCall(name, None, "not_a_call", f'"arguments" must be an object, not {_json_name(arguments)}',
                        _clip(text))
    return ToolCall(name, arguments, text=_clip(text))


# --- checking arguments ----------------------------------------------------------------------------

_JSON_NAMES = ((type(None), "null"), (bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
               (list, "array"), (dict, "object"))  # bool before int: True is no integer in JSON


def _json_name(value: Any) -> str:
    return next((name for kind, name in _JSON_NAMES if isinstance(value, kind)), type(value).__name__)


def _is(value: Any, kind: str) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":  # an integer too big for a float is no number a tool can take
        return isinstance(value, (int, float)) and not isinstance(value, bool) and _finite(value)
    return _json_name(value) == kind


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # math.isfinite(10**400)
        return False


def _shown(value: Any) -> str:
    """A number or boolean as JSON, cut to 40 characters (an integer of thousands of digits is
    not even written out whole: Python refuses to above 4300), else its JSON type's name."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**39:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    return json.dumps(value)[:40] if _json_name(value) in ("integer", "number", "boolean") else _json_name(value)


def _same(a: Any, b: Any) -> bool:
    """JSON equality: ``1`` and ``1.0`` are the same number, ``true`` is not ``1``."""
    if _is(a, "number") and _is(b, "number"):
        return a == b
    return type(a) is type(b) and a == b


def check_arguments(parameters: Mapping[str, Any], arguments: Mapping[str, Any]) -> str | None:
    """Why ``arguments`` do not fit the ``parameters`` schema (an object schema), or None."""
    return _check(parameters, arguments, "arguments", top=True)


def _check(schema: Mapping[str, Any], value: Any, where: str, top: bool = False) -> str | None:
    if value is None and schema.get("nullable"):
        return None
    if "anyOf" in schema:
        reasons = [_check(s, value, where) for s in schema["anyOf"]]
        return None if any(r is None for r in reasons) else f"{where}: {_json_name(value)} fits none of its types"
    kinds = schema.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else list(kinds)
        if not any(_is(value, k) for k in kinds):
            return f"{where} must be {' or '.join(kinds)}, not {_shown(value)}"
    if "enum" in schema and not any(_same(value, e) for e in schema["enum"]):
        return f"{where} must be one of {json.dumps(schema['enum'])[:200]}"
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for name in schema.get("required", ()):
            if name not in value:
                return f"missing required argument {name!r}" if top else f"{where}: missing {name!r}"
        extra = schema.get("additionalProperties", None if props or top else {})
        for key, item in value.items():
            sub = props.get(key, extra if isinstance(extra, Mapping) else None)
            if sub is None:
                known = ", ".join(props) or "none"
                return (f"unexpected argument {key!r} (its arguments: {known})" if top
                        else f"{where}: unexpected key {key!r}")
            reason = _check(sub, item, f"{where}.{key}" if not top else f"argument {key!r}")
            if reason:
                return reason
    if isinstance(value, list):
        prefix = schema.get("prefixItems")
        if prefix is not None:
            if len(value) != len(prefix):
                return f"{where} must have {len(prefix)} items, not {len(value)}"
            pairs = zip(prefix, value)
        else:
            pairs = ((schema.get("items", {}), item) for item in value)
        for i, (sub, item) in enumerate(pairs):
            reason = _check(sub, item, f"{where}[{i}]")
            if reason:
                return reason
    return None


# --- the fallback prompt ---------------------------------------------------------------------------

def tools_prompt(schemas: Sequence[Mapping[str, Any]]) -> str:
    """The tools and how to call them, as text for the system message of a model whose chat
    template does not render ``tools=`` (SmolLM2's): the schemas one JSON object a line inside
    ``<tools></tools>``, and the Hermes convention the ``hermes`` and ``auto`` parsers read."""
    listed = "\n".join(json.dumps(s, ensure_ascii=False) for s in schemas)
    return ("# Tools\n\nYou can call these functions. Their JSON schemas, one a line, within <tools></tools>:\n"
            f"<tools>\n{listed}\n</tools>\n\n"
            "To call one, write a JSON object with its name and arguments within <tool_call></tool_call> tags:\n"
            '<tool_call>\n{"name": "<function-name>", "arguments": {"<argument>": <value>}}\n</tool_call>\n'
            "The result comes back to you in the next message. When you have what you need, answer without a call.")
