"""docs/hooks.md and the hookspec docstrings, held against the live plugin host so they cannot drift.

Every hookspec has a section in docs/hooks.md headed by its exact signature; every argument of the
``register`` callback the host really passes is documented in the docstring and in the docs, and has
the signature of the hookspec's Protocol; the reward contract is written once, in docs/hooks.md, and
what it says about a reward's parameters is what ``reward_signature`` does; and every code block in
docs/hooks.md runs.
"""

import inspect
import itertools
import re
import types
import typing
from pathlib import Path

import pytest

from rlvr import Reply, hookimpl
from rlvr.host import hookspecs
from rlvr.host.registry import get_plugin_manager, load_registry, reward_signature
from rlvr.rewards.runner import BoundReward, run_reward
from helpers.docs import check_recipe, fenced_blocks, recipe_blocks

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "hooks.md"
HOOKS = sorted(
    name for name in dir(hookspecs)
    if get_plugin_manager(load_entry_points=False).parse_hookspec_opts(hookspecs, name) is not None
)


def docs_sections() -> dict[str, str]:
    """docs/hooks.md's ``## `` sections: heading -> text."""
    parts = re.split(r"^## (.+)$", DOCS.read_text(), flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def spec_heading(name: str) -> str:
    """``rlvr_register_rewards(register: RegisterReward)``: the hook's name and signature."""
    hints = typing.get_type_hints(getattr(hookspecs, name))
    params = inspect.signature(getattr(hookspecs, name)).parameters
    return f"{name}({', '.join(f'{p}: {hints[p].__name__}' for p in params)})"


def live_callbacks() -> dict[str, typing.Callable]:
    """The ``register`` object the host passes to each hook, captured by a throwaway plugin."""
    captured = {}

    def capture(hook_name):
        @hookimpl(specname=hook_name)
        def impl(register):
            captured[hook_name] = register

        return impl

    plugin = types.ModuleType("capture")
    for name in HOOKS:
        setattr(plugin, name, capture(name))
    pm = get_plugin_manager(load_entry_points=False)
    pm.register(plugin)
    load_registry(pm)
    return captured


def bare(sig: inspect.Signature) -> str:
    """A signature as the docs write it: names and defaults, no annotations."""
    params = [p.replace(annotation=p.empty) for p in sig.parameters.values()]
    return str(sig.replace(parameters=params, return_annotation=sig.empty))


def one_line(text: str) -> str:
    return " ".join(text.split())


# What a commented reward parameter line says, ``name=default,  # <kind>: <class>``, and how to check it.
PARAM_COMMENT = re.compile(r"^\s*(\*\*)?(\w+)(=[^,)#]*)?[,)]\)?:?\s*#\s*(.+?):\s*(.+)$")
KINDS = {  # the docs' words for a parameter's kind -> does this inspect.Parameter have it?
    "no default": lambda p: p.kind is p.KEYWORD_ONLY and p.default is p.empty,
    "default None": lambda p: p.kind is p.KEYWORD_ONLY and p.default is None,
    "any other default": lambda p: p.kind is p.KEYWORD_ONLY and p.default not in (p.empty, None),
    "**kwargs": lambda p: p.kind is p.VAR_KEYWORD,
}
CLASSES = {  # the docs' words for what the host makes of it -> is that what reward_signature did?
    "a required column": lambda name, sig: name in sig[0],
    "an optional column": lambda name, sig: name in sig[1],
    "an option a recipe sets": lambda name, sig: name in sig[2],
    "gets every other column": lambda name, sig: sig[3],
}


def check_claim(line: str, param: inspect.Parameter, kind: str, said: str, sig: tuple) -> str:
    """One statement ``<kind>: <class>`` about ``param``, against ``reward_signature``; the class named."""
    assert kind in KINDS, f"{line!r}: unknown kind {kind!r}; one of {list(KINDS)}"
    assert KINDS[kind](param), f"{line!r}: {param.name} is not '{kind}'"
    classes = [c for c in CLASSES if said.startswith(c)]
    assert classes, f"{line!r}: says none of {list(CLASSES)}"
    assert CLASSES[classes[0]](param.name, sig), f"{line!r}: reward_signature gives {sig}"
    return classes[0]


def check_parameter_comments(source: str, fn: typing.Callable) -> set[str]:
    """Each ``param,  # kind: class`` comment in ``source``, against ``fn``; the classes named."""
    params, sig = inspect.signature(fn).parameters, reward_signature(fn)
    matches = (PARAM_COMMENT.match(line) for line in source.splitlines())
    return {check_claim(m[0], params[m[2]], m[4], m[5], sig) for m in matches if m}


def check_contract_bullets(text: str, fn: typing.Callable) -> set[str]:
    """Each ``- kind: class`` bullet in ``text``, against the parameter of ``fn`` of that kind."""
    params, sig = inspect.signature(fn).parameters, reward_signature(fn)
    named = set()
    for line in text.replace("`", "").splitlines():
        match = re.match(r"^- (.+?): (.+)$", line)
        if match and match[1] in KINDS:
            param = next(p for p in params.values() if KINDS[match[1]](p))
            named.add(check_claim(line, param, match[1], match[2], sig))
    return named


def docs_reward_example() -> tuple[str, typing.Callable]:
    """docs/hooks.md's commented example reward (its first python block), and that function."""
    source = fenced_blocks(DOCS, "python")[0]
    return source, docs_plugin(0, source).exact


def test_every_hookspec_has_a_docs_section_with_its_signature():
    assert HOOKS, "no hookspecs found"
    headings = docs_sections()
    for name in HOOKS:
        assert spec_heading(name) in headings, f"docs/hooks.md has no heading '## {spec_heading(name)}'"
    documented = {h.split("(")[0] for h in headings if h.startswith("rlvr_")}
    assert documented == set(HOOKS), "docs/hooks.md documents hooks that do not exist"


@pytest.mark.parametrize("name", HOOKS)
def test_register_callback_matches_its_protocol_and_its_docs(name):
    callback = live_callbacks()[name]
    protocol = typing.get_type_hints(getattr(hookspecs, name))["register"]
    assert typing.Protocol in protocol.__mro__, f"{name}: annotate register with a typing.Protocol"
    expected = inspect.signature(protocol.__call__, eval_str=True)
    expected = expected.replace(parameters=list(expected.parameters.values())[1:])  # drop self
    assert inspect.signature(callback, eval_str=True) == expected

    call = f"register{bare(expected)}"
    docstring = one_line(inspect.getdoc(getattr(hookspecs, name)))
    section = one_line(docs_sections()[spec_heading(name)])
    assert call in docstring, f"{name}'s docstring does not show {call}"
    assert call in section, f"docs/hooks.md's {name} section does not show {call}"
    for param in expected.parameters:
        assert f":param {param}:" in docstring, f"{name}'s docstring lacks ':param {param}:'"
        assert f"- `{param}`:" in section, f"docs/hooks.md's {name} section lacks '- `{param}`:'"


def test_reward_contract_is_what_reward_signature_does():
    """Every kind of parameter the contract names is stated, and stated as the host treats it."""
    example, fn = docs_reward_example()
    assert check_parameter_comments(example, fn) >= set(CLASSES) - {"gets every other column"}

    def full(prompts, completions, completion_ids, *, answer, aliases=None, strict=True, **columns):
        pass

    section = docs_sections()[spec_heading("rlvr_register_rewards")]
    assert check_contract_bullets(section, full) == set(CLASSES)


def test_reward_contract_is_written_once():
    """The hookspec's docstring and the README point to docs/hooks.md's contract instead of
    restating it (a second copy is one that can drift)."""
    docstring = inspect.getdoc(hookspecs.rlvr_register_rewards)
    readme = (ROOT / "README.md").read_text()
    assert "### The reward contract" in docs_sections()[spec_heading("rlvr_register_rewards")]
    assert "docs/hooks.md" in docstring and "docs/hooks.md#the-reward-contract" in readme
    for name, text in (("the rlvr_register_rewards docstring", docstring), ("README.md", readme)):
        stated = [line for line in text.replace("`", "").splitlines()
                  if PARAM_COMMENT.match(line) or re.match(rf"^\s*- ({'|'.join(map(re.escape, KINDS))}):", line)]
        assert not stated, f"{name} restates the reward contract: {stated}"


def test_reward_contract_checker_catches_a_wrong_statement():
    def fn(prompts, completions, completion_ids, *, hint=None):
        pass

    with pytest.raises(AssertionError, match="reward_signature gives"):
        check_parameter_comments("    hint=None,  # default None: an option a recipe sets", fn)


def docs_plugin(index: int, source: str) -> types.ModuleType:
    module = types.ModuleType(f"hooks_md_example_{index}")
    exec(compile(source, f"docs/hooks.md python block {index}", "exec"), module.__dict__)
    return module


def test_every_docs_example_runs(tmp_path):
    blocks = fenced_blocks(DOCS, "python")
    assert blocks
    for index, source in enumerate(blocks):
        pm = get_plugin_manager(load_entry_points=False)
        pm.register(docs_plugin(index, source))
        registry = load_registry(pm)
        assert registry.rewards or registry.tasks or registry.environments or registry.tools, \
            f"python block {index} registers nothing"
        for spec in registry.rewards.values():
            check_parameter_comments(source, spec.fn)
            rows = [{column: "42" for column in spec.columns}]
            run = run_reward(BoundReward(spec), ["What is 6 * 7?"], ["42"], [None], rows)
            assert not run.failed and len(run.values) == 1, (spec.name, run.message(spec.name))
        for spec in registry.environments.values():
            env = spec.fn({"question": "What is 6 * 7?", "answer": "42"})
            assert env.stop and isinstance(env.step("It is 42."), Reply), spec.name
        for spec in registry.tasks.values():
            for split in spec.splits:
                rows = list(itertools.islice(spec.fn(split, data_dir=tmp_path), 3))
                assert rows and all(set(spec.columns) <= set(row) for row in rows), (spec.name, split)


def test_docs_recipe_validates_against_the_docs_plugins(tmp_path):
    pm = get_plugin_manager(load_entry_points=False)
    for index, source in enumerate(fenced_blocks(DOCS, "python")):
        pm.register(docs_plugin(index, source))
    registry = load_registry(pm)
    recipes = recipe_blocks(DOCS)
    assert recipes
    for index, text in enumerate(recipes):
        check_recipe(text, registry, tmp_path, f"hooks-md-{index}")
