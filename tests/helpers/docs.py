"""Code blocks in markdown files: the fenced blocks of one language, and the recipes among them
checked as `rlvr validate` checks a recipe (tests/unit/test_docs_readme.py, test_docs_hooks.py)."""

import re
from pathlib import Path

import yaml

from rlvr.recipe.load import load_recipe
from rlvr.recipe.resolve import resolve

FENCED = re.compile(r"^```(\w+)\n(.*?)^```", re.M | re.S)


def fenced_blocks(path: Path, language: str) -> list[str]:
    """The bodies of a markdown file's ```language blocks, in order."""
    return [body for lang, body in FENCED.findall(path.read_text()) if lang == language]


def recipe_blocks(path: Path) -> list[str]:
    """The ```yaml blocks that are recipes: they name a task and rewards."""
    blocks = fenced_blocks(path, "yaml")
    return [b for b in blocks if re.search(r"^task:", b, re.M) and re.search(r"^rewards:", b, re.M)]


def check_recipe(text: str, registry, folder: Path, name: str = "snippet") -> None:
    """Load and resolve one recipe's text, plain and with each of its profiles, as `rlvr validate`
    would; raises RlvrError with its message."""
    path = folder / f"{name}.yaml"
    path.write_text(text)
    for profile in [None, *(yaml.safe_load(text).get("profiles") or {})]:
        resolve(load_recipe(path, profile=profile), registry)
