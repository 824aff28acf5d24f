"""Every recipe snippet in README.md validates against the real registry, as `rlvr validate` would;
its plugin example checks its options as it says."""

import re
from pathlib import Path

from helpers.docs import check_recipe, fenced_blocks, recipe_blocks
from rlvr.host.registry import load_registry

ROOT = Path(__file__).resolve().parents[2]


def test_every_readme_recipe_validates(tmp_path):
    recipes = recipe_blocks(ROOT / "README.md")
    assert recipes, "README.md has no ```yaml recipe (a block with task: and rewards:)"
    registry = load_registry()
    for i, text in enumerate(recipes):
        check_recipe(text, registry, tmp_path, f"readme-{i}")


def readme_plugin() -> str:
    """The README's plugin example: its rlvr_exact/__init__.py (its packaging, docs/hooks.md's, is
    built by tests/unit/test_docs_hooks.py)."""
    return next(b for b in fenced_blocks(ROOT / "README.md", "python") if b.startswith("# rlvr_exact/__init__.py"))


def test_readme_reward_checks_its_options_as_the_readme_says():
    """The README's example reward registers, and ``ignore_case: 2`` gets the message it quotes."""
    import types

    from rlvr import RlvrError
    from rlvr.host.registry import get_plugin_manager

    source = readme_plugin()
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
