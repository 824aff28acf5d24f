"""The Python API: rlvr.api.train / rlvr.api.evaluate with a recipe as data, plain callables as rewards
(rlvr's or TRL's convention) and plain rows as tasks; checked before any model loads."""

from __future__ import annotations

from pathlib import Path

import pytest

import rlvr.api
from rlvr import RlvrError
from rlvr.api.python import prepare, task_from_rows

ROOT = Path(__file__).resolve().parents[2]
ROWS = [{"question": f"What is {a} + {b}?", "answer": str(a + b)} for a in range(1, 21) for b in range(1, 21)]
RECIPE = {"name": "api", "task": "sums", "prompt": {"template": "{{question}}"},
          "sampling": {"num_generations": 4}, "trainer": {"rollout_batch_size": 8, "micro_batch_size": 4}}


def trl_exact(completions, answer, **kwargs):
    return [float(c[0]["content"].strip() == a) for c, a in zip(completions, answer)]


def test_rows_become_a_task_with_a_held_out_split():
    spec = task_from_rows("sums", ROWS)
    train, test = spec.fn("train"), spec.fn("test")
    assert spec.columns == ("question", "answer") and spec.splits == ("train", "test")
    assert len(train) + len(test) == 400 and 40 < len(test) < 120
    assert not {r["question"] for r in train} & {r["question"] for r in test}
    assert task_from_rows("sums", ROWS).fn("test") == test  # by a hash of each row: the same every time
    given = task_from_rows("t", {"train": ROWS[:5], "dev": ROWS[5:7]})
    assert given.splits == ("train", "dev") and len(given.fn("dev")) == 2
    assert task_from_rows("f", lambda split: ROWS[:3] if split == "train" else ROWS[3:4]).fn("test") == ROWS[3:4]
    with pytest.raises(RlvrError, match="task 'empty': no rows"):
        task_from_rows("empty", [])


def test_prepare_adds_the_callables_and_checks_everything():
    rec, registry = prepare(RECIPE, {"trainer.steps": 3}, {"exact": trl_exact}, {"sums": ROWS}, None)
    assert rec.trainer.steps == 3 and rec.rewards["exact"].weight == 1.0 and rec.task.name == "sums"
    assert registry.reward("exact").convention == "trl" and registry.reward("exact").plugin == "python"
    listed = {**RECIPE, "rewards": {"exact": 0.5, "math": 1.0}}  # the recipe's weight stands
    rec, _ = prepare(listed, ["trainer.steps=2"], {"exact": trl_exact}, {"sums": ROWS}, None)
    assert rec.rewards["exact"].weight == 0.5 and list(rec.rewards) == ["exact", "math"]
    with pytest.raises(RlvrError, match="reward 'math' is already registered by plugin 'math'"):
        prepare(RECIPE, None, {"math": trl_exact}, {"sums": ROWS}, None)
    with pytest.raises(RlvrError, match="needs column 'solution'"):
        prepare(RECIPE, None, {"acc": lambda completions, solution, **kw: []}, {"sums": ROWS}, None)
    with pytest.raises(RlvrError, match="did you mean the alias 'smollm2-135m-instruct'"):
        prepare(RECIPE, {"model.name": "smollm2-135m-instruc"}, {"exact": trl_exact}, {"sums": ROWS}, None)
    with pytest.raises(RlvrError, match="trainr: unknown setting \\(did you mean 'trainer'\\?\\)"):
        prepare(RECIPE, ["trainr.steps=2"], {"exact": trl_exact}, {"sums": ROWS}, None)
    with pytest.raises(RlvrError, match="not one string"):
        prepare(RECIPE, "trainer.steps=2", {"exact": trl_exact}, {"sums": ROWS}, None)


def short(completions, **kwargs):
    return [-len(c[0]["content"]) / 100 for c in completions]


def test_rewards_as_trls_list_named_by_function_weighted_in_order():
    """TRL's ``reward_funcs`` style: a list (rlvr.api.train(rewards=[fn]) raised AttributeError)."""
    rec, registry = prepare(RECIPE, None, [trl_exact, short], {"sums": ROWS}, None)
    assert {n: e.weight for n, e in rec.rewards.items()} == {"trl_exact": 1.0, "short": 1.0}
    assert registry.reward("trl_exact").convention == "trl"
    rec, _ = prepare(RECIPE, None, [trl_exact, short], {"sums": ROWS}, None, weights=[2.0, 0.5])
    assert {n: e.weight for n, e in rec.rewards.items()} == {"trl_exact": 2.0, "short": 0.5}
    listed = {**RECIPE, "rewards": {"short": {"weight": 3.0, "options": {}}}}  # reward_weights replace the recipe's
    rec, _ = prepare(listed, None, [trl_exact, short], {"sums": ROWS}, None, weights=[2.0, 0.5])
    assert {n: e.weight for n, e in rec.rewards.items()} == {"short": 0.5, "trl_exact": 2.0}
    rec, _ = prepare(RECIPE, None, {"exact": trl_exact}, {"sums": ROWS}, None, weights=[0.25])  # a mapping, in order
    assert rec.rewards["exact"].weight == 0.25
    rec, _ = prepare(RECIPE, None, short, {"sums": ROWS}, None)  # one function, as TRL takes it
    assert list(rec.rewards) == ["short"]
    for rewards, weights, message in [
            ([lambda completions, **kw: []], None, r"rewards\[0\]: a lambda has no name .* pass rewards=\{'a_name': fn"),
            ([short, short], None, "two functions named 'short'"),
            ([short, "math"], None, r"rewards\[1\]: 'math' is not a function"),
            ("math", None, "a list of reward functions or a mapping"),
            ([trl_exact, short], [1.0], r"reward_weights: 1 weights for 2 rewards \(trl_exact, short\)"),
            ([short], 2.0, "reward_weights: a list of numbers")]:
        with pytest.raises(RlvrError, match=message) as caught:
            prepare(RECIPE, None, rewards, {"sums": ROWS}, None, weights=weights)
        assert "\n" not in str(caught.value)
    with pytest.raises(RlvrError, match="reward_weights: 1 weights for 2 rewards"):  # through the API, before a model
        rlvr.api.train(RECIPE, rewards=[trl_exact, short], reward_weights=[1.0], tasks={"sums": ROWS})


def test_the_namespace_holds_rlvrs_own_names():
    """``dir(rlvr)`` showed Any, dataclass, field, pluggy and annotations beside rlvr's API."""
    import pkgutil

    subpackages = {m.name for m in pkgutil.iter_modules(rlvr.__path__)}
    public = {name for name in dir(rlvr) if not name.startswith("_")}
    assert public - subpackages == set(rlvr.__all__) - {"__version__"}
    assert all(hasattr(rlvr, name) for name in rlvr.__all__)
    # what the project imports from rlvr still comes from there
    from rlvr import Reply, RlvrError, Score, __version__, hookimpl  # noqa: F401

    assert Score(None).info == {} and Score.__dataclass_params__.frozen


def test_bad_input_raises_before_any_model_loads(tmp_path):
    with pytest.raises(RlvrError, match="unknown task 'sumz'"):
        rlvr.api.train({**RECIPE, "task": "sumz"}, rewards={"exact": trl_exact}, tasks={"sums": ROWS},
                       output_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_the_readme_snippet_resolves_and_calls_the_engine(tmp_path, monkeypatch):
    """The README's Python example, run with the engine and the evaluator replaced by recorders:
    its recipe, overrides, rewards and rows are what rlvr.api.train and rlvr.api.evaluate accept."""
    import json
    import re

    import rlvr.evaluation.evaluate as evaluation
    import rlvr.training.engine as engine

    block = re.search(r"```python\n(from rlvr.api import evaluate, train\n.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    seen = []

    def fake_train(recipe, registry, output_dir, resume=False, verbose=False):
        seen.append(("train", recipe, registry))
        (output_dir / "final").mkdir(parents=True)
        (output_dir / "final" / "config.json").write_text("{}")
        (output_dir / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward_mean": 0.5}) + "\n")
        return {"eval_after": {"accuracy": 0.5}}

    def fake_evaluate(recipe, registry, output_dir):
        seen.append(("eval", recipe, registry))
        return {"accuracy": 0.25}

    monkeypatch.setattr(engine, "train", fake_train)
    monkeypatch.setattr(evaluation, "evaluate", fake_evaluate)
    monkeypatch.chdir(ROOT)
    block = block.replace('output_dir="runs/sums"', f'output_dir={str(tmp_path / "sums")!r}')
    block = block.replace('tasks={"sums": rows}).report', f'tasks={{"sums": rows}}, output_dir={str(tmp_path / "ev")!r}).report')
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    (_, trained, registry), (_, evaluated, _) = seen
    assert trained.task.name == "sums" and list(trained.rewards) == ["exact_number"] and trained.trainer.steps == 16
    assert registry.reward("exact_number").convention == "trl" and evaluated.model.name == str(tmp_path / "sums" / "final")
    assert namespace["report"] == {"accuracy": 0.25}


def test_a_run_gives_back_the_callers_random_state(tmp_path, monkeypatch):
    """A run seeds the global generators for its own reproducibility; the caller's sequence goes
    on as if no run had happened, after a run that ends and after one that fails."""
    import random

    import numpy as np
    import torch

    import rlvr.training.engine as engine

    def seeding_train(recipe, registry, output_dir, resume=False, verbose=False):
        random.seed(1), np.random.seed(1), torch.manual_seed(1)
        if recipe.trainer.steps == 3:
            raise RlvrError("failed mid-run")
        return {}

    monkeypatch.setattr(engine, "train", seeding_train)
    for steps, out in ((2, "a"), (3, "b")):
        random.seed(7), np.random.seed(7), torch.manual_seed(7)
        expected = (random.random(), np.random.rand(), torch.rand(1).item())
        random.seed(7), np.random.seed(7), torch.manual_seed(7)
        try:
            rlvr.api.train(RECIPE, overrides={"trainer.steps": steps}, rewards={"exact": trl_exact},
                           tasks={"sums": ROWS}, output_dir=tmp_path / out)
        except RlvrError:
            assert steps == 3
        assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected
