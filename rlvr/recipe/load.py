"""Loading a recipe: YAML (duplicate keys refused, ``1e-6`` read as a number), a profile merged
in section by section, ``--set key=value`` overrides, then the schema (``rlvr.recipe.spec``);
every problem is one ``RlvrError`` line naming the file and the setting (with did-you-mean, in
TRL's and verl's words too: ``rlvr.recipe.foreign``).
"""

from __future__ import annotations

import copy
import math
import os
import re
from pathlib import Path
from typing import Any, Mapping

import yaml
from pydantic import BaseModel, ValidationError

from rlvr import RlvrError
from rlvr.host.registry import did_you_mean
from rlvr.recipe.foreign import foreign_hint
from rlvr.recipe.spec import Recipe


# Nodes a recipe may hold once its aliases are expanded: real recipes hold hundreds; a 1 KB "billion
# laughs" (nine aliases of nine aliases, nine deep) is 9^9 nodes, minutes for anything that walks them.
MAX_EXPANDED_NODES = 100_000
# Characters likewise: one 1 MB string named by 100 aliases is 100 MB for whatever reads the recipe
# (rendering every prompt with it, as `validate --data` does); real recipes hold kilobytes.
MAX_EXPANDED_CHARS = 16 << 20


class RecipeLoader(yaml.SafeLoader):
    """PyYAML's safe loader, stricter: a key given twice in one mapping is an error (naming its
    line), not a silent "last one wins"; ``1e3``/``1e-6`` are numbers, as in YAML 1.2 (YAML 1.1
    reads a float without a dot as a string, so ``steps: 1e3`` would be refused); and a document
    whose aliases expand past :data:`MAX_EXPANDED_NODES` nodes or :data:`MAX_EXPANDED_CHARS`
    characters, or that contains itself, is refused before it is built."""

    def construct_document(self, node):
        _check_expanded_size(node)
        return super().construct_document(node)

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:
                    continue  # unhashable: the base class reports it
                if first is not None:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"duplicate key {key!r} (first given on line {first + 1})", key_node.start_mark,
                    )
                seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


def _check_expanded_size(root: yaml.Node) -> None:
    """Count the nodes and characters of ``root`` with every alias expanded, each distinct node
    once (depth first, without recursion); ``ConstructorError`` past a limit or on a node inside
    itself."""
    sizes: dict[int, int] = {}
    chars: dict[int, int] = {}
    open_nodes: set[int] = set()  # the current path from the root
    todo: list[tuple[yaml.Node, bool]] = [(root, False)]
    while todo:
        node, children_done = todo.pop()
        if id(node) in sizes:
            continue
        children = [] if isinstance(node, yaml.ScalarNode) else \
            [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else list(node.value)
        if children_done:
            open_nodes.discard(id(node))
            sizes[id(node)] = 1 + sum(sizes[id(child)] for child in children)
            chars[id(node)] = (len(node.value) if isinstance(node, yaml.ScalarNode) else
                               sum(chars[id(child)] for child in children))
            if sizes[id(node)] > MAX_EXPANDED_NODES:
                raise yaml.constructor.ConstructorError(
                    None, None, f"its aliases expand to more than {MAX_EXPANDED_NODES:,} values (an alias bomb?)",
                    node.start_mark)
            if chars[id(node)] > MAX_EXPANDED_CHARS:
                raise yaml.constructor.ConstructorError(
                    None, None, f"its aliases expand to more than {MAX_EXPANDED_CHARS:,} characters (an alias bomb?)",
                    node.start_mark)
            continue
        if id(node) in open_nodes:
            raise yaml.constructor.ConstructorError(None, None, "an alias refers to a node that contains it",
                                                    node.start_mark)
        open_nodes.add(id(node))
        todo.append((node, True))
        todo.extend((child, False) for child in children)


RecipeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def load_yaml(text: str) -> Any:
    """YAML text as Python data, with :class:`RecipeLoader`'s rules."""
    try:
        return yaml.load(text, Loader=RecipeLoader)  # noqa: S506 - a SafeLoader subclass
    except RecursionError:  # PyYAML's parser recurses once per level of nesting
        raise yaml.YAMLError("nested too deeply") from None


# Settings a recipe may write in short form, and their long form: `task: gsm8k` is
# `task: {name: gsm8k}`, `rewards: {format: 0.1}` is `rewards: {format: {weight: 0.1}}`,
# `data: {pool: true}` is `data: {pool: {enabled: true}}`.
def _long_form(keys: tuple[str, ...], value: Any) -> dict | None:
    if keys in (("task",), ("eval", "task")) and isinstance(value, str):
        return {"name": value}
    if len(keys) == 2 and keys[0] == "rewards" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return {"weight": value}
    if keys == ("data", "pool") and isinstance(value, bool):
        return {"enabled": value}
    return None


def _set_path(data: dict, dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    if not all(keys):
        raise RlvrError(f"--set {dotted}: empty name between dots")
    node = data
    for depth, key in enumerate(keys[:-1]):
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        long_form = _long_form(tuple(keys[: depth + 1]), child)
        if long_form is not None:  # --set task.options.size=3 when the recipe says `task: gsm8k`
            child = node[key] = long_form
        if not isinstance(child, dict):
            raise RlvrError(f"--set {dotted}: {'.'.join(keys[: depth + 1])} is {child!r}, not a section")
        node = child
    node[keys[-1]] = value


def parse_overrides(pairs: list[str]) -> list[tuple[str, Any]]:
    """``KEY=VALUE`` strings as (key, value) pairs, each value read as YAML (``1e-6`` a number,
    ``[1, 4]`` a list, ``{r: 4}`` a mapping; what is not YAML stays a string)."""
    out = []
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise RlvrError(f"--set expects key=value (e.g. trainer.lr=1e-6), got {pair!r}")
        try:
            value = load_yaml(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        out.append((key.strip(), value))
    return out


def _format_validation_error(source: str, exc: ValidationError) -> str:
    errors = exc.errors()
    # An unknown key first: a misspelt one (`reward:`) is also why a required one is missing.
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = ".".join(str(p) for p in err["loc"]) or "recipe"
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        parent = Recipe
        for part in err["loc"][:-1]:
            field = getattr(parent, "model_fields", {}).get(str(part))
            parent = _model_of(field.annotation) if field else None
            if parent is None:
                break
        foreign = foreign_hint(err["loc"], err.get("input"))  # TRL's learning_rate is trainer.lr
        hint = f"; {foreign}" if foreign else did_you_mean(str(err["loc"][-1]), parent.model_fields) if parent else ""
        msg = f"unknown setting{hint}"
    extra = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return f"{source}: {loc}: {msg}{extra}"


def _model_of(annotation: Any):
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_of(arg)
        if found:
            return found
    return None


def _merge(base: dict, extra: dict, keys: tuple[str, ...] = ()) -> dict:
    """``extra`` merged into ``base`` section by section; a section ``base`` gives in short form
    (``format: 0.1``) is widened first, so a profile's ``format: {options: ...}`` keeps the weight."""
    out = dict(base)
    for key, value in extra.items():
        here = (*keys, str(key))
        current = out.get(key)
        if isinstance(value, dict):
            current = _long_form(here, current) or current
        out[key] = _merge(current, value, here) if isinstance(value, dict) and isinstance(current, dict) else value
    return out


def _first_non_finite(value: Any, where: str = "") -> str | None:
    """The dotted place of the first nan or infinity in loaded YAML data, or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return where or "recipe"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _first_non_finite(item, f"{where}.{key}" if where else str(key))
        if found:
            return found
    return None


def recipe_profiles(path: str | os.PathLike) -> list[str]:
    """The names of a recipe file's profiles (for checking each; the file must load)."""
    profiles = _read(Path(path)).get("profiles") or {}
    return [str(name) for name in profiles] if isinstance(profiles, dict) else []


def _read(path: Path) -> dict:
    if not path.is_file():
        if path.exists():  # a folder, /dev/null, a pipe: a recipe may be read more than once
            raise RlvrError(f"{path}: not a recipe file (a regular YAML file)")
        raise RlvrError(f"recipe not found: {path}")
    try:
        data = load_yaml(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f": line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise RlvrError(f"{path}{where}: malformed YAML: {problem}") from None
    except UnicodeDecodeError:
        raise RlvrError(f"{path}: not a text file (not UTF-8)") from None
    except OSError as exc:
        raise RlvrError(f"{path}: cannot read: {exc.strerror}") from None
    if not isinstance(data, dict):
        raise RlvrError(f"{path}: a recipe is a YAML mapping (name:, task:, prompt:, rewards:, ...)")
    return data


def load_recipe(
    path: str | os.PathLike | Mapping[str, Any],
    overrides: list[str] | None = None,
    profile: str | None = None,
    settings: list[tuple[str, Any]] | None = None,
    defaults: list[tuple[str, Any]] | None = None,
) -> Recipe:
    """Read (a YAML file, or a recipe given as data: a mapping), apply a profile, ``--set``
    overrides (``KEY=VALUE``, read as YAML) and ``settings`` (``(key, value)`` pairs taken as
    they are: command-line options), validate. Bad input raises ``RlvrError`` (one line; it names
    the profile when one is applied). ``defaults``: (key, value) pairs set last, only where the
    recipe (after its profile and overrides) has no such key."""
    if isinstance(path, Mapping):
        data, source = copy.deepcopy(dict(path)), "recipe"
        data.setdefault("name", "recipe")
    else:
        path = Path(path)
        data, source = _read(path), str(path)
        data.setdefault("name", path.stem)
    if profile is not None:
        profiles = data.get("profiles") or {}
        if not isinstance(profiles, dict) or profile not in profiles:
            names = ", ".join(map(str, profiles)) if isinstance(profiles, dict) and profiles else "none"
            choices = map(str, profiles) if isinstance(profiles, dict) else []
            raise RlvrError(f"{source}: no profile {profile!r}{did_you_mean(profile, choices)}; profiles: {names}")
        if not isinstance(profiles[profile], dict):
            raise RlvrError(f"{source}: profiles.{profile} must be a mapping of settings")
        data = _merge(data, profiles[profile])
        source = f"{source} (profile {profile!r})"
    given = [*parse_overrides(overrides or []), *(settings or [])]
    for key, value in given:
        _set_path(data, key, value)
    for key, value in defaults or []:
        node = data
        for part in key.split(".")[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or key.split(".")[-1] not in node:
            _set_path(data, key, value)
    bad = _first_non_finite(data)
    if bad:
        raise RlvrError(f"{source}: {bad}: not a finite number (nan and infinities are refused)")
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as exc:
        raise RlvrError(_format_validation_error(source, exc)) from None
    recipe._given_outside = frozenset(key for key, _ in given)
    return recipe
