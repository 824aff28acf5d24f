"""A recipe names only what plugins registered or code its user chose, and runs nothing outside the
sandbox unless its user allows it (rlvr.host.imports, rlvr.kit.trust).

A trial recipe with no Python file in it named a plugin's private ``exec`` helper as a tool
(``rlvr_plugins.pyfunc:_run_reference``) with ``run: process``; ``rlvr validate`` said ok, and
``rlvr eval`` wrote ``uid=0(root)`` to a file because the model copied the call from its prompt.
"""

from __future__ import annotations

import re
import textwrap
import typing
from pathlib import Path
from typing import Annotated, Literal

import pytest

from rlvr import RlvrError
from rlvr.host.imports import UNSANDBOXED_ENV, ImportPolicy
from rlvr.host.registry import load_registry
from rlvr.kit import Unsandboxed, unsandboxed_values
from rlvr.recipe.load import load_recipe
from rlvr.recipe.resolve import resolve
from helpers.host_trust import TOOLS_RECIPE, write_recipe

def resolved(path: Path, unsandboxed: bool = False, allowed: tuple[str, ...] = ()):
    registry = load_registry()
    registry.imports = ImportPolicy(allowed=allowed, unsandboxed=unsandboxed)
    registry.use_recipe(path)
    recipe = load_recipe(path)
    resolve(recipe, registry)
    return recipe, registry


@pytest.mark.parametrize("tool, message", [
    ('"rlvr_plugins.pyfunc:_run_reference"', "'_run_reference' is private (it starts with _)"),
    ('"rlvr_plugins.tool_functions:calculator"', "module 'rlvr_plugins.tool_functions' is part of rlvr's plugins"),
    ('"rlvr_plugins.sandbox.jail.cage:unshare"', "module 'rlvr_plugins.sandbox.jail.cage' is part of rlvr's plugins"),
    ('"mytools:_helper"', "'_helper' is private (it starts with _)"),
    ('"mytools._impl:tool"', "module 'mytools._impl' is private ('_impl' starts with _)"),
])
def test_plugin_internals_and_private_names_are_no_references(tool, message, tmp_path, monkeypatch):
    """Refused before anything is imported (the trial's tool among them); a private name even where
    the user allow-listed its module (the reference, not the module, is private)."""
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "imported"
    (tmp_path / "mytools.py").write_text(f"open({str(marker)!r}, 'w').write('x')\ndef _helper(x: int) -> int:\n"
                                         "    '''h'''\n    return x\n")
    path = write_recipe(tmp_path, tool)
    private = "private" in message  # a plugin's public function is allowed where the user allow-lists it
    for allowed in ((), ("rlvr_plugins", "mytools")) if private else ((),):
        with pytest.raises(RlvrError, match=re.escape(f"tool {tool.strip(chr(34))!r}: ") + ".*" + re.escape(message)
                           ) as err:
            resolved(path, unsandboxed=True, allowed=allowed)
        assert "\n" not in str(err.value)
    assert not marker.exists()


def test_a_private_function_under_a_public_name_is_refused(tmp_path, monkeypatch):
    """A module beside the recipe that re-exports a plugin's private helper under a public name
    does not make it a reference; a public function of that module is one."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mytools.py").write_text(textwrap.dedent('''
        from rlvr_plugins.pyfunc import _run_reference as run_it

        def double(x: int) -> int:
            """Twice x."""
            return 2 * x
    '''))
    with pytest.raises(RlvrError, match="mytools:run_it is rlvr_plugins.pyfunc's private '_run_reference' under "
                       "another name: a recipe names no private code"):
        resolved(write_recipe(tmp_path, '"mytools:run_it"'))
    recipe, registry = resolved(write_recipe(tmp_path, '"mytools:double"'))
    assert registry.tool("mytools:double").name == "double"
    # as a reward too
    registry.imports = ImportPolicy()
    with pytest.raises(RlvrError, match="private '_run_reference' under another name"):
        registry.reward("mytools:run_it")


@pytest.mark.parametrize("text, where", [
    (TOOLS_RECIPE, "environment.options.run"),
    (TOOLS_RECIPE.replace("rewards: {{environment: 1.0}}",
                          "rewards: {{environment: 1.0, code: {{weight: 1.0, options: {{isolation: process}}}}}}"),
     "rewards.code.options.isolation"),
])
def test_code_outside_the_sandbox_needs_the_users_consent(text, where, tmp_path, monkeypatch):
    """``run: process`` and ``isolation: process`` run what the model writes with the user's
    rights: refused from a recipe unless the user allows it, by flag (here: the import policy the
    flag sets) or by RLVR_ALLOW_UNSANDBOXED."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(UNSANDBOXED_ENV, raising=False)
    options = "{run: process}" if where.startswith("environment") else "{}"
    text = text.replace("columns: [question, answer]", "columns: [question, answer, test_list]")
    path = write_recipe(tmp_path, '"calculator"', options, text)
    (tmp_path / "rows.jsonl").write_text('{"question": "q", "answer": "1", "test_list": ["assert True"]}\n' * 4)
    with pytest.raises(RlvrError, match=f"{where}: 'process' runs what the model writes outside the sandbox, with "
                       "your rights; a recipe may choose it only when you allow it: --allow-unsandboxed"):
        resolved(path)
    resolved(path, unsandboxed=True)
    for value in ("1", "true", "YES"):
        monkeypatch.setenv(UNSANDBOXED_ENV, value)
        resolved(path)
    for value in ("0", "no", ""):
        monkeypatch.setenv(UNSANDBOXED_ENV, value)
        with pytest.raises(RlvrError, match="only when you allow it"):
            resolved(path)
    monkeypatch.setenv(UNSANDBOXED_ENV, "maybe\x1b[2J")
    with pytest.raises(RlvrError, match=r"RLVR_ALLOW_UNSANDBOXED=maybe\\x1b\[2J: set it to 1"):
        resolved(path)


def test_a_marked_default_needs_consent_too(tmp_path, monkeypatch):
    """A plugin whose option defaults to a value outside the sandbox: the recipe that does not set
    it chooses it all the same."""
    from rlvr.host.registry import Spec

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(UNSANDBOXED_ENV, raising=False)

    def make_host_env(row, *, where: Annotated[Literal["sandbox", "host"], Unsandboxed("host")] = "host"):
        raise AssertionError("never made while resolving")

    registry = load_registry()
    registry.environments["host_env"] = Spec("host_env", make_host_env, "", "test", "")
    path = write_recipe(tmp_path, "", "{}").with_name("recipe.yaml")
    path.write_text(path.read_text().replace("name: tools, tools: [], ", "name: host_env, "))
    registry.use_recipe(path)
    with pytest.raises(RlvrError, match="environment.options.where: 'host' runs what the model writes outside"):
        resolve(load_recipe(path), registry)
    path.write_text(path.read_text().replace("options: {}", "options: {where: sandbox}"))
    resolve(load_recipe(path), registry)


def test_unsandboxed_values_are_read_through_annotations():
    Isolation = Annotated[Literal["bwrap", "process"], Unsandboxed("process")]
    assert unsandboxed_values(Isolation) == {"process"}
    assert unsandboxed_values(typing.Optional[Isolation]) == {"process"}
    assert unsandboxed_values(Annotated[Isolation, "doc"]) == {"process"}
    assert unsandboxed_values(Literal["process"]) == frozenset()
    assert unsandboxed_values(int) == frozenset()
    from rlvr_plugins import code_reward, python_env, tools_env

    import inspect
    for fn, name in ((code_reward.code_reward, "isolation"), (python_env.make_python_env, "isolation"),
                     (tools_env.make_tools_env, "isolation"), (tools_env.make_tools_env, "run")):
        hints = typing.get_type_hints(fn, include_extras=True)
        assert unsandboxed_values(hints[name]) == {"process"}, (fn, name)
        assert inspect.signature(fn).parameters[name].default != "process"


def test_the_python_api_asks_for_the_same_consent(tmp_path, monkeypatch):
    from rlvr.api.python import prepare

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(UNSANDBOXED_ENV, raising=False)
    path = write_recipe(tmp_path, '"calculator"', "{run: process}")
    with pytest.raises(RlvrError, match="environment.options.run: 'process' runs what the model writes outside"):
        prepare(path, None, None, None, None)
    recipe, _ = prepare(path, None, None, None, None, allow_unsandboxed=True)
    assert recipe.environment.options["run"] == "process"
