"""The plugin host: discovery, registration, duplicates, allow-list, tracing, hook docs."""

import inspect
from pathlib import Path

import pluggy
import pytest

from rlvr import RlvrError, Score, hookimpl, hookspecs
from rlvr.plugins import get_plugin_manager, load_registry


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
    assert sorted(specs) == ["rlvr_register_rewards", "rlvr_register_tasks"]
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
    assert len(list(spec.load("train", data_dir=None))) == 3


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


def test_bad_reward_signature_is_rejected():
    class Bad:
        @hookimpl
        def rlvr_register_rewards(self, register):
            register("bad", lambda completions: [1.0])

    with pytest.raises(RlvrError, match="takes \\(prompts, completions, completion_ids"):
        load_registry(manager_with(Bad()))


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
    test, test_rows = questions("test", 500)
    assert len(train) == 3000
    assert not set(train) & set(test)
    assert len(test) == len(set(test)) < 500  # 800 expressions, one in five held out, no repeats
    assert all(str(eval(q[8:-1])) == r["answer"] for q, r in zip(test, test_rows))
    assert questions("test", 500)[0] == test  # deterministic


def test_sampler_dtype_follows_hardware(tmp_path):
    from rlvr.samplers import cpu_has_bf16, sampler_dtype

    plain, amx = tmp_path / "plain", tmp_path / "amx"
    plain.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_vnni\n")
    amx.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16\n")
    assert not cpu_has_bf16(str(plain)) and cpu_has_bf16(str(amx))
    assert not cpu_has_bf16(str(tmp_path / "missing"))
    assert sampler_dtype("auto", on_cpu=False) == "bfloat16"
    assert sampler_dtype("float16", on_cpu=True) == "float16"
    assert sampler_dtype("auto", on_cpu=True, cpuinfo=str(plain)) == "float32"
    assert sampler_dtype("auto", on_cpu=True, cpuinfo=str(amx)) == "bfloat16"
