"""A recipe runs only code its user chose (rlvr.host.imports).

A hostile recipe once named the standard library's ``pty:spawn`` as a reward: ``rlvr validate``
said ok and ``rlvr eval`` ran the prompts as a command. A ``module:function`` reward now resolves
only to a module in the recipe's folder or the current folder, or an allow-listed name, decided
without importing it; these tests prove refused code never ran (tests/unit/test_host_trust.py: private
names, plugin internals and code outside the sandbox).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rlvr import RlvrError
from rlvr.host.imports import DEFAULT_ALLOWED, ImportPolicy
from rlvr.host.registry import Registry, load_registry
from helpers.host_imports import recipe, marker_module

STDLIB = ["pty:spawn", "subprocess:run", "builtins:exec", "antigravity:x", "os:system"]


@pytest.mark.parametrize("reference", STDLIB)
def test_the_standard_library_is_refused_without_importing_it(reference, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    registry = Registry()
    module = reference.partition(":")[0]
    was_loaded = module in sys.modules
    with pytest.raises(RlvrError, match=f"reward '{reference}': module '{module}' is part of Python's standard library"):
        registry.reward(reference)
    assert (module in sys.modules) == was_loaded  # antigravity (which opens a browser) was not imported
    monkeypatch.setenv("RLVR_ALLOW_MODULES", module)  # not even when allow-listed
    with pytest.raises(RlvrError, match="standard library"):
        Registry().reward(reference)


def test_a_function_an_allowed_module_imported_from_the_standard_library_is_refused(tmp_path, monkeypatch):
    (tmp_path / "helpers_reexport.py").write_text("from subprocess import run\nfrom os import system\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RlvrError, match="helpers_reexport:run is subprocess's 'run', which a recipe may not name"):
        Registry().reward("helpers_reexport:run")
    with pytest.raises(RlvrError, match="helpers_reexport:system is posix's 'system'"):
        Registry().reward("helpers_reexport:system")


def test_an_installed_module_not_allowed_is_refused_before_it_is_imported(tmp_path, monkeypatch):
    """A module on sys.path (as site-packages is) but not in the recipe's or the current folder,
    not a plugin's and not allow-listed: refused by its location, its code never run."""
    marker = tmp_path / "imported"
    elsewhere = tmp_path / "site"
    marker_module(elsewhere, "sidefx_installed", marker)
    monkeypatch.syspath_prepend(str(elsewhere))
    monkeypatch.chdir(tmp_path)
    registry = Registry(imports=ImportPolicy(recipe_folder=tmp_path / "r"))
    with pytest.raises(RlvrError, match=r"module 'sidefx_installed' \(at .*sidefx_installed.py\) is not in the "
                       r"recipe's folder or the current folder, not part of an rlvr plugin and not allow-listed: "
                       r"allow it with --allow-module sidefx_installed"):
        registry.reward("sidefx_installed:exact")
    assert not marker.exists() and "sidefx_installed" not in sys.modules
    with pytest.raises(RlvrError, match="module 'yaml' .* not allow-listed"):  # a real site-packages module
        registry.reward("yaml:load")


def test_the_recipes_folder_and_the_current_folder_resolve_without_sys_path(tmp_path, monkeypatch):
    from rlvr.api.python import prepare

    marker = tmp_path / "imported"
    folder = tmp_path / "project"
    marker_module(folder, "api_beside", marker)
    monkeypatch.chdir(tmp_path)
    rec, registry = prepare(recipe(folder, "api_beside:exact"), None, None, None, None)
    source = registry.reference("api_beside:exact")
    assert (source.reason, source.path) == ("in the recipe's folder", str(folder / "api_beside.py"))
    assert registry.reward("api_beside:exact").columns == ("answer",) and marker.exists()
    # the current folder, and a module there shadowing an installed one is the folder's
    (tmp_path / "cwd_rewards.py").write_text("def r(completions, **kwargs):\n    return [1.0] * len(completions)\n")
    assert Registry().reference("cwd_rewards:r").reason == "in the current folder"


def test_the_documented_trl_rewards_are_allowed_and_plugin_packages_are_not(tmp_path, monkeypatch, trl_rewards):
    """TRL's documented rewards by reference; a plugin's package is no source of references (a
    recipe names what plugins registered): its hundreds of callables include an ``exec``."""
    monkeypatch.chdir(tmp_path)
    registry = load_registry()
    assert DEFAULT_ALLOWED == ("trl.rewards",)
    source = registry.reference("trl.rewards:think_format_reward")
    assert source.reason == "allowed by default" and source.path == str(Path(trl_rewards.__file__).parents[1])
    assert registry.reward("trl.rewards:think_format_reward").convention == "trl"
    with pytest.raises(RlvrError, match="module 'trl' .* not allow-listed"):  # the rest of trl is not
        registry.reference("trl:GRPOTrainer")
    for kind in ("reward", "tool"):
        with pytest.raises(RlvrError, match=f"{kind} 'rlvr_plugins.format_reward:format_reward': module "
                           "'rlvr_plugins.format_reward' is part of rlvr's plugins, which a recipe names by what "
                           "they registered"):
            registry.reference("rlvr_plugins.format_reward:format_reward", kind=kind)


def test_a_refused_or_missing_reference_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for reference, message in [("nope_module_xyz:f", "cannot import 'nope_module_xyz': no module named"),
                               ("a-b:f", "'a-b' is not a module name"),
                               ("mod:", "a reference is module:function")]:
        with pytest.raises(RlvrError, match=message) as err:
            Registry().reward(reference)
        assert "\n" not in str(err.value)


def test_trl_rewards_without_trl_say_how_to_install_it(tmp_path, monkeypatch):
    """A recipe naming trl.rewards without TRL installed is told rlvr's extra for it, in the
    words a missing tracker is (it said only that no module named 'trl' is installed)."""
    from rlvr.host import imports

    find_top = imports._find_top
    monkeypatch.setattr(imports, "_find_top", lambda top: None if top == "trl" else find_top(top))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RlvrError) as err:
        Registry().reward("trl.rewards:accuracy_reward")
    assert str(err.value) == ("reward 'trl.rewards:accuracy_reward': cannot import 'trl.rewards': no module named "
                              "'trl' is installed: pip install 'rlvr[trl]' (in a checkout of rlvr: pip install -e "
                              "'.[trl]')")


def test_the_extras_named_in_errors_are_rlvrs():
    import tomllib

    from rlvr.kit.text import EXTRAS

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert set(EXTRAS) <= set(pyproject["project"]["optional-dependencies"])
