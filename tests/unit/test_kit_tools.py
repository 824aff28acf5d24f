"""rlvr.kit.tools: schemas from Python functions (against transformers' get_json_schema as the
oracle), the calls a model writes (hostile and malformed ones included), and argument checks."""

from __future__ import annotations

import json
from typing import Any, Literal, Optional, Union

import pytest
from transformers.utils import get_json_schema

from rlvr import RlvrError
from rlvr.kit.tools import check_arguments, function_schema, parse_tool_calls, tools_prompt


def lookup(key: str, default: Optional[int] = None) -> int:
    """Look a key up in the table.

    Longer text about the table.

    Args:
        key: the key, for example "alpha";
            it is case-sensitive
        default: what to give back when the key is missing

    Returns:
        the value stored under the key
    """
    return 0


def kinds(a: int, b: float, c: bool, d: list[str], e: dict[str, int], f: tuple[int, str],
          g: Literal["x", "y"] = "x", h: Union[int, str] = 1, i: int | None = None) -> None:
    """Every kind of argument.

    Args:
        a: an integer
        b: a number
        c: a flag
        d: words
        e: counts
        f: a pair
        g: a choice
        h: either
        i: maybe
    """


@pytest.mark.parametrize("fn", [lookup, kinds])
def test_schemas_are_what_transformers_writes_for_a_documented_function(fn):
    assert function_schema(fn) == get_json_schema(fn)


def test_a_parameter_the_docstring_does_not_describe_is_allowed_without_a_description():
    def area(width: float, height: float = 1.0) -> float:
        """Area of a rectangle.

        Args:
            width: its width
        """
        return width * height

    params = function_schema(area)["function"]["parameters"]
    assert params["properties"] == {"width": {"type": "number", "description": "its width"},
                                    "height": {"type": "number"}}
    assert params["required"] == ["width"]


@pytest.mark.parametrize("source, message", [
    ("def f(x): pass", "has no type hint"),
    ("def f(*args: int): pass", "cannot be called with JSON arguments"),
    ("def f(**kw: int): pass", "cannot be called with JSON arguments"),
    ("def f(x: int, /): pass", "positional-only"),
    ("def f(x: complex): pass", "has no JSON type"),
    ("def f(x: dict[int, str]): pass", "string keys"),
    ("def f(x: 'Undefined'): pass", "cannot read"),
])
def test_what_json_cannot_call_is_refused_in_one_line(source, message):
    namespace: dict[str, Any] = {}
    exec(source, namespace)
    with pytest.raises(RlvrError, match=message) as caught:
        function_schema(namespace["f"])
    assert "\n" not in str(caught.value)


def test_a_tool_name_must_be_one_a_model_can_write():
    with pytest.raises(RlvrError, match="tool name"):
        function_schema(lookup, name="look up")
    assert function_schema(lookup, name="table.lookup")["function"]["name"] == "table.lookup"


CALL = '{"name": "lookup", "arguments": {"key": "alpha"}}'


@pytest.mark.parametrize("text, expected", [
    (f"<tool_call>\n{CALL}\n</tool_call>", [("lookup", {"key": "alpha"})]),
    (f"Let me look.\n<tool_call>{CALL}</tool_call>\n<tool_call>{CALL}</tool_call>",
     [("lookup", {"key": "alpha"})] * 2),
    (f"<tool_call>\n```json\n{CALL}\n```\n</tool_call>", [("lookup", {"key": "alpha"})]),
    ('<tool_call>{"name": "lookup", "arguments": "{\\"key\\": \\"alpha\\"}"}</tool_call>', [("lookup", {"key": "alpha"})]),
    ('<tool_call>{"name": "now"}</tool_call>', [("now", {})]),
    # a turn that ends where the tag would close (at its end-of-sequence), as vLLM's hermes parser reads it
    (f"<tool_call>\n{CALL}\n", [("lookup", {"key": "alpha"})]),
    (f"<tool_call>{CALL}</tool_call><tool_call>{CALL}", [("lookup", {"key": "alpha"})] * 2),
    (CALL, [("lookup", {"key": "alpha"})]),
    ('{"name": "lookup", "parameters": {"key": "alpha"}}', [("lookup", {"key": "alpha"})]),  # Llama 3.x
    (f"[{CALL}, {CALL}]", [("lookup", {"key": "alpha"})] * 2),  # Mistral's list
    (f"```json\n{CALL}\n```", [("lookup", {"key": "alpha"})]),
    ("The answer is \\boxed{42}.", []),
    ('{"answer": 42}', []),  # JSON that calls nothing is an answer
    ("[1, 2, 3]", []),
    ("", []),
])
def test_calls_are_read_in_the_formats_models_write(text, expected):
    calls = parse_tool_calls(text)
    assert [(c.name, c.arguments) for c in calls] == expected
    assert all(c.invalid is None for c in calls)


@pytest.mark.parametrize("text, kind", [
    ("<tool_call>{\"name\": \"lookup\", \"arguments\": {\"key\": </tool_call>", "bad_json"),
    ("<tool_call>not json at all</tool_call>", "bad_json"),
    ("<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": NaN}}</tool_call>", "bad_json"),
    ("<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": Infinity}}</tool_call>", "bad_json"),
    ("<tool_call>" + "[" * 100000 + "]" * 100000 + "</tool_call>", "too_large"),
    ("<tool_call>[1, 2]</tool_call>", "not_a_call"),
    ("<tool_call>{\"arguments\": {}}</tool_call>", "not_a_call"),
    ("<tool_call>{\"name\": 7}</tool_call>", "not_a_call"),
    ("<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>", "not_a_call"),
    ("<tool_call>{\"name\": \"f\", \"arguments\": \"{oops\"}</tool_call>", "bad_json"),
    ("<tool_call>{\"name\": \"f\", \"arguments\": {", "unclosed"),
    ("<tool_call>{\"name\": \"f\", \"arguments\": {}}\nand then some words", "unclosed"),
    ('{"name": "lookup", "arguments": {"key": }', "bad_json"),
])
def test_malformed_calls_are_invalid_with_a_kind_and_a_reason(text, kind):
    calls = parse_tool_calls(text)
    assert len(calls) == 1
    assert calls[0].invalid == kind
    assert calls[0].reason and "\n" not in calls[0].reason
    assert len(calls[0].text) <= 203


def test_deep_nesting_within_the_size_limit_is_bad_json_not_a_crash():
    deep = "<tool_call>" + '{"name": "f", "arguments": {"x": ' + "[" * 3000 + "]" * 3000 + "}}</tool_call>"
    (call,) = parse_tool_calls(deep, max_chars=10_000)
    assert call.invalid == "bad_json" and "deep" in call.reason


@pytest.mark.parametrize("text", [CALL, f"[{CALL}, {CALL}]", f"```json\n{CALL}\n```", '{"name": "f", "arguments": {"x": '])
def test_hermes_answers_a_json_call_without_its_tags_as_one_untagged_call(text):
    """What a policy drifted to under a lenient parser (the tool-call demo's `<|im_start|>{...}`,
    decoded without its special tokens) is not a call the hermes parser runs, nor an answer."""
    (call,) = parse_tool_calls(text, "hermes")
    assert call.invalid == "untagged" and call.name is None and "<tool_call>" in call.reason
    assert call.text == text.strip()[:200] + ("..." if len(text.strip()) > 200 else "")


def test_a_parser_named_reads_only_its_format():
    assert parse_tool_calls("The answer is 4.", "hermes") == parse_tool_calls('{"answer": 4}', "hermes") == []
    assert parse_tool_calls(f"<tool_call>{CALL}</tool_call>", "json") == []
    with pytest.raises(ValueError):
        parse_tool_calls(CALL, "xml")


PARAMS = function_schema(kinds)["function"]["parameters"]
GOOD = {"a": 1, "b": 2.5, "c": True, "d": ["x"], "e": {"k": 1}, "f": [1, "s"]}


@pytest.mark.parametrize("change, reason", [
    ({}, None),
    ({"b": 2}, None),  # an integer is a number
    ({"i": None, "h": "s", "g": "y"}, None),
    ({"a": True}, "argument 'a' must be integer, not true"),
    ({"a": 3.0}, "argument 'a' must be integer, not 3.0"),
    ({"a": "3"}, "argument 'a' must be integer, not string"),
    ({"c": 1}, "argument 'c' must be boolean, not 1"),
    ({"d": ["x", 2]}, "argument 'd'[1] must be string, not 2"),
    ({"e": {"k": "v"}}, "argument 'e'.k must be integer, not string"),
    ({"f": [1]}, "must have 2 items, not 1"),
    ({"f": [1, 2]}, "argument 'f'[1] must be string, not 2"),
    ({"g": "z"}, "must be one of"),
    ({"h": 1.5}, "must be integer or string"),
    ({"zzz": 1}, "unexpected argument 'zzz'"),
])
def test_arguments_are_checked_against_the_schema(change, reason):
    got = check_arguments(PARAMS, {**GOOD, **change})
    assert got is None if reason is None else reason in got


def test_a_missing_required_argument_is_named():
    assert check_arguments(PARAMS, {k: v for k, v in GOOD.items() if k != "b"}) == "missing required argument 'b'"


def test_the_fallback_prompt_lists_every_schema_and_the_call_format():
    schemas = [function_schema(lookup), function_schema(kinds)]
    text = tools_prompt(schemas)
    listed = text.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0].splitlines()
    assert [json.loads(line) for line in listed] == schemas
    example = text.split("<tool_call>\n", 1)[1].split("\n</tool_call>", 1)[0]
    assert set(json.loads(example.replace("<value>", "1"))) == {"name", "arguments"}


def test_an_integer_too_big_for_a_float_is_an_invalid_number_not_a_crash():
    """A model wrote a 400-digit integer for a float argument: math.isfinite raised
    OverflowError and the episode was left unscored. It is a bad argument like any other."""
    from rlvr.kit.tools import check_arguments

    schema = {"type": "object", "properties": {"x": {"type": "number"}, "n": {"type": "integer"}}}
    assert check_arguments(schema, {"x": 10**400}) == "argument 'x' must be number, not an integer of about 401 digits"
    assert check_arguments(schema, {"x": 10**300, "n": 10**400}) is None  # a float holds the one, an int the other
    assert check_arguments(schema, {"x": "1"}) == "argument 'x' must be number, not string"
