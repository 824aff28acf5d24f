"""The Python API: rlvr.api.train / rlvr.api.evaluate with a recipe as data, plain callables as rewards
(rlvr's or TRL's convention) and plain rows as tasks; checked before any model loads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import rlvr.api
from rlvr import RlvrError
from rlvr.api.python import prepare, task_from_rows

ROOT = Path(__file__).resolve().parents[1]
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


@pytest.mark.slow
def test_train_then_evaluate_from_python(tmp_path, tiny_model, monkeypatch):
    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path / "trackio"))  # trackio, offline: a local database
    before = {k: os.environ.get(k) for k in ("RANK", "MASTER_PORT")}
    sets = {"model.name": tiny_model, "sampling.backend": "hf", "sampling.max_tokens": 8, "trainer.steps": 2,
            "trainer.samples_every": 1, "eval.limit": 4, "trainer.eval_at_end": True,
            "trainer.report_to": ["tensorboard", "trackio"]}
    result = rlvr.api.train(RECIPE, overrides=sets, rewards={"exact": trl_exact, "short": lambda completions, **kw: [
        -len(c[0]["content"]) / 100 for c in completions]}, tasks={"sums": ROWS}, output_dir=tmp_path / "run")
    assert (result.final_model / "config.json").exists()
    assert [r["step"] for r in result.metrics()] == [1, 2] and "reward/short" in result.metrics()[0]
    assert {r["step"] for r in result.samples()} == {1, 2} and result.samples(2)[0]["rewards"]["short"] <= 0
    assert result.summary["eval_after"]["n"] == 4
    from trackio.sqlite_storage import SQLiteStorage

    tracked = SQLiteStorage.get_logs("api", "run")  # project: the recipe's name; run: the folder's
    assert [r["step"] for r in tracked] == [1, 2] and tracked[1]["loss"] == result.metrics()[1]["loss"]
    assert any((tmp_path / "run" / "tensorboard").iterdir())
    ev = rlvr.api.evaluate(RECIPE, result.final_model, overrides={"sampling.backend": "hf", "eval.limit": 4,
                                                                  "eval.max_tokens": 8},
                           rewards={"exact": trl_exact}, tasks={"sums": ROWS}, output_dir=tmp_path / "ev")
    assert ev.report["n"] == 4 and 0 <= ev.accuracy <= 1 and len(ev.samples()) == 4
    assert (tmp_path / "ev" / "eval.log").exists()
    # the world of one is gone with the run: a child process, or the next run, does not find its port
    assert {k: os.environ.get(k) for k in ("RANK", "MASTER_PORT")} == before


def run_example(name: str, model, output_dir, steps: int) -> subprocess.CompletedProcess:
    """``examples/python-api/NAME`` on ``model`` (hf sampling, short answers, 4 eval prompts)."""
    script = ROOT / "examples/python-api" / name
    done = subprocess.run([sys.executable, str(script), f"model.name={model}", "sampling.backend=hf",
                           "sampling.max_tokens=8", f"trainer.steps={steps}", "eval.limit=4", "--output-dir",
                           str(output_dir)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.mark.slow
def test_the_example_script_runs(tmp_path, tiny_model):
    done = run_example("train_sums.py", tiny_model, tmp_path / "run", steps=1)
    assert "held-out accuracy" in done.stdout and (tmp_path / "run" / "final" / "config.json").exists()


@pytest.mark.slow
def test_the_notebook_example_stops_the_broken_run_then_trains_and_evaluates(tmp_path, tiny_model):
    """examples/python-api/trl_notebook.py: a conversational JSONL, TRL's list of rewards with
    weights (one raising), two rlvr.api.train calls and rlvr.api.evaluate in one process. The first run
    stops, the second trains, the evaluation runs."""
    out = run_example("trl_notebook.py", tiny_model, tmp_path / "nb", steps=3).stdout
    assert ("RlvrError: no sample could be scored in 3 consecutive steps, so nothing was trained: reward "
            "'typo_reward' could not score") in out, out[-3000:]
    assert "steps (step, reward, optimizer steps): [(1, " in out and "a sample of step 3:" in out
    assert "held-out accuracy of the trained model:" in out and "on 4 problems" in out
    assert (tmp_path / "nb" / "run2" / "final" / "config.json").exists()
    assert not (tmp_path / "nb" / "run1" / "final").exists()  # the stopped run saved no "trained" model


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
