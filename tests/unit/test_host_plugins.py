"""The plugin host: discovery, registration, duplicates, allow-list, tracing, hook docs."""

import inspect
from pathlib import Path

import pluggy
import pytest

from rlvr import RlvrError, Score, hookimpl
from rlvr.host import hookspecs
from rlvr.host.registry import get_plugin_manager, load_registry


def manager_with(*plugins):
    pm = get_plugin_manager(load_entry_points=False)
    for i, plugin in enumerate(plugins):
        pm.register(plugin, name=f"p{i}")
    return pm


class RewardPlugin:
    @staticmethod
    @hookimpl
    def rlvr_register_rewards(register):
        def exact(prompts, completions, completion_ids, *, answer, strip: bool = True, extra=None):
            """1.0 when the completion equals the answer."""
            return [float((c.strip() if strip else c) == a) for c, a in zip(completions, answer)]

        register("exact", exact)


class TaskPlugin:
    @staticmethod
    @hookimpl
    def rlvr_register_tasks(register):
        def load(split, *, data_dir, size: int = 3):
            for i in range(size):
                yield {"q": str(i), "answer": str(i)}

        register("toy", load, columns=["q", "answer"], description="a toy")


def test_every_hookspec_is_documented_and_exercised():
    specs = [name for name in dir(hookspecs) if name.startswith("rlvr_")]
    assert sorted(specs) == ["rlvr_register_environments", "rlvr_register_rewards", "rlvr_register_tasks",
                             "rlvr_register_tools"]
    for name in specs:
        fn = getattr(hookspecs, name)
        assert inspect.getdoc(fn), name
        assert list(inspect.signature(fn).parameters) == ["register"]
        # this file has a test named after each hook
        assert f"test_hook_{name}" in globals(), name


def test_hook_rlvr_register_rewards():
    registry = load_registry(manager_with(RewardPlugin()))
    spec = registry.reward("exact")
    assert spec.plugin == "p0"
    assert spec.version == "not from a distribution"
    assert spec.columns == ("answer",)
    assert spec.optional_columns == ("extra",)
    assert spec.options == {"strip": True}
    assert spec.description == "1.0 when the completion equals the answer."
    assert spec.fn([""], [" 4 "], [None], answer=["4"]) == [1.0]


def test_hook_rlvr_register_tasks():
    registry = load_registry(manager_with(TaskPlugin()))
    spec = registry.task("toy")
    assert spec.columns == ("q", "answer") and spec.description == "a toy"
    assert len(list(spec.fn("train", data_dir=None))) == 3


def convert(value: float, unit: str = "m") -> float:
    """Convert a length.

    Args:
        value: the length
    """
    return value


def untyped(value):
    return value


class ToolPlugin:
    @staticmethod
    @hookimpl
    def rlvr_register_tools(register):
        register("convert", convert)
        register("untyped", untyped)
        register("described", convert, description="Converts.")


def test_hook_rlvr_register_tools(caplog):
    registry = load_registry(manager_with(ToolPlugin()))
    tool = registry.tool("convert")
    assert tool.fn is convert and tool.origin == "p0"
    assert tool.schema["function"]["parameters"] == {
        "type": "object", "required": ["value"],
        "properties": {"value": {"type": "number", "description": "the length"}, "unit": {"type": "string"}}}
    assert registry.tool("described").schema["function"]["description"] == "Converts."
    assert registry.tool("convert").schema["function"]["description"] == "Convert a length."
    with pytest.raises(RlvrError, match="parameter 'value' has no type hint"):
        registry.tool("untyped")
    assert "the tool is left out" in caplog.text


class EnvPlugin:
    @staticmethod
    @hookimpl
    def rlvr_register_environments(register):
        from rlvr import Reply

        class Echo:
            stop = ("\n",)

            def __init__(self, row, times):
                self.left = times

            def step(self, turn):
                self.left -= 1
                return Reply(turn.upper(), done=self.left <= 0)

        def make(row, *, times: int = 2):
            """Echoes the policy's turn in capitals."""
            return Echo(row, times)

        register("echo", make)


def test_hook_rlvr_register_environments():
    registry = load_registry(manager_with(EnvPlugin()))
    spec = registry.environment("echo")
    assert (spec.plugin, spec.description) == ("p0", "Echoes the policy's turn in capitals.")
    env = spec.fn({"q": "1"}, times=1)
    assert env.step("ab") == __import__("rlvr").Reply("AB", done=True)
    with pytest.raises(RlvrError, match="unknown environment 'ecko'.*did you mean 'echo'"):
        registry.environment("ecko")
    with pytest.raises(RlvrError, match="environment 'echo' is registered twice"):
        load_registry(manager_with(EnvPlugin(), EnvPlugin()))


def test_duplicate_names_fail_naming_both_plugins():
    with pytest.raises(RlvrError) as err:
        load_registry(manager_with(RewardPlugin(), RewardPlugin()))
    message = str(err.value)
    assert "'p0'" in message and "'p1'" in message and "did you mean" in message


def test_unknown_name_suggests_the_close_one():
    registry = load_registry(manager_with(RewardPlugin()))
    with pytest.raises(RlvrError, match="did you mean 'exact'"):
        registry.reward("exakt")


def test_misspelled_hook_fails_at_load():
    class Typo:
        @hookimpl
        def rlvr_register_reward(self, register):  # missing "s"
            pass

    pm = get_plugin_manager(load_entry_points=False)
    pm.register(Typo())
    with pytest.raises(pluggy.PluginValidationError):
        pm.check_pending()


def test_a_bad_reward_signature_fails_only_its_own_name(caplog):
    class Bad:
        @hookimpl
        def rlvr_register_rewards(self, register):
            register("bad", lambda x: [1.0])  # neither rlvr's (prompts, completions, completion_ids) nor TRL's keywords
            register("trl_style", lambda completions, **kwargs: [1.0] * len(completions))

    registry = load_registry(manager_with(Bad(), RewardPlugin()))
    assert registry.reward("exact").plugin == "p1" and registry.reward("trl_style").convention == "trl"
    with pytest.raises(RlvrError, match="plugin 'p0': reward 'bad': a reward takes \\(prompts, completions, "
                                        "completion_ids"):
        registry.reward("bad")
    warned = [r.getMessage() for r in caplog.records if "reward 'bad'" in r.getMessage()]
    assert len(warned) == 1 and warned[0].endswith("(the reward is left out)")


def test_builtins_come_from_entry_points():
    registry = load_registry(get_plugin_manager())
    for name in ("math", "code", "format", "overlong"):
        assert registry.reward(name).version.startswith("rlvr ")
    for name in ("gsm8k", "math", "humaneval", "arithmetic"):
        assert registry.task(name).plugin == "tasks"
    assert registry.task("pyfunc").plugin == "pyfunc"


def test_allow_list_env(monkeypatch):
    monkeypatch.setenv("RLVR_LOAD_PLUGINS", "")
    assert load_registry(get_plugin_manager()).rewards == {}
    monkeypatch.setenv("RLVR_LOAD_PLUGINS", "length")
    assert list(load_registry(get_plugin_manager()).rewards) == ["overlong"]


def test_trace_env(monkeypatch, capsys):
    monkeypatch.setenv("RLVR_TRACE_PLUGINS", "1")
    monkeypatch.setenv("RLVR_LOAD_PLUGINS", "length")
    load_registry(get_plugin_manager())
    assert "rlvr: hook rlvr_register_rewards -> [length]" in capsys.readouterr().err


def test_score_type_is_public():
    assert Score(1.0, {"why": "x"}).info == {"why": "x"}


def test_arithmetic_test_split_is_held_out():
    from rlvr_plugins.tasks import arithmetic

    def questions(split, size):
        rows = list(arithmetic(split, data_dir=Path("."), size=size, operations="+-", max_operand=20))
        return [r["question"] for r in rows], rows

    train, _ = questions("train", 3000)
    test, test_recipe_rows = questions("test", 500)
    assert len(train) == 3000
    assert not set(train) & set(test)
    assert len(test) == len(set(test)) < 500  # 800 expressions, one in five held out, no repeats
    assert all(str(eval(q[8:-1])) == r["answer"] for q, r in zip(test, test_recipe_rows))
    assert questions("test", 500)[0] == test  # deterministic


def test_word_problems_are_held_out_and_their_answers_follow_the_words():
    import re

    from rlvr_plugins.tasks import word_problems

    train = list(word_problems("train", data_dir=Path("."), size=2000))
    test = list(word_problems("test", data_dir=Path("."), size=400))
    assert len(train) == 2000 and len(test) == 400
    assert not {r["question"] for r in train} & {r["question"] for r in test}
    assert len({r["question"] for r in test}) == 400
    assert [r["question"] for r in word_problems("test", data_dir=Path("."), size=400)] == [r["question"] for r in test]
    solved = 0
    for r in test:  # hand-written readings of three of the templates
        n = [int(x) for x in re.findall(r"\d+", r["question"])]
        q = r["question"]
        if q.startswith("A warehouse"):
            assert int(r["answer"]) == n[0] * n[1] - n[2]
        elif q.startswith("Tickets"):
            assert int(r["answer"]) == n[2] - n[0] * n[1] > 0
        elif q.startswith("A printer"):
            assert int(r["answer"]) == n[0] * n[1] * 60
        else:
            continue
        solved += 1
    assert solved > 50 and all(int(r["answer"]) > 0 for r in test)
    with pytest.raises(RlvrError, match="splits train and test"):
        next(word_problems("validation", data_dir=Path(".")))


def test_sampler_dtype_follows_hardware(tmp_path, monkeypatch):
    from rlvr.kit.device import cpu_has_bf16, sampler_dtype

    plain, amx = tmp_path / "plain", tmp_path / "amx"
    plain.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_vnni\n")
    amx.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16\n")
    assert not cpu_has_bf16(str(plain)) and cpu_has_bf16(str(amx))
    assert not cpu_has_bf16(str(tmp_path / "missing"))
    assert sampler_dtype("auto", on_cpu=False) == "bfloat16"
    assert sampler_dtype("float16", on_cpu=True) == "float16"
    assert sampler_dtype("auto", on_cpu=True, cpuinfo=str(plain)) == "float32"
    assert sampler_dtype("auto", on_cpu=True, cpuinfo=str(amx)) == "bfloat16"
    # RLVR_CPUINFO: this machine takes the decisions of the CPU the file describes
    for described, dtype in ((plain, "float32"), (amx, "bfloat16")):
        monkeypatch.setenv("RLVR_CPUINFO", str(described))
        assert sampler_dtype("auto", on_cpu=True) == dtype and cpu_has_bf16() == (dtype == "bfloat16")


# ---------------------------------------------------------------------------- reward options
def registry_of(source: str, name: str = "plugin_under_test"):
    """Register a plugin module written as source text (its annotations are strings when it
    starts with ``from __future__ import annotations``)."""
    import types

    module = types.ModuleType(name)
    exec(compile(source, name, "exec"), module.__dict__)
    pm = get_plugin_manager(load_entry_points=False)
    pm.register(module, name=name)
    return load_registry(pm)


STRING_HINTS = '''
from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from annotated_types import Gt
from pydantic import Field

from rlvr import hookimpl

if TYPE_CHECKING:
    from not_installed import Completion  # a column's hint that cannot resolve: never looked at

Mode = Literal["boxed", "hash", "tag"]


def scored(prompts, completions: list[Completion], completion_ids, *, answer, extract: Mode = "boxed",
           timeout: Annotated[float, Gt(0)] = 5.0, workers: Annotated[int, Field(ge=0)] = 0, strict: bool = False):
    return [1.0] * len(completions)


@hookimpl
def rlvr_register_rewards(register):
    register("scored", scored)
'''


@pytest.mark.parametrize(
    "options, message",
    [
        ({"extract": "boxd"}, "option extract: 'boxd' is not one of boxed, hash, tag (did you mean 'boxed'?)"),
        ({"timeout": -5}, "option timeout: -5 is not a number > 0"),
        ({"timeout": float("inf")}, "option timeout: inf is not a number > 0"),
        ({"workers": -1}, "option workers: -1 is not an integer >= 0"),
        ({"workers": 1.5}, "option workers: 1.5 is not an integer >= 0"),
        ({"strict": "maybe"}, "option strict: 'maybe' is not true or false"),
        ({"strict": 2}, "option strict: 2 is not true or false"),
        ({"strict": 1}, "option strict: 1 is not true or false"),
        ({"extrct": "boxed"}, "has no option 'extrct' (did you mean 'extract'?); options: extract, timeout, workers, strict"),
    ],
)
def test_options_are_checked_from_string_annotations(scored, options, message):
    with pytest.raises(RlvrError) as err:
        scored.check_options(options)
    assert str(err.value) == f"reward 'scored' {message}"


@pytest.fixture(scope="module")
def scored():
    return registry_of(STRING_HINTS).reward("scored")


def test_checked_options_are_converted_and_only_those_given(scored):
    spec = scored
    assert spec.check_options({"timeout": 5, "extract": "tag", "strict": True}) == {"timeout": 5.0, "extract": "tag", "strict": True}
    assert isinstance(spec.check_options({"timeout": 5})["timeout"], float)
    assert spec.check_options({}) == {}
    assert spec.options == {"extract": "boxed", "timeout": 5.0, "workers": 0, "strict": False}
    assert [o.allowed for o in spec.checker.options.values()] == [
        "one of boxed, hash, tag", "a number > 0", "an integer >= 0", "true or false"]


def test_unresolvable_option_annotation_fails_registration_naming_the_plugin():
    source = STRING_HINTS.replace('Mode = Literal["boxed", "hash", "tag"]', "")
    registry = registry_of(source, "broken_hints")  # the other names of the plugin still work
    with pytest.raises(RlvrError) as err:
        registry.reward("scored")
    message = str(err.value)
    assert message.startswith("plugin 'broken_hints': reward 'scored': option extract: cannot resolve its annotation 'Mode'")
    assert "NameError" in message and "\n" not in message


def test_pydantic_field_as_a_default_is_refused_at_registration():
    source = "from pydantic import Field\nfrom rlvr import hookimpl\n" \
             "def r(prompts, completions, completion_ids, *, t: float = Field(5.0, gt=0)):\n    return []\n" \
             "@hookimpl\ndef rlvr_register_rewards(register):\n    register('r', r)\n"
    with pytest.raises(RlvrError, match="plugin 'p': reward 'r': option t: a pydantic Field"):
        registry_of(source, "p").reward("r")


def test_unannotated_options_keep_the_kind_of_their_default():
    from rlvr.host.registry import RewardSpec, reward_signature

    def loose(prompts, completions, completion_ids, *, strip=True, threshold=1, name="x", tags=()):
        return [1.0] * len(completions)

    spec = RewardSpec("loose", loose, "", "test", "0", *reward_signature(loose)[:4])
    assert spec.check_options({"threshold": 0.5, "tags": ["a"], "name": "y"}) == {"threshold": 0.5, "tags": ["a"], "name": "y"}
    assert spec.check_options({"threshold": 2}) == {"threshold": 2}  # kept an int
    for bad, said in [({"strip": 2}, "2 is not true or false"), ({"threshold": "1"}, "'1' is not a number"),
                      ({"threshold": True}, "True is not a number"), ({"name": 5}, "5 is not a string")]:
        with pytest.raises(RlvrError, match=f"option {next(iter(bad))}: {said}$"):
            spec.check_options(bad)


def test_options_named_like_model_attributes_and_enum_choices():
    import enum

    from rlvr.host.registry import RewardSpec, reward_signature

    class Level(enum.Enum):
        LOW = "low"
        HIGH = "high"

    def odd(prompts, completions, completion_ids, *, json: bool = False, copy: int = 1, level: Level = Level.LOW):
        return [1.0] * len(completions)

    spec = RewardSpec("odd", odd, "", "test", "0", *reward_signature(odd)[:4])
    assert spec.check_options({"json": True, "copy": 2, "level": "high"}) == {"json": True, "copy": 2, "level": Level.HIGH}
    with pytest.raises(RlvrError, match="option level: 'hgh' is not one of low, high \\(did you mean 'high'\\?\\)"):
        spec.check_options({"level": "hgh"})


BUILTIN_BAD_OPTIONS = [
    ("format", {"boxed": "two"}, "'two' is not one of one, any, none"),
    ("format", {"partial": "maybe"}, "'maybe' is not true or false"),
    ("format", {"think": 2}, "2 is not true or false"),
    ("code", {"timeout": -5}, "-5 is not a number > 0 and <= 3600"),
    ("code", {"timeout": 3601}, "3601 is not a number > 0 and <= 3600"),
    ("code", {"memory_mb": 63}, "63 is not an integer >= 64"),
    ("code", {"isolation": "none"}, "'none' is not one of bwrap, process"),
    ("code", {"partial": 1}, "1 is not true or false"),
    ("overlong", {"max_len": 0}, "0 is not an integer >= 1"),
    ("overlong", {"cache_len": -1}, "-1 is not an integer >= 0"),
]


@pytest.mark.parametrize("reward, options, said", BUILTIN_BAD_OPTIONS)
def test_builtin_reward_options_have_real_choices_and_ranges(reward, options, said):
    spec = load_registry(get_plugin_manager()).reward(reward)
    with pytest.raises(RlvrError) as err:
        spec.check_options(options)
    assert str(err.value) == f"reward {reward!r} option {next(iter(options))}: {said}"


def test_builtin_reward_defaults_and_edges_pass_their_own_checks():
    from rlvr_plugins import code_reward, sandbox

    registry = load_registry(get_plugin_manager())
    must_set = {"reward_model": "model"}  # no default could name the scorer: a recipe must set it
    for spec in registry.rewards.values():
        defaults = {k: v for k, v in spec.options.items() if must_set.get(spec.name) != k}
        assert spec.check_options(defaults) == defaults, spec.name  # defaults are allowed values
    with pytest.raises(RlvrError, match="reward 'reward_model' option model: '': no model given"):
        registry.reward("reward_model").check_options(registry.reward("reward_model").options)
    code = registry.reward("code")
    assert code.check_options({"timeout": 3600, "memory_mb": 64, "isolation": "process"})["timeout"] == 3600.0
    assert typing_args(code_reward.Isolation) == sandbox.ISOLATION_LEVELS


def typing_args(annotation):
    """A Literal's values, through Annotated (the sandbox's Isolation carries rlvr.kit.Unsandboxed)."""
    import typing

    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return typing.get_args(annotation)


def test_docs_option_error_is_what_the_host_says():
    """docs/hooks.md quotes an option error for its own example reward: it is the real message."""
    import re

    docs = (Path(__file__).resolve().parents[2] / "docs" / "hooks.md").read_text()
    quoted = " ".join(re.search(r"``(reward 'exact' option .*?)``", docs, re.S).group(1).split())
    source = re.search(r"```python\n(# rlvr_exact/__init__\.py.*?)```", docs, re.S).group(1)
    spec = registry_of(source, "docs_exact").reward("exact")
    value = re.search(r"option match: '(\w+)'", quoted).group(1)
    with pytest.raises(RlvrError) as err:
        spec.check_options({"match": value})
    assert str(err.value) == quoted
    assert spec.check_options({"ignore_case": True, "match": "anywhere"}) == {"ignore_case": True, "match": "anywhere"}
    with pytest.raises(RlvrError, match="option ignore_case: 2 is not true or false"):
        spec.check_options({"ignore_case": 2})  # unannotated: the kind of its default


@pytest.mark.parametrize("doc, first", [
    ("One line.", "One line."),
    ("No full stop at all", "No full stop at all"),
    ("A sentence over\n    two lines. Then more.", "A sentence over two lines."),
    ("Your data: a file (``path``: .jsonl, .json or .parquet) or folder (one\n    a split, ``<f>/<s>.jsonl``), or a hub"
     " id. ``columns`` lists them.", "Your data: a file (``path``: .jsonl, .json or .parquet) or folder (one a split, "
     "``<f>/<s>.jsonl``), or a hub id."),
    ("Arithmetic ('What is 7 + 3? Or 8.') with held-out items. Then.", "Arithmetic ('What is 7 + 3? Or 8.') with "
     "held-out items."),
    ('Problems ("A has 3. B has 4. How many?"), whole numbers. More.', 'Problems ("A has 3. B has 4. How many?"), '
     "whole numbers."),
    ("The reward's score, e.g. 0.5 or 1.0, per record.\n\nDetails.", "The reward's score, e.g. 0.5 or 1.0, per record."),
])
def test_a_description_is_the_docstrings_first_sentence_however_many_lines_it_takes(doc, first):
    """What `rlvr tasks` and `rlvr rewards` show: the first sentence whole, not its first line."""
    def task():
        pass

    task.__doc__ = doc
    from rlvr.host.registry import _describe

    assert _describe(task, None) == first
    assert _describe(task, "given") == "given"
