"""Every recipe snippet in README.md validates against the real registry, as `rlvr validate` would;
its plugin example builds as a package and checks its options as it says."""

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from rlvr.host.registry import load_registry
from rlvr.recipe.load import load_recipe
from rlvr.recipe.resolve import resolve

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


def readme_plugin() -> tuple[str, str]:
    """The README's plugin example: (its rlvr_exact/__init__.py, its pyproject.toml)."""
    readme = ROOT / "README.md"
    source = next(b for b in fenced_blocks(readme, "python") if b.startswith("# rlvr_exact/__init__.py"))
    pyproject = next(b for b in fenced_blocks(readme, "toml") if b.startswith("# pyproject.toml") and "rlvr_exact" in b)
    return source, pyproject


def build_wheel(folder: Path) -> subprocess.CompletedProcess:
    """Build ``folder``'s wheel with this venv's setuptools, offline (as ``pip install
    --no-build-isolation`` would), into ``folder/dist``."""
    code = "from setuptools import build_meta; print(build_meta.build_wheel('dist'))"
    return subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_readme_pyproject_builds_beside_a_recipes_folder(tmp_path):
    """A plugin package with rlvr_exact/ and recipes/ folders builds from the README's snippet,
    and its wheel carries the package and the entry point (not the recipes as a package)."""
    source, pyproject = readme_plugin()
    (tmp_path / "rlvr_exact").mkdir()
    (tmp_path / "rlvr_exact" / "__init__.py").write_text(source)
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "exact.yaml").write_text("name: exact\n")
    (tmp_path / "pyproject.toml").write_text(pyproject)
    built = build_wheel(tmp_path)
    assert built.returncode == 0, built.stderr[-2000:]
    with zipfile.ZipFile(tmp_path / "dist" / built.stdout.strip().splitlines()[-1]) as wheel:
        names = wheel.namelist()
        entry_points = next(wheel.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    assert "rlvr_exact/__init__.py" in names and not any(n.startswith("recipes/") for n in names)
    assert re.search(r"^\[rlvr\]\nexact = rlvr_exact$", entry_points, re.M), entry_points

    # Without naming the package, the same folder is what setuptools stops at: the check above bites.
    (tmp_path / "pyproject.toml").write_text(pyproject.split("[tool.setuptools]")[0])
    assert "Multiple top-level packages" in build_wheel(tmp_path).stderr


def test_readme_reward_checks_its_options_as_the_readme_says():
    """The README's example reward registers, and ``ignore_case: 2`` gets the message it quotes."""
    import types

    from rlvr import RlvrError
    from rlvr.host.registry import get_plugin_manager

    source, _ = readme_plugin()
    module = types.ModuleType("rlvr_exact")
    exec(compile(source, "README.md rlvr_exact", "exec"), module.__dict__)
    pm = get_plugin_manager(load_entry_points=False)
    pm.register(module, name="rlvr_exact")
    spec = load_registry(pm).reward("exact")
    quoted = re.search(r"`ignore_case: 2` above exits 2 with `(.+?)`", " ".join((ROOT / "README.md").read_text().split()))
    assert quoted, "README.md no longer quotes the ignore_case error"
    try:
        spec.check_options({"ignore_case": 2})
    except RlvrError as exc:
        assert str(exc) == quoted.group(1)
    else:
        raise AssertionError("ignore_case: 2 was accepted")
    assert spec.check_options({"ignore_case": True}) == {"ignore_case": True}
