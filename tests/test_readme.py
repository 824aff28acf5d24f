"""Every recipe snippet in README.md validates against the real registry, as `rlvr validate` would."""

import re
from pathlib import Path

import yaml

from rlvr.plugins import load_registry
from rlvr.recipe import load_recipe, resolve

ROOT = Path(__file__).resolve().parents[1]
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


def test_every_readme_recipe_validates(tmp_path):
    recipes = recipe_blocks(ROOT / "README.md")
    assert recipes, "README.md has no ```yaml recipe (a block with task: and rewards:)"
    registry = load_registry()
    for i, text in enumerate(recipes):
        check_recipe(text, registry, tmp_path, f"readme-{i}")
